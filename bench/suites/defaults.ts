import type { BenchContext } from "../lib/context.js";
import { type LoadResult, median, medianResult } from "../lib/measure.js";
import { selected } from "../lib/options.js";
import { startReceiver } from "../lib/receiver.js";
import {
  failureNote,
  formatMicros,
  formatMs,
  formatPercent,
  formatRate,
  markdownTable,
} from "../lib/report.js";
import type { WriteKind } from "../lib/scenarios.js";
import { keptRateGoal, webhookKinds, withWebhook } from "./webhooks.js";
import { halfPeakRuns, halfRateP99GoalMs, rewardsKeptGoal, writeRun } from "./writes.js";

/**
 * The service as `npm start` runs it: a process per core. The other write
 * suites run one process, to compare its costs with bare ceilings.
 */
export const defaultConfiguration: Readonly<Record<string, string>> = { WORKERS: "auto" };

/** What a write's variant adds to it. */
export type Addition = "two rewards" | "a webhook";

/** A write against the same write with what it triggers, on the default configuration. */
export interface DefaultsRow {
  readonly write: WriteKind;
  readonly adds: Addition;
  readonly without: LoadResult;
  readonly with: LoadResult;
  /** With over without (median req/s). */
  readonly kept: number;
  readonly goal: number;
  readonly runs: { readonly without: LoadResult[]; readonly with: LoadResult[] };
  /** With a webhook: events the receiver got per second of each run. */
  readonly eventsPerSecond?: number[];
}

/** A write open loop at half its median peak without additions: its latency. */
export interface HalfPeakRow {
  readonly write: WriteKind;
  /** The median peak it is half of (closed loop, the rows' runs without). */
  readonly peakRps: number;
  readonly rate: number;
  readonly half: LoadResult;
  readonly runs: LoadResult[];
}

/** The defaults suite's results. */
export interface DefaultsResults {
  /** The service's configuration beyond the bench's own (its rate limits). */
  readonly env: Readonly<Record<string, string>>;
  readonly rows: DefaultsRow[];
  /** Absent in results written before it was measured. */
  readonly halfPeak?: HalfPeakRow[];
}

/** One configuration a repeat runs: a write, and what it adds. */
interface Variant {
  readonly write: WriteKind;
  readonly adds?: Addition;
}

const variantLabel = (variant: Variant) =>
  variant.adds === undefined ? variant.write : `${variant.write} with ${variant.adds}`;

/**
 * The performance issue's two ratios on the default configuration, REST,
 * closed loop: trigger-checkpoint in a campaign of two rewards against one
 * of none, and each webhook write with the receiver subscribed to every
 * event against without. Each repeat runs every variant once, taking
 * turns, each on its own freshly seeded service, so a slower stretch of
 * the machine falls on both sides of a ratio.
 */
