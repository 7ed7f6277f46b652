import { strongestAction } from "./fraud-policy.js";
import type { SuspectedFraud } from "./fraud-rules.js";
import {
  isUndecided,
  type ReferralStatusName,
  type StatusChangeCauseName,
} from "./referral-status.js";

/** What CreateReferral does, given the referee's existing referral in the campaign. */
export type Attribution =
  /** No referral yet: create one. */
  | { readonly kind: "create" }
  /** The same referrer again: an idempotent retry, return the referral as it is. */
  | { readonly kind: "unchanged" }
  /** Another referrer while pending or flagged: move the referral and re-run the rules. */
  | { readonly kind: "reattribute" }
  /** Another referrer once decided (accepted, rejected, reversed): refused. */
  | { readonly kind: "refuse"; readonly reason: string }
  /**
   * Another referrer, asked by a caller who may not move the referral (a
   * public key without the referee's userHash, docs/trust.md): the
   * referral is answered as it is, so attribution cannot be stolen.
   */
  | { readonly kind: "kept" };

/** Decides how a referral request treats the referee's existing referral. */
export function decideAttribution(
  existing: { readonly status: ReferralStatusName; readonly referrerId: string } | null,
  referrerId: string,
  /** Whether the caller may move an existing referral to another referrer. */
  mayReattribute = true,
): Attribution {
  if (!existing) return { kind: "create" };
  if (existing.referrerId === referrerId) return { kind: "unchanged" };
  if (!isUndecided(existing.status)) {
    return { kind: "refuse", reason: `referral already ${existing.status}` };
  }
  return mayReattribute ? { kind: "reattribute" } : { kind: "kept" };
}

/**
 * The status a referral gets from the fraud rules when it is created or
 * re-attributed, by the strongest verdict that acts (see
 * `strongestAction`; shadow verdicts do not act): `rejected` for a
 * rejection, `flagged` for a flag, else `pending` (a note is evidence
 * only; a held reward converts). A flag a reviewer set stays, so
 * re-attribution cannot clear a human decision.
 */
export function statusFromRules(
  frauds: readonly SuspectedFraud[],
  current?: {
    readonly status: ReferralStatusName;
    readonly lastChangeCause: StatusChangeCauseName | undefined;
  },
): ReferralStatusName {
  const action = strongestAction(frauds);
  if (action === "reject") return "rejected";
  if (action === "flag") return "flagged";
  if (current?.status === "flagged" && current.lastChangeCause === "review") return "flagged";
  return "pending";
}

/** Whether the verdicts hold the rewards the referral's conversion earns. */
export function holdsRewards(frauds: readonly SuspectedFraud[]): boolean {
  return frauds.some((fraud) => !fraud.shadow && fraud.action === "hold_reward");
}
