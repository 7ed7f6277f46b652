import { hash } from "node:crypto";
import { limitWindowOf, timeZoneOfCampaign } from "./campaign-time.js";
import type { GrantHoldReason } from "./conversion.js";
import { type CurrencyName, digitsOf, fromMinorUnits, toMinorUnits } from "./money.js";
import type { ReferralRecord, StatusChange } from "./referral-transitions.js";
import type {
  GrantRecord,
  GrantStatusChange,
  GrantValue,
  PlannedGrant,
  PlannedLimit,
} from "./reward-grant.js";
import {
  clawbackGrantId,
  earnedGrantId,
  type LimitIntervalName,
  type LimitUnitName,
  parseDuration,
  type RewardGrantCauseName,
  type RewardGrantStatusName,
} from "./reward-ledger.js";
import type { EnvironmentName, Tenant } from "./tenancy.js";

/**
 * How the ledger plans grants, pure: the grants a referral's acceptance
 * earns, a grant as it is made and as its limit leaves it, the clawback of
 * a paid grant, and the terms of a campaign reward they are made from.
 * Services store what these make (see services/reward-ledger.ts).
 */

/**
 * The terms of a campaign reward the ledger plans by: the fields of
 * `referral.v1.Reward` (its plain form) that say who gets what, when and
 * how much. The store keeps the whole reward (`StoredReward`).
 */
export interface RewardTerms {
  readonly id: string;
  readonly type: "payout" | "discount" | null;
  readonly party: "referrer" | "referee" | null;
  readonly method: string | null;
  readonly currency: CurrencyName | null;
  readonly payoutAmount: number | null;
  readonly discountAmount: number | null;
  readonly discountPercentage: number | null;
  readonly discountDurationInMonth: number | null;
  readonly limit: number | null;
  readonly limitUnit: LimitUnitName | null;
  readonly limitInterval: LimitIntervalName | null;
  readonly disabled: boolean;
  readonly approval: "automatic" | "manual" | null;
  readonly holdPeriod: string | null;
  readonly expiresAfter: string | null;
}

/** What the ledger plans by in a campaign: its id, its calendar and its rewards. */
export interface CampaignTerms {
  readonly _id: string;
  readonly timeZone?: string | null;
  readonly rewards?: readonly RewardTerms[];
}

/** The referral an acceptance earns grants for: its tenant, environment and parties. */
export type GrantParties = Pick<
  ReferralRecord,
  "_id" | "organizationId" | "applicationId" | "environment" | "referrerId" | "refereeId"
>;

/** The rewards of a campaign, as stored. */
export function rewardsOf<R extends RewardTerms>(campaign: {
  readonly rewards?: readonly R[];
}): readonly R[] {
  return campaign.rewards ?? [];
}

/**
 * The grants a referral's acceptance earns: one per enabled reward of its
 * campaign, to the reward's party. Written into the referral in the
 * accepting write, then made (see `makePlannedGrants` in services/reward-ledger.ts).
 */
export function planEarnedGrants(
  campaign: CampaignTerms,
  referral: GrantParties,
  acceptance: Pick<StatusChange, "changedAt" | "actorId">,
  /**
   * Why the grants wait, if they do: an unverified conversion under `hold`
   * (until confirmed), a hold_reward verdict (until a fraud review).
   */
  heldFor: GrantHoldReason | null = null,
): PlannedGrant[] {
  return rewardsOf(campaign)
    .filter((reward) => !reward.disabled && reward.party && reward.type)
    .map((reward) => earnedGrant(campaign, referral, reward, acceptance, heldFor));
}

/** The grant one reward of a campaign earns its party when `referral` is accepted. */
export function earnedGrant(
  campaign: CampaignTerms,
  referral: GrantParties,
  reward: RewardTerms,
  acceptance: Pick<StatusChange, "changedAt" | "actorId">,
  heldFor: GrantHoldReason | null = null,
): PlannedGrant {
  const at = acceptance.changedAt;
  const party = reward.party as "referrer" | "referee";
  const customerId = party === "referrer" ? referral.referrerId : referral.refereeId;
  const limit = limitOf(reward, customerId, at, timeZoneOfCampaign(campaign));
  const grant = newGrant({
    id: earnedGrantId(referral._id, reward.id, party, at),
    tenant: referral,
    environment: referral.environment,
    customerId,
    kind: "earned",
    campaignId: campaign._id,
    referralId: referral._id,
    reward,
    ...valueOfReward(reward),
    limitWindow: limit?.window ?? null,
    ignoresLimit: false,
    at,
    cause: "earned",
    actorId: acceptance.actorId,
    reason: heldFor,
    awaitingConfirmation: heldFor !== null,
  });
  return { grant, limit };
}

