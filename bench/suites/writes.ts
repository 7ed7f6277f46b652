import {
  type BenchContext,
  diesWithin,
  measureWhileAlive,
  type SeededService,
  startSeededService,
} from "../lib/context.js";
import { load } from "../lib/load.js";
import { type LoadResult, median, medianResult, withServiceCpu } from "../lib/measure.js";
import { selected } from "../lib/options.js";
import { cpuSecondsOf, type ServiceVariant, treeRunQueueWaitSecondsOf } from "../lib/processes.js";
import {
  failureNote,
  formatMs,
  formatPercent,
  formatRate,
  markdownTable,
  protocolLabel,
  resultCells,
} from "../lib/report.js";
import {
  fraudPolicyOf,
  type Protocol,
  pendingCampaignOf,
  poolOf,
  type Scenario,
  type WriteKind,
  writeKinds,
  writeScenario,
} from "../lib/scenarios.js";
import type { SeedPlan } from "../lib/seed.js";

/** The performance issue's goals for writes. */
export const writeGoals: Readonly<Record<WriteKind, number | undefined>> = {
  "identify-new": 5000,
  // Its goal is relative: see `verifiedKeptGoal`.
  "identify-new-verified": undefined,
  "identify-existing": undefined,
  "create-referral": 3000,
  // Their goal is relative: see `policyKeptGoal`.
  "create-referral-no-policy": undefined,
  "create-referral-full-policy": undefined,
  "trigger-checkpoint": 3000,
  // Its goal is relative: see `rewardsKeptGoal`.
  "trigger-checkpoint-rewards": undefined,
};

/**
 * The issue's goal for conversions that grant rewards: trigger-checkpoint in
 * a campaign of two rewards keeps at least this share of its rate without.
 */
export const rewardsKeptGoal = 0.8;

/**
 * The trust issue's goal for identity verification: identify-new with a
 * userHash keeps at least this share of its rate without (issue 41).
 */
export const verifiedKeptGoal = 0.95;

/**
 * The fraud issue's goal: create-referral with every rule of the catalogue
 * keeps at least this share of its rate with a policy of no rule (issue 42).
 */
export const policyKeptGoal = 0.9;

/** The p99 goal at half of the measured peak. */
export const halfRateP99GoalMs = 10;

/** One write on one protocol: its peak, and its latency at half that rate. */
export interface WriteRow {
  readonly kind: WriteKind;
  readonly protocol: Protocol;
  readonly goalRps: number | undefined;
  readonly peak: LoadResult;
  readonly half: LoadResult;
  readonly runs: { readonly peak: LoadResult[]; readonly half: LoadResult[] };
}

const writeProtocols: readonly Protocol[] = ["rest", "grpc"];

/**
 * Every write kind on REST and gRPC: peak runs (closed loop), then runs
 * rate-limited to half the median peak. Each run gets its own service on a
 * freshly seeded store, so repeats start from the same state and a run's
 * own writes never slow the next one.
 */
export async function runWrites(context: BenchContext): Promise<WriteRow[]> {
  const rows: WriteRow[] = [];
  for (const kind of writeKinds.filter((name) => selected(context.options, name))) {
    for (const protocol of writeProtocols) {
      const peakRuns = await peakWrites(context, kind, protocol);
      const halfRuns = await halfPeakRuns(context, kind, protocol, peakRuns, {});
      rows.push({
        kind,
        protocol,
        goalRps: writeGoals[kind],
        peak: medianResult(peakRuns),
        half: medianResult(halfRuns),
        runs: { peak: peakRuns, half: halfRuns },
      });
    }
  }
  return rows;
}

/**
 * Runs of a write open loop at half the median of `peakRuns`, for its
 * latency (the p99 goal), each on its own service of `env`.
 */
