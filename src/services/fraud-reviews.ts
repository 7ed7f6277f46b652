import { createHash } from "node:crypto";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type {
  FraudReviewSchema,
  SharedFraudSignalSchema,
} from "../../gen/referral/v1/referrals_pb.js";
import { FraudReviewLapse, RiskLevel } from "../../gen/referral/v1/resources_pb.js";
import type { FraudReviewLapseName } from "../domain/fraud-policy.js";
import type { SeverityName } from "../domain/fraud-rules.js";
import type { ReferralDoc } from "../store/documents.js";

/**
 * The fraud review queue (docs/fraud.md): the referrals waiting for a
 * review grouped by campaign, referrer and the rule that stopped them,
 * each group with an id a decision names; and the referrers whose
 * referees share a network, a device or an email base.
 */

/** What a review group is: the campaign, the referrer and the rule. */
export interface ReviewKey {
  readonly campaignId: string;
  readonly referrerId: string;
  readonly ruleType: string;
}

/** The rule type of referrals a reviewer flagged by hand (no verdict stopped them). */
export const manualFlag = "review";

/**
 * A review group's id: a digest of its key, short enough for a URL
 * segment; a decision finds its group again among the waiting referrals.
 */
export function reviewIdOf(key: ReviewKey): string {
  const text = `${key.campaignId}\n${key.referrerId}\n${key.ruleType}`;
  return `frv_${createHash("sha256").update(text).digest("base64url").slice(0, 24)}`;
}

/** Whether a string has the form of a review id. */
export function isReviewId(id: string): boolean {
  return /^frv_[A-Za-z0-9_-]{24}$/.test(id);
}

/** The waiting referrals of the group `id` names, and its key; null when none waits. */
export function reviewGroupOf(
  waiting: readonly ReferralDoc[],
  id: string,
): { key: ReviewKey; referrals: ReferralDoc[] } | null {
  let key: ReviewKey | null = null;
  const referrals: ReferralDoc[] = [];
  for (const referral of waiting) {
    for (const ruleType of reviewRulesOf(referral)) {
      const candidate = {
        campaignId: referral.campaignId,
        referrerId: referral.referrerId,
        ruleType,
      };
      if (reviewIdOf(candidate) !== id) continue;
      key = candidate;
      referrals.push(referral);
    }
  }
  return key ? { key, referrals } : null;
}

/** Whether a referral waits for a review: flagged, or its rewards held while it may still pay. */
export function awaitsReview(referral: ReferralDoc): boolean {
  return (
    referral.deletedAt === null &&
    (referral.status === "flagged" ||
      (referral.rewardsHeld === true &&
        (referral.status === "pending" || referral.status === "accepted")))
  );
}

/**
 * The rules a waiting referral is reviewed under: those whose verdicts
 * stop it (flag, hold or legacy verdicts; not notes, not shadow ones), or
 * the reviewer's own flag when none did.
 */
export function reviewRulesOf(referral: ReferralDoc): string[] {
  const acting = referral.suspectedFrauds.filter(
    (fraud) => !fraud.shadow && fraud.action !== "note",
  );
  const types = [...new Set(acting.map((fraud) => fraud.type as string))];
  return types.length > 0 ? types : [manualFlag];
}

/** When a referral entered review: its last move to flagged, else its attribution. */
export function reviewStartOf(referral: ReferralDoc): Date {
  if (referral.status === "flagged") {
    const flagged = referral.statusHistory.findLast((change) => change.toStatus === "flagged");
    if (flagged) return flagged.changedAt;
  }
  return referral.attributedAt;
}

const severityOrder: readonly SeverityName[] = ["low", "medium", "high"];

/** The review terms a group follows: its campaign's (no deadline without a policy). */
export interface ReviewTerms {
  readonly deadlineDays: number;
  readonly onLapse: FraudReviewLapseName;
}

/**
 * The review groups of the waiting referrals, the most recent hit first:
 * counts, last hit, referrals (newest first, at most 100 shown), an
 * evidence summary, the deadline by the campaign's terms, the highest risk.
 */
