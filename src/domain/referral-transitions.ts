import type { ReferralEvidence } from "./fraud-evidence.js";
import type { SeverityName, SuspectedFraud } from "./fraud-rules.js";
import { newId } from "./ids.js";
import type { ReferralStatusName, StatusChangeCauseName } from "./referral-status.js";
import type { EnvironmentName, Tenant } from "./tenancy.js";

/**
 * A referral as its rules make and move it: created with its first status,
 * moved to another referrer, moved to another status. The store keeps it
 * with the fields only storage needs (`ReferralDoc`).
 */

/** One entry of a referral's status history. */
export interface StatusChange {
  /** The status before; null for the entry written at creation. */
  fromStatus: ReferralStatusName | null;
  toStatus: ReferralStatusName;
  /** What made the change. */
  cause: StatusChangeCauseName;
  /** The API key (creation, re-attribution, review) or checkpoint (conversion). */
  actorId: string;
  /** The reviewer's reason or the rules that fired; null for none. */
  reason: string | null;
  changedAt: Date;
}

/** A referral: referrer, referee and campaign. */
export interface ReferralRecord {
  /** Public id, prefix `ref_`. */
  _id: string;
  organizationId: string;
  applicationId: string;
  environment: EnvironmentName;
  campaignId: string;
  /** The customer whose code was used. */
  referrerId: string;
  refereeId: string;
  status: ReferralStatusName;
  /** Why the referral was flagged. */
  suspectedFrauds: SuspectedFraud[];
  /** Every status it has had, oldest first. */
  statusHistory: StatusChange[];
  /**
   * What the fraud rules judged the current attribution by (see
   * fraud-evidence.ts); absent on referrals made before evidence was kept.
   */
  evidence?: ReferralEvidence;
  /** Its risk from the rules' verdicts; absent on referrals judged before risk was kept. */
  risk?: ReferralRisk;
  /**
   * Storage, set while accepted by an unverified public-key checkpoint under
   * `hold` and not yet confirmed: a trusted trigger checkpoint finds it by
   * this (see `conversionByCheckpoint`) and releases its grants.
   */
  awaitsConfirmation?: true;
  /**
   * Set by a hold_reward verdict: the grants its conversion earns wait,
   * pending with the reason `fraud_review`, until a fraud review releases
   * them; absent otherwise (a sparse index finds the held ones).
   */
  rewardsHeld?: true;
  /**
   * Storage: when a review deadline that accepts lapses; the reward sweep
   * finds it by this (a sparse index) and accepts it if it still waits.
   */
  reviewDueAt?: Date;
  /** How the current referrer was found; absent on referrals made before it was recorded. */
  attribution?: AttributionRecord;
  /** When the current referrer was attributed (creation or re-attribution); the velocity rule counts by it. */
  attributedAt: Date;
  createdAt: Date;
  updatedAt: Date;
  /** Deletion time; null while the referral exists. */
  deletedAt: Date | null;
}

/** The parties of a referral. */
export interface ReferralParties {
  readonly environment: EnvironmentName;
  readonly campaignId: string;
  readonly referrerId: string;
  readonly refereeId: string;
}

/** What the fraud rules decided for a referral's current attribution, and by what. */
export interface RuledStatus {
  readonly status: ReferralStatusName;
  readonly suspectedFrauds: SuspectedFraud[];
  readonly evidence: ReferralEvidence;
  readonly risk: ReferralRisk;
  /** Set when a hold_reward verdict holds the grants its conversion earns (see `holdsRewards`). */
  readonly rewardsHeld?: true;
  /** When its review lapses into an acceptance (a review deadline that accepts). */
  readonly reviewDueAt?: Date;
  /** How the referrer was found: its code, or a click on its link. */
  readonly attribution?: AttributionRecord;
}

/** How a referral's current referrer was found (the plain form of `referral.v1.ReferralAttribution`). */
export interface AttributionRecord {
  readonly method: "code" | "click";
  readonly clickId: string | null;
  readonly clickedAt: Date | null;
}

/** How risky the fraud rules found an attribution (see `riskOf`). */
export interface ReferralRisk {
  readonly level: SeverityName;
  readonly score: number;
}

/** A status change, made by `actorId` at `changedAt`; `reason` undefined for none. */
export function statusChange<From extends ReferralStatusName | null>(
  fromStatus: From,
  toStatus: ReferralStatusName,
  cause: StatusChangeCauseName,
  actorId: string,
  changedAt: Date,
  reason: string | undefined,
): StatusChange & { fromStatus: From } {
  return { fromStatus, toStatus, cause, actorId, reason: reason ?? null, changedAt };
}

/** A new referral, not yet stored, as its first status change leaves it. */
export function newReferral(
  tenant: Tenant,
  parties: ReferralParties,
  ruled: RuledStatus,
  change: StatusChange,
): ReferralRecord {
  const now = change.changedAt;
  return {
    _id: newId("ref", now),
    organizationId: tenant.organizationId,
    applicationId: tenant.applicationId,
    ...parties,
    ...ruled,
    statusHistory: [change],
    attributedAt: now,
    createdAt: now,
    updatedAt: now,
    deletedAt: null,
  };
}

/**
 * A referral as moving it to another referrer leaves it: the status and
 * frauds the rules gave, `change` appended when the status moves.
 */
export function reattributed<R extends ReferralRecord>(
  current: R,
  referrerId: string,
  ruled: RuledStatus,
  change: StatusChange,
): R {
  const now = change.changedAt;
  const statusMoves = ruled.status !== current.status;
  return {
    ...current,
    referrerId,
    ...ruled,
    attributedAt: now,
    updatedAt: now,
    statusHistory: statusMoves ? [...current.statusHistory, change] : current.statusHistory,
  };
}

/** A referral as a status change leaves it. */
export function transitioned<R extends ReferralRecord>(current: R, change: StatusChange): R {
  return {
    ...current,
    status: change.toStatus,
    updatedAt: change.changedAt,
    statusHistory: [...current.statusHistory, change],
  };
}
