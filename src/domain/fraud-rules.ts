import type { ReferralEvidence } from "./fraud-evidence.js";

/**
 * The fraud rules (docs/fraud.md): a catalogue of versioned rules, each a
 * plain function of a referral's evidence with a reason code, a default
 * action and severity, and parameters; the settings a referral is judged
 * by (today the environment's defaults); the verdicts they give; and the
 * risk those add up to.
 */

/** Every reason code a verdict may carry: the `type` of a suspected fraud. */
export type FraudRuleName =
  | "self_referral"
  | "existing_customer"
  | "velocity"
  | "duplicate_referee_email"
  | "similar_email"
  | "similar_name"
  | "disposable_email"
  | "masked_email"
  | "same_network_as_referrer"
  | "network_velocity"
  | "click_flood"
  | "shared_device"
  | "referrer_history"
  | "deny_list"
  | "allow_list"
  | "unverified_conversion";

/**
 * What a verdict does: `note` keeps it as evidence only, `flag` holds the
 * referral for review (no conversion until then), `hold_reward` lets it
 * convert and holds its grants, `reject` ends it.
 */
export type FraudActionName = "note" | "flag" | "hold_reward" | "reject";

/** A verdict's severity, and a referral's risk level. */
export type SeverityName = "low" | "medium" | "high";

/** One fact a verdict read, as kept with it. */
export type Fact = string | number | boolean | null;

/** One verdict of a rule on a referral. */
export interface SuspectedFraud {
  readonly type: FraudRuleName;
  readonly message: string;
  /** Absent on verdicts stored before actions: they flagged. */
  readonly action?: FraudActionName;
  readonly severity?: SeverityName;
  readonly ruleVersion?: number;
  /** The facts of the evidence the rule read, by name. */
  readonly evidence?: Readonly<Record<string, Fact>>;
  /** Given in shadow mode: the action was not taken. */
  readonly shadow?: boolean;
}

/** What the rules judge an attribution by: its parties and its evidence. */
export interface RuleFacts {
  readonly referrerId: string;
  readonly refereeId: string;
  readonly evidence: ReferralEvidence;
}

/** A rule that fired: why, and what it read. */
interface Hit {
  readonly message: string;
  readonly evidence: Readonly<Record<string, Fact>>;
}

/** A rule of the catalogue: its version, its defaults, and its check. */
interface Rule<P extends Readonly<Record<string, number>>> {
  /** Raised when what the rule checks changes: old verdicts keep theirs. */
  readonly version: number;
  readonly action: FraudActionName;
  readonly severity: SeverityName;
  readonly params: P;
  check(facts: RuleFacts, params: P): Hit | null;
}

const day = 86_400;

/**
 * The rules a referral's evidence is checked by, in the order verdicts are
 * reported. The list rules (`allow_list`, `deny_list`) and
 * `unverified_conversion` (a held conversion, see conversion.ts) are reason
 * codes of their own, not checks of the evidence.
 */
