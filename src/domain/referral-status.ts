/** Where a referral stands: the REST words of `referral.v1.ReferralStatus`. */
export type ReferralStatusName = "pending" | "flagged" | "accepted" | "rejected";

/**
 * The lifecycle. A referral starts `pending` (or `flagged` when a fraud rule
 * fires); review or the campaign's reward trigger moves it on; `accepted`
 * and `rejected` are final.
 */
const nextStatuses: Readonly<Record<ReferralStatusName, readonly ReferralStatusName[]>> = {
  pending: ["accepted", "rejected", "flagged"],
  flagged: ["accepted", "rejected", "pending"],
  accepted: [],
  rejected: [],
};

/** True when a referral may move from `from` to `to`. */
export function canTransition(from: ReferralStatusName, to: ReferralStatusName): boolean {
  return nextStatuses[from].includes(to);
}

/** True for `accepted` and `rejected`, which nothing changes. */
export function isFinal(status: ReferralStatusName): boolean {
  return nextStatuses[status].length === 0;
}

/** Why a referral's status changed: the REST words of `referral.v1.StatusChangeCause`. */
export type StatusChangeCauseName = "created" | "reattributed" | "checkpoint" | "review";