/** A new grant, not yet stored, before any limit: what {@link newGrant} takes. */
export interface GrantRequest {
  readonly id: string;
  readonly tenant: Tenant;
  readonly environment: EnvironmentName;
  readonly customerId: string;
  readonly kind: "earned" | "manual";
  readonly campaignId: string | null;
  readonly referralId: string | null;
  /** The campaign reward granted (its terms and snapshot); null for a value of the grant's own. */
  readonly reward: RewardTerms | null;
  readonly value: GrantValue;
  readonly amountMinor: number | null;
  readonly limitWindow: string | null;
  readonly ignoresLimit: boolean;
  readonly at: Date;
  readonly cause: RewardGrantCauseName;
  readonly actorId: string;
  readonly reason: string | null;
  /**
   * Earned by an unverified conversion under `hold` or a held referral:
   * pending until confirmed or reviewed (its reason says which).
   */
  readonly awaitingConfirmation?: boolean;
}

/**
 * A grant as it is made, before any limit: held until the reward's hold
 * period ends, then approved automatically (at once without a hold) or
 * left for a reviewer. A value of its own is approved at once. A grant
 * awaiting confirmation is pending with no approval scheduled.
 */
export function newGrant(request: GrantRequest): GrantRecord {
  const { reward, at } = request;
  const holdMs = durationOf(reward?.holdPeriod) ?? 0;
  const awaiting = request.awaitingConfirmation === true;
  const automatic = reward?.approval !== "manual" && !awaiting;
  const availableAt = new Date(at.getTime() + holdMs);
  const status: RewardGrantStatusName = holdMs === 0 && automatic ? "approved" : "pending";
  const expiresAt = status === "approved" ? expiryFrom(reward, at) : null;
  return {
    _id: request.id,
    organizationId: request.tenant.organizationId,
    applicationId: request.tenant.applicationId,
    environment: request.environment,
    campaignId: request.campaignId,
    rewardId: reward?.id ?? null,
    referralId: request.referralId,
    customerId: request.customerId,
    party: reward?.party ?? null,
    kind: request.kind,
    status,
    statusReason: request.reason,
    value: request.value,
    amountMinor: request.amountMinor,
    requestedAmount: request.value.amount,
    rewardSnapshotId: reward ? rewardSnapshotId(reward) : null,
    limitWindow: request.limitWindow,
    ignoresLimit: request.ignoresLimit,
    allowanceId: null,
    availableAt,
    expiresAt,
    ...(status === "pending" && automatic ? { approvalDueAt: availableAt } : {}),
    ...(awaiting ? { awaitsConfirmation: true as const } : {}),
    ...(expiresAt ? { expiryDueAt: expiresAt } : {}),
    fulfillment: null,
    reversalOf: null,
    statusHistory: [
      {
        fromStatus: null,
        toStatus: status,
        cause: request.cause,
        actorId: request.actorId,
        reason: request.reason,
        changedAt: at,
      },
    ],
    createdAt: at,
    updatedAt: at,
  };
}

/** A reward's value, with its amount in minor units. */
export function valueOfReward(reward: RewardTerms): {
  value: GrantValue;
  amountMinor: number | null;
} {
  const amount = reward.type === "payout" ? reward.payoutAmount : reward.discountAmount;
  const percentage =
    reward.type === "discount" && amount === null ? reward.discountPercentage : null;
  const amountMinor = amount === null ? null : minorUnitsOf(amount, reward.currency);
  return {
    value: {
      type: reward.type ?? "payout",
      method: reward.method,
      currency: reward.currency,
      amount: amountMinor === null ? null : fromMinorUnits(amountMinor, reward.currency),
      discountPercentage: percentage,
      discountDurationInMonth: reward.type === "discount" ? reward.discountDurationInMonth : null,
    },
    amountMinor,
  };
}

/**
 * Minor units of a reward's amount. Campaigns are checked when saved, so
 * the amount is exact; one saved before the check is rounded to the minor
 * unit rather than refused at the moment a referral converts.
 */
function minorUnitsOf(amount: number, currency: CurrencyName | null): number {
  const exact = toMinorUnits(amount, currency);
  if ("minor" in exact) return exact.minor;
  return Number.isFinite(amount) ? Math.round(amount * 10 ** digitsOf(currency)) : 0;
}

/**
 * The limit a reward puts on a recipient's grants at an instant: the
 * allowance of (reward, recipient, unit, window), and for an amount, its
 * currency. Null for a reward without a limit.
 */
