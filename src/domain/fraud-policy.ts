import ipaddr from "ipaddr.js";
import { canonicalEmail, isValidEmail } from "./email.js";
import { networkHashes } from "./fraud-evidence.js";
import {
  type CatalogueRuleName,
  defaultRuleSettings,
  type FraudActionName,
  type FraudPolicy,
  factsRead,
  type GatheredCount,
  judgeAttribution,
  type RuleFacts,
  type RuleSetting,
  ruleCatalogue,
  type SeverityName,
  type SuspectedFraud,
} from "./fraud-rules.js";

/**
 * A campaign's fraud policy (docs/fraud.md): its mode, the rules it runs,
 * its allow and deny lists and its review terms, as stored (the plain form
 * of `referral.v1.CampaignFraudPolicy`, completed with the defaults when
 * saved); compiled once per campaign and network key into what a referral
 * is judged by.
 */

export type FraudPolicyModeName = "enforce" | "shadow";
export type FraudReviewLapseName = "keep_flagged" | "accept";

/** An allow or deny list as stored. */
export interface FraudListDoc {
  emails?: string[];
  domains?: string[];
  networks?: string[];
  customerIds?: string[];
}

/** A campaign's fraud policy as stored. */
export interface FraudPolicyDoc {
  mode?: FraudPolicyModeName;
  rules?: {
    type: string;
    enabled?: boolean | null;
    action?: FraudActionName | null;
    severity?: SeverityName | null;
    params?: Record<string, number>;
  }[];
  allow?: FraudListDoc | null;
  deny?: FraudListDoc | null;
  review?: { deadlineDays?: number; onLapse?: FraudReviewLapseName } | null;
}

/** What one list matches against: its entries in the form the evidence keeps. */
export interface CompiledList {
  readonly emails: ReadonlySet<string>;
  readonly domains: ReadonlySet<string>;
  readonly addressHashes: ReadonlySet<string>;
  readonly networkHashes: ReadonlySet<string>;
  readonly customerIds: ReadonlySet<string>;
}

/** A policy ready to judge referrals with. */
export interface CompiledPolicy {
  readonly mode: FraudPolicyModeName;
  readonly settings: readonly RuleSetting[];
  readonly allow: CompiledList | null;
  readonly deny: CompiledList | null;
  readonly review: { readonly deadlineDays: number; readonly onLapse: FraudReviewLapseName };
  /** Whether the campaign set a policy of its own (else the environment's defaults). */
  readonly own: boolean;
  /** The counts of the evidence its rules read: what gathering queries. */
  readonly reads: ReadonlySet<GatheredCount>;
  /** Where the evidence's counts stop: 100, or the velocity limit if higher. */
  readonly countCap: number;
}

/** Counts beyond 100 (or a higher velocity limit) say nothing more. */
function countCapOf(settings: readonly RuleSetting[]): number {
  return Math.max(100, ...settings.map((setting) => setting.params.perHour ?? 0));
}

/** The most entries one list may hold. */
export const maxListEntries = 1_000;
/** The longest review deadline, in days. */
export const maxDeadlineDays = 365;

/** The rules whose verdict may reject: the exact identity hits. */
const mayReject: ReadonlySet<CatalogueRuleName> = new Set(["self_referral", "shared_device"]);

/** Bounds of each rule's parameters: whole counts, or a fraction. */
const paramBounds: Readonly<Record<string, { min: number; max: number; whole: boolean }>> = {
  maxRefereeAgeSeconds: { min: 0, max: 10 * 365 * 86_400, whole: true },
  perHour: { min: 1, max: 100, whole: true },
  perDay: { min: 1, max: 100, whole: true },
  maxDistance: { min: 1, max: 10, whole: true },
  minSimilarity: { min: 0, max: 1, whole: false },
  minRejected: { min: 1, max: 100, whole: true },
  minFlagged: { min: 1, max: 100, whole: true },
};

/** A problem with a policy, naming the field below `fraudPolicy`. */
export interface PolicyProblem {
  readonly field: string;
  readonly message: string;
}

/**
 * Checks a policy about to be saved and completes it with the defaults
 * (mode, each rule's action, severity and parameters, the lapse), so a
 * stored policy says everything it does. Returns the first problem, or
 * null; the policy is completed in place.
 */