export async function runDefaults(context: BenchContext): Promise<DefaultsResults> {
  const wanted = (write: WriteKind) => selected(context.options, write);
  const variants: Variant[] = [];
  for (const write of webhookKinds.filter(wanted)) {
    variants.push({ write }, { write, adds: "a webhook" });
  }
  if (wanted("trigger-checkpoint-rewards")) {
    if (!variants.some((variant) => variant.write === "trigger-checkpoint")) {
      variants.push({ write: "trigger-checkpoint" });
    }
    variants.push({ write: "trigger-checkpoint", adds: "two rewards" });
  }
  const runs = new Map(variants.map((variant) => [variantLabel(variant), [] as LoadResult[]]));
  const events = new Map<WriteKind, number[]>();
  const receiver = await startReceiver();
  const runVariant = async (variant: Variant): Promise<LoadResult> => {
    const env = { ...defaultConfiguration };
    if (variant.adds === undefined) return writeRun(context, variant.write, "rest", { env });
    if (variant.adds === "two rewards") {
      return writeRun(context, "trigger-checkpoint-rewards", "rest", { env });
    }
    await receiver.reset();
    const received = events.get(variant.write) ?? [];
    events.set(variant.write, received);
    const run = withWebhook(receiver, env, (rate) => received.push(rate));
    return writeRun(context, variant.write, "rest", run);
  };
  try {
    for (let repeat = 0; repeat < context.options.repeats; repeat++) {
      for (const variant of variants) {
        const result = await runVariant(variant);
        runs.get(variantLabel(variant))?.push(result);
        context.log(
          `defaults ${variantLabel(variant)} ${repeat + 1}/${context.options.repeats}: ` +
            `${formatRate(result.rps)} req/s${failureNote(result)}`,
        );
      }
    }
  } finally {
    await receiver.stop();
  }
  // Then each write alone at half its median peak, open loop: the p99 goal.
  const halfPeak: HalfPeakRow[] = [];
  for (const write of webhookKinds.filter(wanted)) {
    const peakRuns = runs.get(write) ?? [];
    const env = { ...defaultConfiguration };
    const halfRuns = await halfPeakRuns(context, write, "rest", peakRuns, env);
    halfPeak.push({
      write,
      peakRps: median(peakRuns.map((run) => run.rps)),
      rate: halfRuns[0]?.targetRate ?? Number.NaN,
      half: medianResult(halfRuns),
      runs: halfRuns,
    });
  }
  const rows = variants.flatMap((variant): DefaultsRow[] => {
    if (variant.adds === undefined) return [];
    const without = runs.get(variant.write) ?? [];
    const withRuns = runs.get(variantLabel(variant)) ?? [];
    const withoutMedian = medianResult(without);
    const withMedian = medianResult(withRuns);
    const eventsPerSecond = variant.adds === "a webhook" ? events.get(variant.write) : undefined;
    return [
      {
        write: variant.write,
        adds: variant.adds,
        without: withoutMedian,
        with: withMedian,
        kept: withMedian.rps / withoutMedian.rps,
        goal: variant.adds === "two rewards" ? rewardsKeptGoal : keptRateGoal,
        runs: { without, with: withRuns },
        ...(eventsPerSecond ? { eventsPerSecond } : {}),
      },
    ];
  });
  return { env: defaultConfiguration, rows, halfPeak };
}

/** The defaults tables in Markdown: what additions keep, then the latency at half the peak. */
export function defaultsTable(results: DefaultsResults): string {
  const kept = markdownTable(
    [
      "write (REST)",
      "adds",
      "req/s without",
      "req/s with",
      "kept",
      "goal",
      "events received per s meanwhile",
      "primary's cores busy without / with",
    ],
    results.rows.map((row) => [
      row.write,
      row.adds,
      formatRate(row.without.rps),
      formatRate(row.with.rps),
      formatPercent(row.kept),
      `≥ ${formatPercent(row.goal)} ${row.kept >= row.goal ? "met" : "missed"}`,
      row.eventsPerSecond ? formatRate(median(row.eventsPerSecond)) : "-",
      `${formatCores(row.without.primaryCores)} / ${formatCores(row.with.primaryCores)}`,
    ]),
  );
  if (!results.halfPeak || results.halfPeak.length === 0) return kept;
  const latency = markdownTable(
    [
      "write (REST)",
      "peak req/s",
      "half-peak rate",
      "achieved req/s",
      "p50 ms",
      "p99 ms",
      `p99 goal ≤ ${halfRateP99GoalMs} ms`,
      "service CPU µs/call",
      "primary's cores busy",
      "service threads waited for a core, µs/call",
    ],
    results.halfPeak.map((row) => [
      row.write,
      formatRate(row.peakRps),
      `${formatRate(row.rate)}/s`,
      formatRate(row.half.rps),
      formatMs(row.half.p50Ms),
      formatMs(row.half.p99Ms),
      row.half.p99Ms <= halfRateP99GoalMs ? "met" : "missed",
      formatMicros(row.half.serviceCpuUs),
      formatCores(row.half.primaryCores),
      formatMicros(row.half.waitedUs),
    ]),
  );
  return `${kept}\n\n${latency}`;
}

/** Cores kept busy; "-" in results written before it was measured. */
function formatCores(value: number | undefined): string {
  return value === undefined ? "-" : value.toFixed(2);
}