export const ruleCatalogue = {
  self_referral: {
    version: 1,
    action: "flag",
    severity: "high",
    params: {},
    check({ referrerId, refereeId, evidence }): Hit | null {
      if (referrerId === refereeId) {
        return { message: "the referee is the referrer", evidence: { sameCustomer: true } };
      }
      const mailbox = evidence.referrerEmail?.canonical;
      if (mailbox && mailbox === evidence.refereeEmail?.canonical) {
        return {
          message: "the referee has the referrer's email address",
          evidence: { sameMailbox: true },
        };
      }
      return null;
    },
  },
  existing_customer: {
    version: 1,
    action: "flag",
    severity: "medium",
    params: { maxRefereeAgeSeconds: 7 * day },
    check({ evidence }, { maxRefereeAgeSeconds }): Hit | null {
      const age = evidence.refereeAgeSeconds;
      if (age <= maxRefereeAgeSeconds) return null;
      return {
        message: `the referee was identified ${describeDuration(age * 1000)} before the referral (limit ${describeDuration(maxRefereeAgeSeconds * 1000)})`,
        evidence: { refereeAgeSeconds: age },
      };
    },
  },
  velocity: {
    version: 1,
    action: "flag",
    severity: "medium",
    params: { perHour: 20 },
    check({ evidence }, { perHour }): Hit | null {
      const count = evidence.referrerReferralsLastHour;
      if (count === null || count < perHour) return null;
      return {
        message: `the referrer already has at least ${perHour} referrals in the last hour (its limit)`,
        evidence: { referrerReferralsLastHour: count },
      };
    },
  },
  duplicate_referee_email: {
    version: 1,
    action: "flag",
    severity: "medium",
    params: {},
    check({ evidence }): Hit | null {
      if (evidence.refereeMailboxReferred !== true) return null;
      return {
        message: "another customer with the referee's email address was already referred",
        evidence: { refereeMailboxReferred: true },
      };
    },
  },
  similar_email: {
    version: 1,
    action: "flag",
    severity: "low",
    params: { maxDistance: 2 },
    check({ evidence }, { maxDistance }): Hit | null {
      const distance = evidence.emailLocalDistance;
      // The same mailbox is self_referral's.
      if (distance === null || distance === 0 || distance > maxDistance) return null;
      return {
        message: `the referee's email differs from the referrer's by ${distance} character${distance === 1 ? "" : "s"} on the same domain`,
        evidence: { emailLocalDistance: distance },
      };
    },
  },
  similar_name: {
    version: 1,
    action: "note",
    severity: "low",
    params: { minSimilarity: 0.85 },
    check({ evidence }, { minSimilarity }): Hit | null {
      const similarity = evidence.nameSimilarity;
      if (similarity === null || similarity < minSimilarity) return null;
      return {
        message: `the referee's name is ${Math.round(similarity * 100)}% like the referrer's`,
        evidence: { nameSimilarity: similarity },
      };
    },
  },
  disposable_email: {
    version: 1,
    action: "flag",
    severity: "medium",
    params: {},
    check({ evidence }): Hit | null {
      if (!evidence.refereeEmail?.disposable) return null;
      return {
        message: `the referee's email domain ${evidence.refereeEmail.domain} is disposable`,
        evidence: {
          domain: evidence.refereeEmail.domain,
          list: evidence.disposableListVersion,
        },
      };
    },
  },
  masked_email: {
    version: 1,
    action: "note",
    severity: "low",
    params: {},
    check({ evidence }): Hit | null {
      if (!evidence.refereeEmail?.masked) return null;
      return {
        message: `the referee's email goes through a privacy relay (${evidence.refereeEmail.domain})`,
        evidence: { domain: evidence.refereeEmail.domain },
      };
    },
  },
  same_network_as_referrer: {
    version: 1,
    action: "hold_reward",
    severity: "medium",
    params: {},
    check({ evidence }): Hit | null {
      const referee = evidence.refereeNetwork;
      const referrer = evidence.referrerNetwork;
      if (!referee || !referrer || referee.networkHash !== referrer.networkHash) return null;
      const sameAddress = referee.addressHash === referrer.addressHash;
      return {
        message: sameAddress
          ? "the referee called from the referrer's address"
          : "the referee called from the referrer's network",
        evidence: { networkHash: referee.networkHash, sameAddress },
      };
    },
  },
  network_velocity: {
    version: 1,
    action: "flag",
    severity: "medium",
    params: { perDay: 10 },
    check({ evidence }, { perDay }): Hit | null {
      const count = evidence.networkReferralsLastDay;
      if (count === null || count < perDay) return null;
      return {
        message: `at least ${perDay} referrals came from the referee's network in the last day`,
        evidence: { networkReferralsLastDay: count },
      };
    },
  },
  click_flood: {
    version: 1,
    action: "flag",
    severity: "medium",
    params: { perDay: 20 },
    check({ evidence }, { perDay }): Hit | null {
      const count = evidence.networkClicksLastDay ?? null;
      if (count === null || count < perDay) return null;
      return {
        message: `the referrer's links were clicked at least ${perDay} times from the referee's network in the last day`,
        evidence: { networkClicksLastDay: count },
      };
    },
  },
  shared_device: {
    version: 1,
    action: "flag",
    severity: "high",
    params: {},
    check({ evidence }): Hit | null {
      const device = evidence.refereeNetwork?.deviceId;
      if (!device || device !== evidence.referrerNetwork?.deviceId) return null;
      return { message: "the referee used the referrer's device", evidence: { deviceId: device } };
    },
  },
  referrer_history: {
    version: 1,
    action: "flag",
    severity: "medium",
    params: { minRejected: 1, minFlagged: 3 },
    check({ evidence }, { minRejected, minFlagged }): Hit | null {
      const rejected = evidence.referrerRejected;
      const flagged = evidence.referrerFlagged;
      if (rejected === null || flagged === null) return null;
      if (rejected < minRejected && flagged < minFlagged) return null;
      return {
        message: `the referrer has ${rejected} rejected and ${flagged} flagged referrals`,
        evidence: { referrerRejected: rejected, referrerFlagged: flagged },
      };
    },
  },
} satisfies { readonly [type: string]: Rule<Readonly<Record<string, number>>> };

