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
