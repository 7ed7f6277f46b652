import type { CurrencyName } from "./money.js";
import type {
  LimitUnitName,
  RewardGrantCauseName,
  RewardGrantKindName,
  RewardGrantStatusName,
} from "./reward-ledger.js";
import type { EnvironmentName } from "./tenancy.js";

/**
 * A reward grant as the ledger's rules make and move it (see
 * reward-plan.ts): the grant, its value and history, and the plan of a
 * grant about to be made. The store keeps a grant with its outbox
 * (`RewardGrantDoc`).
 */

/** One entry of a grant's status history. */
export interface GrantStatusChange {
  /** The status before; null for the entry written at creation. */
  fromStatus: RewardGrantStatusName | null;
  toStatus: RewardGrantStatusName;
  cause: RewardGrantCauseName;
  /** An API key, a checkpoint (a grant earned by conversion), or "service". */
  actorId: string;
  reason: string | null;
  changedAt: Date;
}

/** A grant's value, the plain form of `referral.v1.RewardValue`. */
export interface GrantValue {
  type: "payout" | "discount";
  method: string | null;
  currency: CurrencyName | null;
  /** In units, derived from `amountMinor` when written; null for a percentage discount. */
  amount: number | null;
  discountPercentage: number | null;
  discountDurationInMonth: number | null;
}

/** How a grant was paid or handed over. */
export interface GrantFulfillment {
  reference: string | null;
  code: string | null;
  note: string | null;
  fulfilledAt: Date;
}

/**
 * A reward grant: one entry of the reward ledger. Apart from `_id` and the
 * storage fields marked so, its fields are the plain form of
 * `referral.v1.RewardGrant`.
 */
export interface GrantRecord {
  /** Public id, prefix `grt_`. */
  _id: string;
  organizationId: string;
  applicationId: string;
  environment: EnvironmentName;
  campaignId: string | null;
  rewardId: string | null;
  referralId: string | null;
  customerId: string;
  party: "referrer" | "referee" | null;
  kind: RewardGrantKindName;
  status: RewardGrantStatusName;
  statusReason: string | null;
  value: GrantValue;
  /** Storage: the value's amount in minor units (exact); null for a percentage discount. */
  amountMinor: number | null;
  requestedAmount: number | null;
  /**
   * Storage: the campaign reward as it was when granted, by its snapshot
   * (shown as `reward`); null for a value of its own.
   */
  rewardSnapshotId: string | null;
  limitWindow: string | null;
  ignoresLimit: boolean;
  /**
   * Storage, under a count limit: the slot the grant holds (`<key>#<n>`, n
   * from 1 to the limit), while it holds one. A unique index makes each
   * slot one grant's, so the grant and its room are one write.
   */
  limitSlot?: string;
  /**
   * Storage, under an amount limit: the allowance the grant holds room in
   * (`amountMinor` of it); null otherwise.
   */
  allowanceId: string | null;
  availableAt: Date;
  expiresAt: Date | null;
  /** Storage, set only while pending with automatic approval: when the sweep approves it. */
  approvalDueAt?: Date;
  /**
   * Storage, set only while pending for an unverified conversion (status
   * reason `unverified_conversion`): no approval is scheduled until a
   * trusted checkpoint confirms it or a reviewer moves it.
   */
  awaitsConfirmation?: true;
  /** Storage, set only while approved with an expiry: when the sweep expires it. */
  expiryDueAt?: Date;
  /**
   * Storage: set by the write that stopped the grant holding room, until
   * its allowance gives the room back (the sweep finishes it after a crash).
   */
  releasePending?: true;
  fulfillment: GrantFulfillment | null;
  reversalOf: string | null;
  statusHistory: GrantStatusChange[];
  createdAt: Date;
  updatedAt: Date;
}

/** One grant of a plan: the grant as it is without a limit, and the limit it is subject to. */
export interface PlannedGrant {
  /** The grant to store, before its limit is applied. */
  grant: GrantRecord;
  /** The limit that may cap or clamp it; null when it has none (or ignores it). */
  limit: PlannedLimit | null;
}

/** The limit a planned grant counts against. */
export interface PlannedLimit {
  /**
   * The limit's (reward, recipient, unit, window) and, for an amount, its
   * currency: the prefix of a count limit's slots, an amount limit's
   * allowance id.
   */
  key: string;
  unit: LimitUnitName;
  /** The limit: a number of grants, or minor units. */
  max: number;
  rewardId: string;
  /** The limit window, as the grant shows it. */
  window: string;
}

/** A status change of a grant, and what else the same write sets and removes. */
export interface GrantMove {
  readonly change: GrantStatusChange & { fromStatus: RewardGrantStatusName };
  readonly set?: Partial<GrantRecord>;
  readonly unset?: readonly (keyof GrantRecord)[];
}

/** A grant as a move leaves it. */
export function movedGrant<G extends GrantRecord>(current: G, move: GrantMove): G {
  const after: G = {
    ...current,
    ...move.set,
    status: move.change.toStatus,
    updatedAt: move.change.changedAt,
    statusHistory: [...current.statusHistory, move.change],
  };
  for (const field of move.unset ?? []) delete after[field];
  return after;
}