/** The rules the catalogue checks evidence with. */
export type CatalogueRuleName = keyof typeof ruleCatalogue;

/** The counts of the evidence a query gathers, each read by one rule. */
export type GatheredCount = "velocity" | "history" | "networkVelocity" | "clickFlood" | "mailbox";

const countsRead: Partial<Record<CatalogueRuleName, GatheredCount>> = {
  velocity: "velocity",
  referrer_history: "history",
  network_velocity: "networkVelocity",
  click_flood: "clickFlood",
  duplicate_referee_email: "mailbox",
};

/**
 * The counts the enabled settings read: what gathering must query. The
 * other facts of the evidence cost no query and are always kept.
 */
export function factsRead(settings: readonly RuleSetting[]): ReadonlySet<GatheredCount> {
  const read = new Set<GatheredCount>();
  for (const setting of settings) {
    const count = countsRead[setting.type];
    if (setting.enabled && count) read.add(count);
  }
  return read;
}

/** How one rule runs for a referral: whether, with what action and severity, and its parameters. */
export interface RuleSetting {
  readonly type: CatalogueRuleName;
  readonly enabled: boolean;
  readonly action: FraudActionName;
  readonly severity: SeverityName;
  readonly params: Readonly<Record<string, number>>;
}

/** The environment's thresholds (`REFERRAL_MAX_REFEREE_AGE`, `REFERRAL_VELOCITY_LIMIT`). */
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

/**
 * The rules a campaign without a policy of its own runs: today's four,
 * each flagging, at the environment's thresholds.
 */
export function defaultRuleSettings(policy: FraudPolicy = defaultFraudPolicy): RuleSetting[] {
  const setting = (type: CatalogueRuleName, params: Record<string, number> = {}): RuleSetting => ({
    type,
    enabled: true,
    action: ruleCatalogue[type].action,
    severity: ruleCatalogue[type].severity,
    params: { ...ruleCatalogue[type].params, ...params },
  });
  return [
    setting("self_referral"),
    setting("existing_customer", {
      maxRefereeAgeSeconds: Math.floor(policy.maxRefereeAgeMs / 1000),
    }),
    setting("velocity", { perHour: policy.velocityLimit }),
    setting("duplicate_referee_email"),
  ];
}

/** The verdicts of the enabled settings on one attribution, in catalogue order. */
export function judgeAttribution(
  facts: RuleFacts,
  settings: readonly RuleSetting[],
): SuspectedFraud[] {
  const verdicts: SuspectedFraud[] = [];
  const byType = new Map(settings.map((setting) => [setting.type, setting]));
  for (const type of Object.keys(ruleCatalogue) as CatalogueRuleName[]) {
    const setting = byType.get(type);
    if (!setting?.enabled) continue;
    const rule = ruleCatalogue[type] as Rule<Readonly<Record<string, number>>>;
    const hit = rule.check(facts, { ...rule.params, ...setting.params });
    if (!hit) continue;
    verdicts.push({
      type,
      message: hit.message,
      action: setting.action,
      severity: setting.severity,
      ruleVersion: rule.version,
      evidence: hit.evidence,
    });
  }
  return verdicts;
}

const severityWeights: Readonly<Record<SeverityName, number>> = { low: 10, medium: 25, high: 50 };
const severityOrder: readonly SeverityName[] = ["low", "medium", "high"];

/**
 * A referral's risk from its verdicts: a score (each verdict's severity
 * weighs 10, 25 or 50; at most 100) and a level, the higher of the worst
 * verdict's severity and the score's band (below 25 low, below 50 medium).
 */
export function riskOf(verdicts: readonly SuspectedFraud[]): {
  level: SeverityName;
  score: number;
} {
  let score = 0;
  let worst = 0;
  for (const verdict of verdicts) {
    const severity = verdict.severity ?? "medium";
    score += severityWeights[severity];
    worst = Math.max(worst, severityOrder.indexOf(severity));
  }
  score = Math.min(100, score);
  const band = score >= 50 ? 2 : score >= 25 ? 1 : 0;
  return { level: severityOrder[Math.max(worst, band)] as SeverityName, score };
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