export function completePolicy(policy: FraudPolicyDoc): PolicyProblem | null {
  policy.mode = policy.mode ?? "enforce";
  const seen = new Set<string>();
  for (const [index, rule] of (policy.rules ?? []).entries()) {
    const field = `rules[${index}]`;
    if (!rule.type) return { field: `${field}.type`, message: "is required" };
    if (!(rule.type in ruleCatalogue)) {
      const list = rule.type === "allow_list" || rule.type === "deny_list";
      return {
        field: `${field}.type`,
        message: list
          ? "is a list, not a rule: set allow or deny instead"
          : `must be one of: ${Object.keys(ruleCatalogue).join(", ")}`,
      };
    }
    if (seen.has(rule.type)) {
      return { field: `${field}.type`, message: `${rule.type} is listed twice` };
    }
    seen.add(rule.type);
    const type = rule.type as CatalogueRuleName;
    const defaults = ruleCatalogue[type];
    rule.enabled = rule.enabled ?? true;
    rule.action = rule.action ?? defaults.action;
    rule.severity = rule.severity ?? defaults.severity;
    if (rule.action === "reject" && !mayReject.has(type)) {
      return {
        field: `${field}.action`,
        message: `reject is for exact identity hits (${[...mayReject].join(", ")}) and the deny list; ${type} may note, flag or hold_reward`,
      };
    }
    const params: Record<string, number> = { ...defaults.params };
    for (const [name, value] of Object.entries(rule.params ?? {})) {
      const bounds = paramBounds[name];
      if (!(name in defaults.params) || !bounds) {
        const known = Object.keys(defaults.params);
        return {
          field: `${field}.params.${name}`,
          message:
            known.length === 0
              ? `${type} takes no parameters`
              : `is not a parameter of ${type} (it takes ${known.join(", ")})`,
        };
      }
      if (
        !Number.isFinite(value) ||
        value < bounds.min ||
        value > bounds.max ||
        (bounds.whole && !Number.isInteger(value))
      ) {
        return {
          field: `${field}.params.${name}`,
          message: `must be ${bounds.whole ? "a whole number" : "a number"} from ${bounds.min} to ${bounds.max}`,
        };
      }
      params[name] = value;
    }
    rule.params = params;
  }
  for (const side of ["allow", "deny"] as const) {
    const problem = checkList(policy[side], side);
    if (problem) return problem;
  }
  const review = policy.review ?? {};
  const days = review.deadlineDays ?? 0;
  if (!Number.isInteger(days) || days < 0 || days > maxDeadlineDays) {
    return {
      field: "review.deadlineDays",
      message: `must be a whole number of days from 0 (none) to ${maxDeadlineDays}`,
    };
  }
  policy.review = { deadlineDays: days, onLapse: review.onLapse ?? "keep_flagged" };
  return null;
}

function checkList(list: FraudListDoc | null | undefined, side: string): PolicyProblem | null {
  if (!list) return null;
  for (const key of ["emails", "domains", "networks", "customerIds"] as const) {
    const entries = list[key] ?? [];
    if (entries.length > maxListEntries) {
      return { field: `${side}.${key}`, message: `must hold at most ${maxListEntries} entries` };
    }
    for (const [index, entry] of entries.entries()) {
      const field = `${side}.${key}[${index}]`;
      const problem = entryProblem(key, entry);
      if (problem) return { field, message: problem };
    }
  }
  return null;
}

