import { canonicalEmail } from "./email.js";

/** The fraud rules' names: the `type` of a suspected fraud. */
export type FraudRuleName =
  | "self_referral"
  | "existing_customer"
  | "velocity"
  | "duplicate_referee_email";

/** One reason a referral is flagged. */
export interface SuspectedFraud {
  readonly type: FraudRuleName;
  readonly message: string;
}

/** The thresholds of the rules (`REFERRAL_MAX_REFEREE_AGE`, `REFERRAL_VELOCITY_LIMIT`). */
export interface FraudPolicy {
  /** A referee identified longer ago than this, in milliseconds, is an existing customer. */
  readonly maxRefereeAgeMs: number;
  /** How many referrals a referrer may make per hour before the next is flagged. */
  readonly velocityLimit: number;
}

/** The defaults: 7 days, 20 referrals per hour. */
export const defaultFraudPolicy: FraudPolicy = {
  maxRefereeAgeMs: 7 * 24 * 60 * 60 * 1000,
  velocityLimit: 20,
};

/** The window the velocity rule counts in. */
export const velocityWindowMs = 60 * 60 * 1000;

/** A party of a referral, as the rules see it. */
export interface Party {
  readonly id: string;
  readonly email: string | null;
}

/** Everything the rules judge a referral by; the store gathers the counts. */
export interface ReferralCandidate {
  readonly referrer: Party;
  readonly referee: Party & { readonly identifiedAt: Date };
  /** When the referral is made. */
  readonly at: Date;
  /** Referrals attributed to the referrer in the hour before `at`, this one excluded. */
  readonly referrerRecentReferrals: number;
  /** Whether another customer with the referee's canonical email was already referred. */
  readonly refereeEmailAlreadyReferred: boolean;
}

/** The rules that fire for a referral, in a fixed order; empty when none does. */
export function suspectedFrauds(
  candidate: ReferralCandidate,
  policy: FraudPolicy = defaultFraudPolicy,
): SuspectedFraud[] {
  const found: SuspectedFraud[] = [];
  const { referrer, referee } = candidate;
  if (referrer.id === referee.id) {
    found.push({ type: "self_referral", message: "the referee is the referrer" });
  } else if (
    referrer.email !== null &&
    referee.email !== null &&
    canonicalEmail(referrer.email) === canonicalEmail(referee.email)
  ) {
    found.push({
      type: "self_referral",
      message: "the referee has the referrer's email address",
    });
  }
  const refereeAgeMs = candidate.at.getTime() - referee.identifiedAt.getTime();
  if (refereeAgeMs > policy.maxRefereeAgeMs) {
    found.push({
      type: "existing_customer",
      message: `the referee was identified ${describeDuration(refereeAgeMs)} before the referral (limit ${describeDuration(policy.maxRefereeAgeMs)})`,
    });
  }
  if (candidate.referrerRecentReferrals >= policy.velocityLimit) {
    found.push({
      type: "velocity",
      message: `the referrer already has at least ${policy.velocityLimit} referrals in the last hour (its limit)`,
    });
  }
  if (candidate.refereeEmailAlreadyReferred) {
    found.push({
      type: "duplicate_referee_email",
      message: "another customer with the referee's email address was already referred",
    });
  }
  return found;
}

/** A duration in the largest whole unit that fits, e.g. "12 days" or "3 hours". */
export function describeDuration(ms: number): string {
  const units: [string, number][] = [
    ["day", 86_400_000],
    ["hour", 3_600_000],
    ["minute", 60_000],
    ["second", 1000],
  ];
  for (const [name, size] of units) {
    const count = Math.floor(ms / size);
    if (count >= 1) return `${count} ${name}${count === 1 ? "" : "s"}`;
  }
  return `${ms} ms`;
}