export function reviewGroups(
  waiting: readonly ReferralDoc[],
  termsOf: (campaignId: string) => ReviewTerms,
): MessageInitShape<typeof FraudReviewSchema>[] {
  const groups = new Map<string, { key: ReviewKey; referrals: ReferralDoc[] }>();
  for (const referral of waiting) {
    for (const ruleType of reviewRulesOf(referral)) {
      const key = { campaignId: referral.campaignId, referrerId: referral.referrerId, ruleType };
      const id = reviewIdOf(key);
      let group = groups.get(id);
      if (!group) {
        group = { key, referrals: [] };
        groups.set(id, group);
      }
      group.referrals.push(referral);
    }
  }
  const reviews = [...groups.entries()].map(([id, { key, referrals }]) => {
    referrals.sort((a, b) => b.attributedAt.getTime() - a.attributedAt.getTime());
    const terms = termsOf(key.campaignId);
    const oldestStart = Math.min(...referrals.map((referral) => reviewStartOf(referral).getTime()));
    const verdict = referrals[0]?.suspectedFrauds.find((fraud) => fraud.type === key.ruleType);
    let risk = 0;
    for (const referral of referrals) {
      risk = Math.max(risk, severityOrder.indexOf(referral.risk?.level ?? "low"));
    }
    const lastHit = referrals[0]?.attributedAt ?? new Date(0);
    return {
      id,
      campaignId: key.campaignId,
      referrerId: key.referrerId,
      ruleType: key.ruleType,
      flagged: referrals.filter((referral) => referral.status === "flagged").length,
      held: referrals.filter((referral) => referral.rewardsHeld === true).length,
      lastHitAt: timestampFromDate(lastHit),
      referralIds: referrals.slice(0, 100).map((referral) => referral._id),
      evidence: evidenceSummary(referrals),
      deadline:
        terms.deadlineDays > 0
          ? timestampFromDate(new Date(oldestStart + terms.deadlineDays * 86_400_000))
          : undefined,
      onLapse: terms.onLapse === "accept" ? FraudReviewLapse.ACCEPT : FraudReviewLapse.KEEP_FLAGGED,
      risk: [RiskLevel.LOW, RiskLevel.MEDIUM, RiskLevel.HIGH][risk] ?? RiskLevel.LOW,
      message: verdict?.message ?? "flagged by a reviewer",
      lastHit,
    };
  });
  reviews.sort((a, b) => b.lastHit.getTime() - a.lastHit.getTime());
  return reviews.map(({ lastHit: _lastHit, ...review }) => review);
}

function evidenceSummary(referrals: readonly ReferralDoc[]) {
  const networks = new Set<string>();
  const devices = new Set<string>();
  const domains = new Map<string, number>();
  let disposable = 0;
  let masked = 0;
  let sameNetwork = 0;
  for (const { evidence } of referrals) {
    if (!evidence) continue;
    const network = evidence.refereeNetwork;
    if (network) networks.add(network.networkHash);
    if (network?.deviceId) devices.add(network.deviceId);
    if (network && network.networkHash === evidence.referrerNetwork?.networkHash) sameNetwork += 1;
    const email = evidence.refereeEmail;
    if (email) {
      domains.set(email.domain, (domains.get(email.domain) ?? 0) + 1);
      if (email.disposable) disposable += 1;
      if (email.masked) masked += 1;
    }
  }
  return {
    networks: networks.size,
    devices: devices.size,
    emailDomains: [...domains.entries()]
      .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
      .slice(0, 10)
      .map(([domain]) => domain),
    disposable,
    masked,
    sameNetworkAsReferrer: sameNetwork,
  };
}

/** An email's base: its mailbox without digits, dots and separators, with its domain. */
export function emailBaseOf(canonical: string): string | null {
  const at = canonical.lastIndexOf("@");
  if (at <= 0) return null;
  const base = canonical.slice(0, at).replace(/[0-9._-]/g, "");
  return base.length >= 2 ? `${base}${canonical.slice(at)}` : null;
}

/**
 * The referrers whose referees share a network, a device or an email
 * base (at least two referees each), the most referees first, at most 50.
 */
export function sharedSignals(
  referrals: readonly ReferralDoc[],
): MessageInitShape<typeof SharedFraudSignalSchema>[] {
  const groups = new Map<
    string,
    {
      campaignId: string;
      referrerId: string;
      signal: string;
      value: string;
      referrals: ReferralDoc[];
    }
  >();
  const add = (referral: ReferralDoc, signal: string, value: string | null | undefined) => {
    if (!value) return;
    const id = `${referral.campaignId}\n${referral.referrerId}\n${signal}\n${value}`;
    let group = groups.get(id);
    if (!group) {
      group = {
        campaignId: referral.campaignId,
        referrerId: referral.referrerId,
        signal,
        value,
        referrals: [],
      };
      groups.set(id, group);
    }
    group.referrals.push(referral);
  };
  for (const referral of referrals) {
    const { evidence } = referral;
    if (!evidence || referral.deletedAt !== null) continue;
    add(referral, "network", evidence.refereeNetwork?.networkHash);
    add(referral, "device", evidence.refereeNetwork?.deviceId);
    const canonical = evidence.refereeEmail?.canonical;
    add(referral, "email_base", canonical ? emailBaseOf(canonical) : null);
  }
  return [...groups.values()]
    .map((group) => ({
      group,
      referees: new Set(group.referrals.map((referral) => referral.refereeId)).size,
    }))
    .filter(({ referees }) => referees >= 2)
    .sort((a, b) => b.referees - a.referees)
    .slice(0, 50)
    .map(({ group, referees }) => ({
      campaignId: group.campaignId,
      referrerId: group.referrerId,
      signal: group.signal,
      value: group.value,
      referees,
      referralIds: group.referrals.slice(0, 20).map((referral) => referral._id),
    }));
}
