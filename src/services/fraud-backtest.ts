import type { MessageInitShape } from "@bufbuild/protobuf";
import type {
  FraudOutcomeCountsSchema,
  FraudPolicyTestResultSchema,
} from "../../gen/referral/v1/referrals_pb.js";
import { FraudAction } from "../../gen/referral/v1/resources_pb.js";
import { type CompiledPolicy, judgeWithPolicy, strongestAction } from "../domain/fraud-policy.js";
import type { FraudActionName, SuspectedFraud } from "../domain/fraud-rules.js";
import type { ReferralStatusName } from "../domain/referral-status.js";
import type { ReferralDoc } from "../store/documents.js";

/**
 * The backtest of a candidate fraud policy (docs/fraud.md): the
 * campaign's stored referrals judged again from their evidence, the
 * velocity counts recounted from the stored attribution times, and what
 * the candidate would do set against what the rules did. Two passes over
 * the history, in pages: the first keeps each referrer's and network's
 * attribution times (a few numbers a referral), the second judges. A
 * referrer's history the policy of the time did not gather is replayed
 * from the statuses its earlier referrals have now, a network's clicks
 * from the clicks still kept (a click leaves when its window ends); a
 * mailbox check it did not make stays unknown (the rule does not fire).
 */

const hourMs = 3_600_000;
const dayMs = 24 * hourMs;

/**
 * Sorted attribution times by referrer and by network, and the times of
 * each referrer's referrals now flagged or rejected.
 */
export class AttributionTimes {
  private readonly byReferrer = new Map<string, number[]>();
  private readonly byNetwork = new Map<string, number[]>();
  private readonly flagged = new Map<string, number[]>();
  private readonly rejected = new Map<string, number[]>();
  private sorted = false;

  add(referral: ReferralDoc): void {
    const at = referral.attributedAt.getTime();
    push(this.byReferrer, referral.referrerId, at);
    const network = referral.evidence?.refereeNetwork?.networkHash;
    if (network) push(this.byNetwork, network, at);
    if (referral.status === "flagged") push(this.flagged, referral.referrerId, at);
    if (referral.status === "rejected") push(this.rejected, referral.referrerId, at);
  }

  /**
   * The referrer's referrals attributed before `referral` that are now
   * flagged, and rejected: the history a referral judged without it is
   * replayed with (statuses as they stand, not as they stood).
   */
  historyBefore(referral: ReferralDoc, cap: number): { flagged: number; rejected: number } {
    this.sort();
    const at = referral.attributedAt.getTime();
    const before = (times: number[] | undefined) =>
      Math.min(cap, times ? lowerBound(times, at) : 0);
    return {
      flagged: before(this.flagged.get(referral.referrerId)),
      rejected: before(this.rejected.get(referral.referrerId)),
    };
  }

  /** How many other referrals of the referrer were attributed in the `ms` up to `referral`'s. */
  referrerSince(referral: ReferralDoc, ms: number, cap: number): number {
    return this.count(this.byReferrer.get(referral.referrerId), referral, ms, cap);
  }

  /** How many other referrals came from the referee's network in the `ms` up to `referral`'s. */
  networkSince(referral: ReferralDoc, ms: number, cap: number): number | null {
    const network = referral.evidence?.refereeNetwork?.networkHash;
    if (!network) return null;
    return this.count(this.byNetwork.get(network), referral, ms, cap);
  }

  private sort(): void {
    if (this.sorted) return;
    for (const map of [this.byReferrer, this.byNetwork, this.flagged, this.rejected]) {
      for (const list of map.values()) list.sort((a, b) => a - b);
    }
    this.sorted = true;
  }

  private count(times: number[] | undefined, referral: ReferralDoc, ms: number, cap: number) {
    if (!times) return 0;
    this.sort();
    const at = referral.attributedAt.getTime();
    // The live count saw the referrals stored before this one: times in
    // [at - ms, at], this one's own excluded.
    const inWindow = upperBound(times, at) - lowerBound(times, at - ms) - 1;
    return Math.min(cap, Math.max(0, inWindow));
  }
}

function push(map: Map<string, number[]>, key: string, at: number): void {
  const list = map.get(key);
  if (list) list.push(at);
  else map.set(key, [at]);
}

function lowerBound(sorted: readonly number[], value: number): number {
  let low = 0;
  let high = sorted.length;
  while (low < high) {
    const mid = (low + high) >>> 1;
    if ((sorted[mid] as number) < value) low = mid + 1;
    else high = mid;
  }
  return low;
}

function upperBound(sorted: readonly number[], value: number): number {
  let low = 0;
  let high = sorted.length;
  while (low < high) {
    const mid = (low + high) >>> 1;
    if ((sorted[mid] as number) <= value) low = mid + 1;
    else high = mid;
  }
  return low;
}

type Outcomes = Required<Omit<MessageInitShape<typeof FraudOutcomeCountsSchema>, "$typeName">>;

function noOutcomes(): Outcomes {
  return { accepted: 0, rejected: 0, reversed: 0, pending: 0, flagged: 0 };
}