const domainPattern = /^(?=.{1,253}$)([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$/;

function entryProblem(key: keyof FraudListDoc, entry: string): string | null {
  switch (key) {
    case "emails":
      return isValidEmail(entry) ? null : "must be an email address";
    case "domains":
      return domainPattern.test(entry.toLowerCase())
        ? null
        : "must be a domain name, for example example.com";
    case "networks":
      return listedNetwork(entry)
        ? null
        : "must be an IP address, a /24 IPv4 or a /64 IPv6 network";
    case "customerIds":
      return /^cus_[A-Za-z0-9_-]{1,64}$/.test(entry) ? null : 'must be a customer id ("cus_...")';
  }
}

/** A list's network entry: an address, or a /24 or /64 network by its first address. */
function listedNetwork(entry: string): { address: string; whole: boolean } | null {
  const [address, bits, extra] = entry.split("/");
  if (extra !== undefined || !address || !ipaddr.isValid(address)) return null;
  if (bits === undefined) return { address, whole: false };
  const kind = ipaddr.process(address).kind();
  return (kind === "ipv4" && bits === "24") || (kind === "ipv6" && bits === "64")
    ? { address, whole: true }
    : null;
}

/**
 * The policy a campaign's referrals are judged by: its own, or the
 * environment's defaults (today's four rules, flagging). Network entries
 * are hashed with the application's key, the evidence's own form; without
 * a key (network facts off) they match nothing.
 */
export function compilePolicy(
  policy: FraudPolicyDoc | null | undefined,
  environment: FraudPolicy,
  networkKey: Buffer | null,
): CompiledPolicy {
  if (!policy) {
    const settings = defaultRuleSettings(environment);
    return {
      mode: "enforce",
      settings,
      allow: null,
      deny: null,
      review: { deadlineDays: 0, onLapse: "keep_flagged" },
      own: false,
      reads: factsRead(settings),
      countCap: countCapOf(settings),
    };
  }
  const settings = (policy.rules ?? []).map((rule) => {
    const type = rule.type as CatalogueRuleName;
    const defaults = ruleCatalogue[type];
    return {
      type,
      enabled: rule.enabled ?? true,
      action: rule.action ?? defaults.action,
      severity: rule.severity ?? defaults.severity,
      params: { ...defaults.params, ...rule.params },
    } satisfies RuleSetting;
  });
  return {
    mode: policy.mode ?? "enforce",
    settings,
    allow: compileList(policy.allow, networkKey),
    deny: compileList(policy.deny, networkKey),
    review: {
      deadlineDays: policy.review?.deadlineDays ?? 0,
      onLapse: policy.review?.onLapse ?? "keep_flagged",
    },
    own: true,
    reads: factsRead(settings),
    countCap: countCapOf(settings),
  };
}

function compileList(
  list: FraudListDoc | null | undefined,
  key: Buffer | null,
): CompiledList | null {
  if (!list) return null;
  const addressHashes = new Set<string>();
  const networks = new Set<string>();
  for (const entry of list.networks ?? []) {
    const listed = listedNetwork(entry);
    const hashes = listed && key ? networkHashes(listed.address, key) : null;
    if (!hashes || !listed) continue;
    if (listed.whole) networks.add(hashes.networkHash);
    else addressHashes.add(hashes.addressHash);
  }
  const compiled = {
    emails: new Set((list.emails ?? []).map((email) => canonicalEmail(email))),
    domains: new Set((list.domains ?? []).map((domain) => domain.toLowerCase())),
    addressHashes,
    networkHashes: networks,
    customerIds: new Set(list.customerIds ?? []),
  };
  const empty = Object.values(compiled).every((set) => set.size === 0);
  return empty ? null : compiled;
}

/** What a list entry matched, for the verdict's evidence; null for no match. */
function listHit(list: CompiledList | null, facts: RuleFacts): Record<string, string> | null {
  if (!list) return null;
  const { evidence } = facts;
  for (const [party, id] of [
    ["referrer", facts.referrerId],
    ["referee", facts.refereeId],
  ] as const) {
    if (list.customerIds.has(id)) return { party, customerId: id };
    const email = party === "referrer" ? evidence.referrerEmail : evidence.refereeEmail;
    if (email) {
      if (list.emails.has(email.canonical)) return { party, email: email.canonical };
      const domain = domainMatch(list.domains, email.domain);
      if (domain) return { party, domain };
    }
    const network = party === "referrer" ? evidence.referrerNetwork : evidence.refereeNetwork;
    if (network) {
      if (list.addressHashes.has(network.addressHash)) {
        return { party, addressHash: network.addressHash };
      }
      if (list.networkHashes.has(network.networkHash)) {
        return { party, networkHash: network.networkHash };
      }
    }
  }
  return null;
}

/** The listed domain `domain` is or is under, if any. */
function domainMatch(domains: ReadonlySet<string>, domain: string): string | null {
  if (domains.size === 0) return null;
  let candidate = domain;
  for (;;) {
    if (domains.has(candidate)) return candidate;
    const dot = candidate.indexOf(".");
    if (dot < 0) return null;
    candidate = candidate.slice(dot + 1);
  }
}

/**
 * The verdicts a policy gives an attribution: an allow-list hit alone
 * (the rules do not run), a deny-list hit alone (rejecting), or the
 * enabled rules' verdicts. In shadow mode each is marked `shadow`.
 */
export function judgeWithPolicy(facts: RuleFacts, policy: CompiledPolicy): SuspectedFraud[] {
  const verdicts = listVerdicts(facts, policy) ?? judgeAttribution(facts, policy.settings);
  return policy.mode === "shadow"
    ? verdicts.map((verdict) => ({ ...verdict, shadow: true }))
    : verdicts;
}

function listVerdicts(facts: RuleFacts, policy: CompiledPolicy): SuspectedFraud[] | null {
  const allowed = listHit(policy.allow, facts);
  if (allowed) return [listVerdict("allow", allowed)];
  const denied = listHit(policy.deny, facts);
  return denied ? [listVerdict("deny", denied)] : null;
}

/** A list's verdict: an allow-list hit notes, a deny-list hit rejects. */
function listVerdict(side: "allow" | "deny", hit: Record<string, string>): SuspectedFraud {
  const allow = side === "allow";
  return {
    type: allow ? "allow_list" : "deny_list",
    message: `the ${hit.party} is on the campaign's ${side} list`,
    action: allow ? "note" : "reject",
    severity: allow ? "low" : "high",
    ruleVersion: 1,
    evidence: hit,
  };
}

const actionStrength: Readonly<Record<FraudActionName, number>> = {
  note: 0,
  hold_reward: 1,
  flag: 2,
  reject: 3,
};

/**
 * The strongest action of the verdicts that act (not in shadow), or null
 * when none acts: what the referral's status follows.
 */
export function strongestAction(verdicts: readonly SuspectedFraud[]): FraudActionName | null {
  let strongest: FraudActionName | null = null;
  for (const verdict of verdicts) {
    if (verdict.shadow) continue;
    // Verdicts stored before actions flagged.
    const action = verdict.action ?? "flag";
    if (strongest === null || actionStrength[action] > actionStrength[strongest]) {
      strongest = action;
    }
  }
  return strongest;
}
