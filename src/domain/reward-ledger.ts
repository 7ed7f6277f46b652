import { hash } from "node:crypto";
import { newId } from "./ids.js";

/**
 * The reward ledger's rules, pure: where a grant may move, which grants
 * count against a limit, how much room a limit leaves, and the durations
 * campaigns state holds and expiries in.
 */

/** Where a grant stands: the REST words of `referral.v1.RewardGrantStatus`. */
export type RewardGrantStatusName =
  | "pending"
  | "approved"
  | "fulfilled"
  | "rejected"
  | "voided"
  | "expired"
  | "capped";

/** Where a grant comes from: the REST words of `referral.v1.RewardGrantKind`. */
export type RewardGrantKindName = "earned" | "manual" | "clawback";

/** What moved a grant: the REST words of `referral.v1.RewardGrantChangeCause`. */
export type RewardGrantCauseName =
  | "earned"
  | "manual"
  | "review"
  | "hold_ended"
  | "expiry"
  | "reversal"
  | "confirmed";

/** The REST words of `referral.v1.RewardLimitUnit` and `RewardLimitInterval`. */
export type LimitUnitName = "rewards" | "amount";
export type LimitIntervalName = "day" | "week" | "month" | "year" | "lifetime";

/**
 * The moves a reviewer (UpdateRewardGrantStatus) may make. A grant is
 * approved, then fulfilled; until it is fulfilled it may be rejected or
 * voided. A clawback is collected (fulfilled) or written off (rejected).
 * Every other status is final.
 */
const reviewMoves: Readonly<
  Record<"grant" | "clawback", Partial<Record<RewardGrantStatusName, RewardGrantStatusName[]>>>
> = {
  grant: {
    pending: ["approved", "rejected", "voided"],
    approved: ["fulfilled", "rejected", "voided"],
  },
  clawback: {
    pending: ["fulfilled", "rejected"],
  },
};

/** True when a reviewer may move a grant of this kind from `from` to `to`. */
export function canReviewGrant(
  kind: RewardGrantKindName,
  from: RewardGrantStatusName,
  to: RewardGrantStatusName,
): boolean {
  return reviewMoves[kind === "clawback" ? "clawback" : "grant"][from]?.includes(to) ?? false;
}

/**
 * Whether a grant in this status uses room under its reward's limit:
 * pending, approved and fulfilled ones do; a voided, rejected, expired or
 * capped one frees (or never took) its room.
 */
export function holdsRoom(status: RewardGrantStatusName): boolean {
  return status === "pending" || status === "approved" || status === "fulfilled";
}

/** What a grant does when its referral is reversed. */
export function reversalOf(status: RewardGrantStatusName): "void" | "claw back" | "nothing" {
  if (status === "pending" || status === "approved") return "void";
  if (status === "fulfilled") return "claw back";
  return "nothing";
}

/**
 * How much of a request a limit lets through: a count limit one grant while
 * fewer than `max` hold room, an amount limit what is left of `max` (minor
 * units) up to the amount requested. Zero means the grant is capped.
 */
export function roomFor(unit: LimitUnitName, max: number, used: number, requested: number): number {
  if (unit === "rewards") return used < max ? 1 : 0;
  return Math.max(0, Math.min(requested, max - used));
}

const dayMs = 86_400_000;
const unitMs: Readonly<Record<string, number>> = {
  s: 1000,
  m: 60_000,
  h: 3_600_000,
  d: dayMs,
  w: 7 * dayMs,
};

/** The longest hold or expiry a reward may state: ten years. */
export const maxDurationMs = 3650 * dayMs;

/**
 * A duration as campaigns state it, a whole number and a unit ("30d",
 * "12h", "2w"; s, m for minutes, h, d, w), in milliseconds; undefined when
 * the text is not one or exceeds {@link maxDurationMs}.
 */
export function parseDuration(text: string): number | undefined {
  const match = /^(\d{1,7})([smhdw])$/.exec(text);
  if (!match) return undefined;
  const ms = Number(match[1]) * (unitMs[match[2] as string] as number);
  return ms <= maxDurationMs ? ms : undefined;
}

/**
 * The id of the grant a referral earns for one reward and party. Derived,
 * not drawn: whoever creates it (the accepting call, or the sweep after a
 * crash) creates the same document, and the store's primary key lets one
 * insert win. The acceptance time leads, so ids sort by age like others.
 */
export function earnedGrantId(
  referralId: string,
  rewardId: string,
  party: string,
  acceptedAt: Date,
): string {
  return derivedId(acceptedAt, `earned|${referralId}|${rewardId}|${party}`);
}

/** The id of the clawback of a fulfilled grant, derived like {@link earnedGrantId}. */
export function clawbackGrantId(grantId: string, reversedAt: Date): string {
  return derivedId(reversedAt, `clawback|${grantId}`);
}

/** A new manual grant's id: drawn, as a manual grant is made once, by one call. */
export function manualGrantId(at: Date): string {
  return newId("grt", at);
}

function derivedId(at: Date, key: string): string {
  const time = at.getTime().toString(36).padStart(9, "0");
  return `grt_${time}${hash("sha256", key, "hex").slice(0, 16)}`;
}