function countOutcome(outcomes: Outcomes, status: ReferralStatusName): void {
  outcomes[status] += 1;
}

const actionNumbers: Readonly<Record<FraudActionName, FraudAction>> = {
  note: FraudAction.NOTE,
  flag: FraudAction.FLAG,
  hold_reward: FraudAction.HOLD_REWARD,
  reject: FraudAction.REJECT,
};

/** Whether verdicts stop a referral: flag or reject it (shadow ones do not). */
function stops(verdicts: readonly SuspectedFraud[]): boolean {
  const action = strongestAction(verdicts);
  return action === "flag" || action === "reject";
}

/** The running tally of a backtest. */
export class BacktestTally {
  private referrals = 0;
  private withoutEvidence = 0;
  private allowed = 0;
  private readonly would = { note: 0, flag: 0, holdReward: 0, reject: 0 };
  private newlyFlagged = 0;
  private noLongerFlagged = 0;
  private readonly newlyFlaggedOutcomes = noOutcomes();
  private readonly rules = new Map<
    string,
    {
      action: FraudActionName;
      hits: number;
      newHits: number;
      lostHits: number;
      outcomes: Outcomes;
      samples: string[];
    }
  >();

  constructor(
    private readonly policy: CompiledPolicy,
    private readonly times: AttributionTimes,
  ) {
    for (const setting of policy.settings) {
      if (!setting.enabled) continue;
      this.rules.set(setting.type, {
        action: setting.action,
        hits: 0,
        newHits: 0,
        lostHits: 0,
        outcomes: noOutcomes(),
        samples: [],
      });
    }
  }

  /**
   * Judges one stored referral again, as enforcing the candidate would have;
   * `networkClicks` is its referee network's clicks recounted from the
   * clicks still kept, for evidence gathered without them.
   */
  add(referral: ReferralDoc, networkClicks: number | null = null): void {
    this.referrals += 1;
    const stored = referral.evidence;
    if (!stored) {
      this.withoutEvidence += 1;
      return;
    }
    const perHour = this.policy.countCap;
    // Counts the policy of the time did not gather are replayed from the history.
    const history =
      stored.referrerFlagged === null || stored.referrerRejected === null
        ? this.times.historyBefore(referral, perHour)
        : { flagged: stored.referrerFlagged, rejected: stored.referrerRejected };
    const evidence = {
      ...stored,
      referrerReferralsLastHour: this.times.referrerSince(referral, hourMs, perHour),
      referrerReferralsLastDay: this.times.referrerSince(referral, dayMs, perHour),
      networkReferralsLastDay: this.times.networkSince(referral, dayMs, perHour),
      networkClicksLastDay: stored.networkClicksLastDay ?? networkClicks,
      referrerFlagged: history.flagged,
      referrerRejected: history.rejected,
    };
    const facts = { referrerId: referral.referrerId, refereeId: referral.refereeId, evidence };
    const verdicts = judgeWithPolicy(facts, { ...this.policy, mode: "enforce" });
    const action = strongestAction(verdicts);
    if (verdicts.some((verdict) => verdict.type === "allow_list")) this.allowed += 1;
    if (action === "note") this.would.note += 1;
    if (action === "flag") this.would.flag += 1;
    if (action === "hold_reward") this.would.holdReward += 1;
    if (action === "reject") this.would.reject += 1;
    const before = referral.suspectedFrauds;
    const stoppedBefore = stops(before);
    const stopsNow = stops(verdicts);
    if (stopsNow && !stoppedBefore) {
      this.newlyFlagged += 1;
      countOutcome(this.newlyFlaggedOutcomes, referral.status);
    }
    if (stoppedBefore && !stopsNow) this.noLongerFlagged += 1;
    const hitTypes = new Set(verdicts.map((verdict) => verdict.type as string));
    const storedTypes = new Set(before.map((verdict) => verdict.type as string));
    for (const [type, rule] of this.rules) {
      if (hitTypes.has(type)) {
        rule.hits += 1;
        if (!storedTypes.has(type)) rule.newHits += 1;
        countOutcome(rule.outcomes, referral.status);
        if (rule.samples.length < 5) rule.samples.push(referral._id);
      } else if (storedTypes.has(type)) {
        rule.lostHits += 1;
      }
    }
  }

  /** How many referrals were replayed so far. */
  get scanned(): number {
    return this.referrals;
  }

  result(): MessageInitShape<typeof FraudPolicyTestResultSchema> {
    return {
      referrals: this.referrals,
      withoutEvidence: this.withoutEvidence,
      would: this.would,
      newlyFlagged: this.newlyFlagged,
      noLongerFlagged: this.noLongerFlagged,
      newlyFlaggedOutcomes: this.newlyFlaggedOutcomes,
      allowed: this.allowed,
      rules: [...this.rules.entries()].map(([type, rule]) => ({
        type,
        action: actionNumbers[rule.action],
        hits: rule.hits,
        newHits: rule.newHits,
        lostHits: rule.lostHits,
        outcomes: rule.outcomes,
        sampleReferralIds: rule.samples,
      })),
    };
  }
}