export async function halfPeakRuns(
  context: BenchContext,
  kind: WriteKind,
  protocol: Protocol,
  peakRuns: readonly LoadResult[],
  env: Record<string, string>,
): Promise<LoadResult[]> {
  const rate = Math.max(1, Math.round(median(peakRuns.map((run) => run.rps)) / 2));
  const runs: LoadResult[] = [];
  for (let repeat = 0; repeat < context.options.repeats; repeat++) {
    const result = await writeRun(context, kind, protocol, { env, rate });
    runs.push(result);
    context.log(
      `writes ${kind}/${protocol} at ${rate}/s ${repeat + 1}/${context.options.repeats}` +
        `${env.WORKERS === undefined ? "" : ` WORKERS=${env.WORKERS}`}: ` +
        `p99 ${formatMs(result.p99Ms)} ms${failureNote(result)}`,
    );
  }
  return runs;
}

/**
 * The peak runs of a write, measured once per bench run: the webhook suite
 * compares against the same runs when the writes suite ran before it.
 */
export async function peakWrites(
  context: BenchContext,
  kind: WriteKind,
  protocol: Protocol,
): Promise<LoadResult[]> {
  const key = `${kind}/${protocol}`;
  const known = context.peaks.get(key);
  if (known) return known;
  const runs: LoadResult[] = [];
  for (let repeat = 0; repeat < context.options.repeats; repeat++) {
    const result = await writeRun(context, kind, protocol, {});
    runs.push(result);
    context.log(
      `writes ${key} peak ${repeat + 1}/${context.options.repeats}: ${formatRate(result.rps)} req/s` +
        `${failureNote(result)}${result.exhausted ? " (pool used up)" : ""}`,
    );
  }
  context.peaks.set(key, runs);
  return runs;
}

/** What a write run adds to the plain one. */
export interface WriteRunOptions {
  /** Open loop at this rate; closed loop at full speed when unset. */
  readonly rate?: number;
  /** More service configuration. */
  readonly env?: Record<string, string>;
  /** `npm start`'s service, or the same without its operations steps. */
  readonly variant?: ServiceVariant;
  /** Runs on the started service before the load (subscribing a webhook). */
  readonly prepare?: (target: SeededService) => Promise<void>;
  /**
   * Wraps the measured load (not the warm-up): reads the service before and
   * after it (its metrics), or adds to the result. Calls `measure` once.
   */
  readonly around?: (
    target: SeededService,
    measure: () => Promise<LoadResult>,
  ) => Promise<LoadResult>;
}

// Seeded pools hold this much more than the expected rate needs.
const poolMargin = 1.5;

/**
 * One write run on its own service: seeds the pool the kind consumes
 * (sized from the best estimate of its rate so far), warms up on the first
 * part of it, measures on the rest.
 */
export async function writeRun(
  context: BenchContext,
  kind: WriteKind,
  protocol: Protocol,
  run: WriteRunOptions,
): Promise<LoadResult> {
  const expectedRate =
    run.rate ?? (poolOf(kind) ? await estimatedPeak(context, kind, protocol, run.env) : 0);
  const result = await seededRun(context, kind, protocol, {
    ...run,
    expectedRate,
    seconds: context.options.seconds,
  });
  if (run.rate === undefined) {
    const key = estimateKey(kind, protocol, run.env);
    context.estimates.set(key, Math.max(context.estimates.get(key) ?? 0, result.rps));
  }
  return result;
}

/**
 * Which estimate sizes a run's pools: the write, its protocol, and its
 * workers when the run sets them (the default configuration's peak is not
 * one process's).
 */
function estimateKey(kind: WriteKind, protocol: Protocol, env?: Record<string, string>): string {
  const workers = env?.WORKERS;
  return `${kind}/${protocol}${workers === undefined ? "" : ` WORKERS=${workers}`}`;
}

