import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ProgramStatsSchema } from "../../gen/referral/v1/insights_pb.js";
import { CurrencySchema, type RewardTotal } from "../../gen/referral/v1/resources_pb.js";
import { enumWords } from "../contract/options.js";
import { type CurrencyName, fromMinorUnits } from "../domain/money.js";
import type { RewardGrantStatusName } from "../domain/reward-ledger.js";
import { type FraudOutcomeName, metric, metricOf } from "../domain/stats.js";
import {
  conversionBinRange,
  conversionHistogramEdges,
  type StatsSpan,
  spanRunsOf,
  statsInstantText,
} from "../domain/stats-time.js";
import type { StatsTarget } from "../store/insights.js";
import type { TenantStore } from "../store/tenant-store.js";

type ProgramStatsInit = MessageInitShape<typeof ProgramStatsSchema>;

/** The numbers of a period and its points; the period's sums are its points' sums. */
export async function statsOfPeriod(
  store: TenantStore,
  target: StatsTarget,
  period: StatsSpan,
  points: readonly StatsSpan[],
  /** A time zone whose days the target keeps, when the period is on its calendar: one counter a day. */
  keptTimeZone?: string,
): Promise<{ totals: ProgramStatsInit; series: ProgramStatsInit[] }> {
  const runs = points.map((point) => spanRunsOf(point, keptTimeZone));
  const spans = [...points, period].map((span) => [span.from, span.to] as const);
  const [sums, active] = await Promise.all([
    store.insights.sums(target, runs, keptTimeZone),
    store.insights.activeReferrers(target, spans),
  ]);
  const total = new Map<string, number>();
  for (const sum of sums) {
    for (const [name, n] of sum) total.set(name, (total.get(name) ?? 0) + n);
  }
  return {
    totals: programStatsOf(total, active[points.length] ?? 0),
    // A point's time to convert is its count and percentiles; the totals have the histogram.
    series: sums.map((sum, index) => programStatsOf(sum, active[index] ?? 0, { histogram: false })),
  };
}

/** A span as the API shows it. */
export function spanText(span: StatsSpan, timeZone: string): { from: string; to: string } {
  return { from: statsInstantText(span.from, timeZone), to: statsInstantText(span.to, timeZone) };
}

const grantStatuses: readonly RewardGrantStatusName[] = [
  "pending",
  "approved",
  "fulfilled",
  "rejected",
  "voided",
  "expired",
  "capped",
];

/** Counts by name, the most first (then by name), zeros left out. */
function sortedCounts(counts: ReadonlyMap<string, number>): [string, number][] {
  return [...counts.entries()]
    .filter(([, n]) => n !== 0)
    .sort(([a, x], [b, y]) => y - x || a.localeCompare(b));
}

/** A quotient with both terms. */
function ratio(numerator: number, denominator: number) {
  return {
    numerator: BigInt(numerator),
    denominator: BigInt(denominator),
    ...(denominator === 0 ? {} : { value: numerator / denominator }),
  };
}

