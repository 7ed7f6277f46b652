import type { ReferralStatusName } from "./referral-status.js";

/** A campaign's reward-trigger settings (checkpoint names). */
export interface RewardTriggers {
  readonly manualRewardTrigger?: string | null;
  readonly proposedRewardTrigger?: string | null;
}

/**
 * The checkpoint name that converts a campaign's referrals: the manual
 * trigger when set, else the proposed one; null when the campaign has none.
 */
export function rewardTriggerOf(campaign: RewardTriggers): string | null {
  return campaign.manualRewardTrigger || campaign.proposedRewardTrigger || null;
}

/**
 * Whether the trigger checkpoint accepts a referral in this status: only a
 * `pending` one. A `flagged` referral waits for review, and a final one
 * never changes, so ingesting the trigger again changes nothing.
 */
export function convertsOnTrigger(status: ReferralStatusName): boolean {
  return status === "pending";
}

/** The REST words of `referral.v1.CampaignPublicCheckpoints`. */
export type PublicCheckpointsName = "hold" | "convert" | "ignore";

/**
 * A campaign's trust in unverified public-key checkpoints: `hold` when it
 * has none stored (campaigns stored before the setting, and the default).
 */
export function publicCheckpointsOf(campaign: {
  readonly publicCheckpoints?: PublicCheckpointsName | null;
}): PublicCheckpointsName {
  return campaign.publicCheckpoints ?? "hold";
}

/** The reason an unconfirmed conversion's grants are pending for. */
export const unverifiedConversion = "unverified_conversion";

/** The reason a hold_reward verdict's grants are pending for, until a fraud review. */
export const fraudReview = "fraud_review";

/** Why an earned grant waits, pending with no approval scheduled. */
export type GrantHoldReason = typeof unverifiedConversion | typeof fraudReview;

/**
 * What a campaign's trigger checkpoint does to one referral of its referee
 * (docs/trust.md). A trusted checkpoint (a secret key's, or one with a
 * valid userHash) converts a pending referral, and confirms one an
 * unverified checkpoint converted under `hold`; an unverified one converts
 * as the campaign says: `hold` (its grants wait for confirmation),
 * `convert`, or `ignore` (nothing).
 */
export function conversionByCheckpoint(
  referral: { readonly status: ReferralStatusName; readonly awaitsConfirmation?: true },
  trusted: boolean,
  publicCheckpoints: PublicCheckpointsName,
): "convert" | "convert and hold" | "confirm" | "nothing" {
  if (convertsOnTrigger(referral.status)) {
    if (trusted || publicCheckpoints === "convert") return "convert";
    return publicCheckpoints === "hold" ? "convert and hold" : "nothing";
  }
  if (trusted && referral.status === "accepted" && referral.awaitsConfirmation) return "confirm";
  return "nothing";
}