/** A run on a new service whose pool holds enough for `expectedRate` over the warm-up and `seconds`. */
async function seededRun(
  context: BenchContext,
  kind: WriteKind,
  protocol: Protocol,
  run: WriteRunOptions & { expectedRate: number; seconds: number },
): Promise<LoadResult> {
  const { options } = context;
  const pool = poolOf(kind);
  const poolFor = (seconds: number) => Math.ceil(run.expectedRate * seconds * poolMargin) + 50;
  const warmupCount = poolFor(options.warmupSeconds);
  const measuredCount = poolFor(run.seconds);
  const pendingCampaign = pendingCampaignOf(kind);
  const fraudPolicy = fraudPolicyOf(kind);
  const plan: SeedPlan = {
    customers: options.baseCustomers,
    ...(pool ? { [pool]: warmupCount + measuredCount } : {}),
    ...(pendingCampaign ? { pendingCampaign } : {}),
    ...(fraudPolicy ? { fraudPolicy } : {}),
  };
  // A service lost mid-run is measured again on a new store: pools are spent.
  let alive = true;
  return measureWhileAlive(
    context,
    `writes ${kind}/${protocol}`,
    () => alive,
    async () => {
      const target = await startSeededService(context, plan, run.env, run.variant);
      try {
        await run.prepare?.(target);
        // New customers of the warm-up and of the measurement get different ids.
        const tag = `${protocol}-${Date.now().toString(36)}`;
        const phase = (name: string) => writeScenario(kind, target.seeded, `${tag}${name}`);
        const limit = (count: number) => (pool ? count : undefined);
        if (options.warmupSeconds > 0) {
          await load(
            protocol,
            target.service.origin,
            phase("w"),
            { seconds: options.warmupSeconds, rate: run.rate, limit: limit(warmupCount) },
            options,
          );
        }
        const measure = () =>
          withWriterLoad(target.service.pid, () =>
            withServiceCpu(
              () => target.service.cpuSeconds(),
              () =>
                load(
                  protocol,
                  target.service.origin,
                  offset(phase("m"), warmupCount),
                  { seconds: run.seconds, rate: run.rate, limit: limit(measuredCount) },
                  options,
                ),
            ),
          );
        const result = await (run.around ? run.around(target, measure) : measure());
        alive = target.service.alive();
        return result;
      } catch (error) {
        // A generator fails when the service it loads is gone (or going).
        alive = !(await diesWithin(() => target.service.alive()));
        throw error;
      } finally {
        await target.dispose();
      }
    },
  );
}

/**
 * A run with what it asked of the machine beyond CPU per call: the cores
 * the service's first process kept busy (a cluster's primary, whose one
 * loop makes every write), and how long the service's threads waited for
 * a core per call (on two cores shared with the generator, the wait each
 * hop of a call adds).
 */
async function withWriterLoad(pid: number, run: () => Promise<LoadResult>): Promise<LoadResult> {
  const cpuBefore = cpuSecondsOf(pid);
  const waitBefore = treeRunQueueWaitSecondsOf(pid);
  const started = performance.now();
  const result = await run();
  const seconds = (performance.now() - started) / 1000;
  const cpu = cpuSecondsOf(pid) - cpuBefore;
  const waitAfter = treeRunQueueWaitSecondsOf(pid);
  return {
    ...result,
    ...(cpu > 0 && seconds > 0 ? { primaryCores: cpu / seconds } : {}),
    ...(waitBefore !== undefined && waitAfter !== undefined && result.ok > 0
      ? { waitedUs: ((waitAfter - waitBefore) * 1e6) / result.ok }
      : {}),
  };
}

/**
 * The rate a pool-consuming write is expected to reach, to size its pools:
 * the best run so far, or the first time short probes on their own
 * services, from a low guess up. (A pool sized for the goal instead would
 * make the store, and on a store whose costs grow with size the result,
 * depend on the goal.)
 */
async function estimatedPeak(
  context: BenchContext,
  kind: WriteKind,
  protocol: Protocol,
  env: Record<string, string> | undefined,
): Promise<number> {
  const key = estimateKey(kind, protocol, env);
  const known = context.estimates.get(key);
  if (known !== undefined) return known;
  const seconds = Math.min(2, context.options.seconds);
  const ceiling = 3 * (writeGoals[kind] ?? 1000);
  for (let guess = 500; ; ) {
    const probe = await seededRun(context, kind, protocol, {
      expectedRate: guess,
      seconds,
      ...(env ? { env } : {}),
    });
    context.log(
      `writes ${key}: probe at a guess of ${formatRate(guess)}/s: ${formatRate(probe.rps)} req/s` +
        `${probe.exhausted ? " (pool used up, guessing higher)" : ""}`,
    );
    if (!probe.exhausted || guess >= ceiling) {
      context.estimates.set(key, probe.rps);
      return probe.rps;
    }
    guess = Math.max(guess * 3, probe.rps * 2);
  }
}