/** The numbers a set of counter sums makes (see docs/insights.md for each definition). */
export function programStatsOf(
  sums: ReadonlyMap<string, number>,
  referrersActive: number,
  options: { histogram: boolean } = { histogram: true },
): ProgramStatsInit {
  const get = (name: string) => sums.get(name) ?? 0;
  const created = get(metric.created);
  const accepted = get(metric.reached("accepted"));
  const identified = get(metric.identified);
  const checkpoints: { name: string; count: bigint }[] = [];
  const bins: [number, number][] = [];
  const grants = new Map<string, Map<RewardGrantStatusName, { count: number; minor: number }>>();
  const committed = new Map<string, number>();
  const committedCounts = new Map<string, number>();
  const fraud = new Map<string, Record<FraudOutcomeName, number>>();
  const bots = new Map<string, number>();
  const channels = new Map<string, number>();
  for (const [name, n] of sums) {
    const read = metricOf(name);
    if (read?.kind === "bots") {
      bots.set(read.reason, (bots.get(read.reason) ?? 0) + n);
    } else if (read?.kind === "channel") {
      channels.set(read.channel, (channels.get(read.channel) ?? 0) + n);
    } else if (read?.kind === "fraud") {
      let counts = fraud.get(read.rule);
      if (!counts) {
        counts = { note: 0, flag: 0, hold_reward: 0, reject: 0, shadow: 0 };
        fraud.set(read.rule, counts);
      }
      counts[read.outcome] += n;
    } else if (read?.kind === "checkpoint") {
      checkpoints.push({ name: read.name, count: BigInt(n) });
    } else if (read?.kind === "conversionBin") {
      bins.push([read.bin, n]);
    } else if (read?.kind === "grants" || read?.kind === "grantsMinor") {
      const currency = read.currency ?? "";
      const byStatus = grants.get(currency) ?? new Map();
      grants.set(currency, byStatus);
      const total = byStatus.get(read.status) ?? { count: 0, minor: 0 };
      byStatus.set(read.status, total);
      if (read.kind === "grants") total.count += n;
      else total.minor += n;
    } else if (read?.kind === "committedMinor") {
      committed.set(read.currency, n);
    } else if (read?.kind === "committed") {
      const currency = read.currency ?? "";
      committedCounts.set(currency, (committedCounts.get(currency) ?? 0) + n);
      if (!grants.has(currency)) grants.set(currency, new Map());
    }
  }
  checkpoints.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const currencies = enumWords(CurrencySchema).byWord;
  const currencyName = (word: string) => (word === "" ? null : (word as CurrencyName));
  return {
    customersIdentified: BigInt(identified),
    referrersActive: BigInt(referrersActive),
    referralsCreated: BigInt(created),
    referralsReached: {
      pending: BigInt(get(metric.reached("pending"))),
      flagged: BigInt(get(metric.reached("flagged"))),
      accepted: BigInt(accepted),
      rejected: BigInt(get(metric.reached("rejected"))),
      reversed: BigInt(get(metric.reached("reversed"))),
    },
    checkpoints,
    fraud: [...fraud.entries()]
      .filter(([, counts]) => Object.values(counts).some((n) => n !== 0))
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([rule, counts]) => ({
        rule,
        noted: BigInt(counts.note),
        flagged: BigInt(counts.flag),
        held: BigInt(counts.hold_reward),
        rejected: BigInt(counts.reject),
        shadow: BigInt(counts.shadow),
      })),
    clicks: BigInt(get(metric.clicks)),
    visitors: BigInt(get(metric.visitors)),
    botFetches: sortedCounts(bots).map(([reason, count]) => ({ reason, count: BigInt(count) })),
    channels: sortedCounts(channels).map(([channel, clicks]) => ({
      channel,
      clicks: BigInt(clicks),
    })),
    clickToReferral: ratio(created, get(metric.clicks)),
    conversionRate: ratio(accepted, created),
    cohortConversionRate: ratio(get(metric.cohortAccepted), created),
    kFactor: ratio(accepted, identified),
    timeToConvert: timeToConvertOf(bins, options.histogram),
    rewards: [...grants.entries()]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([word, byStatus]) => {
        const currency = currencyName(word);
        const totals = Object.fromEntries(
          grantStatuses.map((status) => {
            const total = byStatus.get(status) ?? { count: 0, minor: 0 };
            const shown: Pick<RewardTotal, "amount" | "count"> = {
              amount: fromMinorUnits(total.minor, currency),
              count: total.count,
            };
            return [status, shown];
          }),
        );
        const committedTotal: Pick<RewardTotal, "amount" | "count"> = {
          amount: fromMinorUnits(committed.get(word) ?? 0, currency),
          count: committedCounts.get(word) ?? 0,
        };
        return {
          ...(currency ? { currency: currencies.get(currency) } : {}),
          ...totals,
          committed: committedTotal,
        };
      }),
    costPerAcquisition: [...committed.entries()]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([word, minor]) => {
        const currency = word as CurrencyName;
        const committedAmount = fromMinorUnits(minor, currency);
        return {
          currency: currencies.get(currency),
          committedAmount,
          referralsAccepted: BigInt(accepted),
          // Rounded to the minor unit, as every amount the service shows.
          ...(accepted === 0
            ? {}
            : { amount: fromMinorUnits(Math.round(minor / accepted), currency) }),
        };
      }),
  };
}

/** Percentiles and the histogram from the fine bins. */
function timeToConvertOf(
  bins: [number, number][],
  withHistogram: boolean,
): ProgramStatsInit["timeToConvert"] {
  bins.sort((a, b) => a[0] - b[0]);
  const count = bins.reduce((sum, [, n]) => sum + n, 0);
  const percentile = (fraction: number): bigint | undefined => {
    if (count === 0) return undefined;
    const rank = Math.ceil(fraction * count);
    let seen = 0;
    for (const [bin, n] of bins) {
      seen += n;
      if (seen >= rank) {
        const range = conversionBinRange(bin);
        return BigInt(range.to ?? range.from);
      }
    }
    return undefined;
  };
  const histogram = (withHistogram ? conversionHistogramEdges : []).map((from, index) => {
    const to = conversionHistogramEdges[index + 1];
    let n = 0;
    for (const [bin, binCount] of bins) {
      const range = conversionBinRange(bin);
      if (range.from >= from && (to === undefined || range.from < to)) n += binCount;
    }
    return {
      fromSeconds: BigInt(from),
      ...(to === undefined ? {} : { toSeconds: BigInt(to) }),
      count: BigInt(n),
    };
  });
  const p50 = percentile(0.5);
  const p90 = percentile(0.9);
  return {
    count: BigInt(count),
    ...(p50 === undefined ? {} : { p50Seconds: p50 }),
    ...(p90 === undefined ? {} : { p90Seconds: p90 }),
    histogram,
  };
}
