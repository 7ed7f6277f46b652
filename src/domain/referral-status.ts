/** Where a referral stands: the REST words of `referral.v1.ReferralStatus`. */
export type ReferralStatusName = "pending" | "flagged" | "accepted" | "rejected" | "reversed";

/**
 * The lifecycle. A referral starts `pending` (or `flagged` when a fraud rule
 * fires); review or the campaign's reward trigger moves it on; `accepted`
 * can only be reversed (a refund, a chargeback), and `rejected` and
 * `reversed` are final.
 */
const nextStatuses: Readonly<Record<ReferralStatusName, readonly ReferralStatusName[]>> = {
  pending: ["accepted", "rejected", "flagged"],
  flagged: ["accepted", "rejected", "pending"],
  accepted: ["reversed"],
  rejected: [],
  reversed: [],
};

/** True when a referral may move from `from` to `to`. */
export function canTransition(from: ReferralStatusName, to: ReferralStatusName): boolean {
  return nextStatuses[from].includes(to);
}

/**
 * True while the referral's outcome is open (`pending`, `flagged`): it may
 * still be moved to another referrer. Once decided it belongs to its
 * referrer, whatever happens to it later.
 */
export function isUndecided(status: ReferralStatusName): boolean {
  return status === "pending" || status === "flagged";
}

/** Why a referral's status changed: the REST words of `referral.v1.StatusChangeCause`. */
export type StatusChangeCauseName = "created" | "reattributed" | "checkpoint" | "review";