/** The scenario from request `start` on: warm-up and measurement take disjoint parts of a pool. */
function offset(scenario: Scenario, start: number): Scenario {
  const body = scenario.rest.body;
  return {
    ...scenario,
    message: (i) => scenario.message(start + i),
    rest: { ...scenario.rest, ...(body ? { body: (i: number) => body(start + i) } : {}) },
  };
}

/** The writes table in Markdown, and the tables of the pairs that both ran. */
export function writesTable(rows: readonly WriteRow[]): string {
  return [peakTable(rows), rewardsTable(rows), verifiedTable(rows), policyTable(rows)]
    .filter((table) => table !== undefined)
    .join("\n\n");
}

/**
 * Conversions granting two rewards against conversions granting none, per
 * protocol, from the median peaks of the same run (undefined unless both ran).
 */
export function rewardsTable(rows: readonly WriteRow[]): string | undefined {
  return keptTable(rows, {
    base: "trigger-checkpoint",
    variant: "trigger-checkpoint-rewards",
    headers: ["trigger-checkpoint", "no rewards req/s", "two rewards req/s"],
    goal: rewardsKeptGoal,
  });
}

/**
 * New customers identified with a userHash against without, per protocol,
 * from the median peaks of the same run (undefined unless both ran).
 */
export function verifiedTable(rows: readonly WriteRow[]): string | undefined {
  return keptTable(rows, {
    base: "identify-new",
    variant: "identify-new-verified",
    headers: ["identify-new", "no userHash req/s", "with userHash req/s"],
    goal: verifiedKeptGoal,
  });
}

/**
 * Referrals judged by every rule of the catalogue against by none, per
 * protocol, from the median peaks of the same run (undefined unless both ran).
 */
export function policyTable(rows: readonly WriteRow[]): string | undefined {
  return keptTable(rows, {
    base: "create-referral-no-policy",
    variant: "create-referral-full-policy",
    headers: ["create-referral", "no rule req/s", "every rule req/s"],
    goal: policyKeptGoal,
  });
}

/** A variant's median peak over its base's, per protocol, against a goal. */
function keptTable(
  rows: readonly WriteRow[],
  pair: {
    readonly base: WriteKind;
    readonly variant: WriteKind;
    readonly headers: readonly [string, string, string];
    readonly goal: number;
  },
): string | undefined {
  const pairs = writeProtocols.flatMap((protocol) => {
    const find = (kind: WriteKind) =>
      rows.find((row) => row.kind === kind && row.protocol === protocol);
    const base = find(pair.base);
    const variant = find(pair.variant);
    return base && variant ? [{ protocol, base, variant }] : [];
  });
  if (pairs.length === 0) return undefined;
  return markdownTable(
    [...pair.headers, "kept", `goal ≥ ${formatPercent(pair.goal)}`],
    pairs.map(({ protocol, base, variant }) => {
      const kept = variant.peak.rps / base.peak.rps;
      return [
        protocolLabel[protocol],
        resultCells(base.peak)[0] as string,
        resultCells(variant.peak)[0] as string,
        `${(kept * 100).toFixed(1)}%`,
        kept >= pair.goal ? "met" : "missed",
      ];
    }),
  );
}

function peakTable(rows: readonly WriteRow[]): string {
  return markdownTable(
    [
      "write",
      "protocol",
      "peak req/s",
      "p50 ms",
      "p99 ms",
      "goal req/s",
      "half-peak rate",
      "p99 ms at half",
      `p99 goal ≤ ${halfRateP99GoalMs} ms`,
    ],
    rows.map((row) => [
      row.kind,
      protocolLabel[row.protocol],
      ...resultCells(row.peak),
      row.goalRps === undefined
        ? "-"
        : `${formatRate(row.goalRps)} ${row.peak.rps >= row.goalRps ? "met" : "missed"}`,
      `${formatRate(row.half.targetRate ?? Number.NaN)}/s`,
      formatMs(row.half.p99Ms),
      row.half.p99Ms <= halfRateP99GoalMs ? "met" : "missed",
    ]),
  );
}