export function limitOf(
  reward: RewardTerms,
  customerId: string,
  at: Date,
  timeZone: string,
): PlannedLimit | null {
  if (reward.limit === null || reward.limit === undefined) return null;
  const unit = reward.limitUnit ?? "rewards";
  const window = limitWindowOf(at, reward.limitInterval ?? "lifetime", timeZone);
  const max = unit === "rewards" ? reward.limit : minorUnitsOf(reward.limit, reward.currency);
  const key = [
    reward.id,
    customerId,
    unit,
    window,
    ...(unit === "amount" ? [reward.currency ?? ""] : []),
  ].join("|");
  return { key, unit, max, rewardId: reward.id, window };
}

/**
 * A grant as an amount limit leaves it: nothing let through makes it
 * capped (worth nothing, `limit_reached`); less than requested clamps its
 * amount (`requestedAmount` keeps the full one); either way it records the
 * allowance it holds room in. A count limit's nothing-left is the same
 * capped grant.
 */
export function withRoom(grant: GrantRecord, limit: PlannedLimit, room: number): GrantRecord {
  if (room === 0) {
    const { approvalDueAt: _approval, expiryDueAt: _expiry, ...rest } = grant;
    const [created] = grant.statusHistory as [GrantStatusChange];
    return {
      ...rest,
      status: "capped",
      statusReason: "limit_reached",
      value: {
        ...grant.value,
        amount: grant.value.amount === null ? null : 0,
        discountPercentage: grant.value.discountPercentage === null ? null : 0,
      },
      amountMinor: grant.amountMinor === null ? null : 0,
      expiresAt: null,
      statusHistory: [{ ...created, toStatus: "capped", reason: "limit_reached" }],
    };
  }
  if (grant.amountMinor !== null && room < grant.amountMinor) {
    return {
      ...grant,
      amountMinor: room,
      value: { ...grant.value, amount: fromMinorUnits(room, grant.value.currency) },
      allowanceId: limit.key,
    };
  }
  return { ...grant, allowanceId: limit.key };
}

/** The clawback of a fulfilled grant: its negative, pending, for the operator to collect or write off. */
export function clawbackOf(
  grant: GrantRecord,
  reversal: Pick<StatusChange, "changedAt" | "actorId" | "reason">,
): GrantRecord {
  const at = reversal.changedAt;
  const negative = (value: number | null) => (value === null || value === 0 ? value : -value);
  return {
    _id: clawbackGrantId(grant._id, at),
    organizationId: grant.organizationId,
    applicationId: grant.applicationId,
    environment: grant.environment,
    campaignId: grant.campaignId,
    rewardId: grant.rewardId,
    referralId: grant.referralId,
    customerId: grant.customerId,
    party: grant.party,
    kind: "clawback",
    status: "pending",
    statusReason: reversal.reason,
    value: {
      ...grant.value,
      amount: negative(grant.value.amount),
      discountPercentage: negative(grant.value.discountPercentage),
    },
    amountMinor: negative(grant.amountMinor),
    requestedAmount: negative(grant.value.amount),
    rewardSnapshotId: grant.rewardSnapshotId,
    limitWindow: null,
    ignoresLimit: grant.ignoresLimit,
    allowanceId: null,
    availableAt: at,
    expiresAt: null,
    fulfillment: null,
    reversalOf: grant._id,
    statusHistory: [
      {
        fromStatus: null,
        toStatus: "pending",
        cause: "reversal",
        actorId: reversal.actorId,
        reason: reversal.reason,
        changedAt: at,
      },
    ],
    createdAt: at,
    updatedAt: at,
  };
}

// A reward object of a cached campaign is read again only when the cache
// is refreshed, so its snapshot id is hashed about once per refresh.
const snapshotIds = new WeakMap<RewardTerms, string>();

/**
 * The id of a reward's snapshot: a hash of its plain form, the whole reward
 * as its campaign stores it (every field, not only its terms), so the same
 * content has one.
 */
export function rewardSnapshotId(reward: RewardTerms): string {
  let id = snapshotIds.get(reward);
  if (!id) {
    id = `rws_${hash("sha256", JSON.stringify(reward), "hex").slice(0, 32)}`;
    snapshotIds.set(reward, id);
  }
  return id;
}

function durationOf(text: string | null | undefined): number | undefined {
  return text ? parseDuration(text) : undefined;
}

/** When a grant approved at `approvedAt` expires under its reward's `expiresAfter`; null for never. */
export function expiryFrom(reward: RewardTerms | null, approvedAt: Date): Date | null {
  const ms = durationOf(reward?.expiresAfter);
  return ms === undefined ? null : new Date(approvedAt.getTime() + ms);
}
