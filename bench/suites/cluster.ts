import { closeSync, cpSync, fsyncSync, mkdtempSync, openSync, rmSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type BenchContext, measureWhileAlive, stopService } from "../lib/context.js";
import { load } from "../lib/load.js";
import {
  type LoadResult,
  median,
  medianResult,
  withGeneratorCpu,
  withServiceCpu,
} from "../lib/measure.js";
import { metricSamples, metricSum, scrapeMetrics } from "../lib/metrics.js";
import { type BenchOptions, selected } from "../lib/options.js";
import {
  cpuSecondsOf,
  generatorCpuSeconds,
  machineBusySeconds,
  type ServiceVariant,
  startService,
} from "../lib/processes.js";
import {
  failureNote,
  formatMicros,
  formatMs,
  formatRate,
  markdownTable,
  protocolLabel,
  resultCells,
} from "../lib/report.js";
import {
  grpcRequest,
  type Protocol,
  readScenarios,
  restRequest,
  type Scenario,
  type WriteKind,
} from "../lib/scenarios.js";
import { seedStore } from "../lib/seed.js";
import { grpcSender } from "../lib/senders.js";
import { halfRateP99GoalMs, writeRun } from "./writes.js";

/** The goals of the cluster issue, checked against figures of the same run. */
export const clusterGoals = {
  /** Reads: req/s at WORKERS=2 over req/s at WORKERS=1 (aiming at 1.7). */
  readScaling: 1.5,
  readScalingAim: 1.7,
  /** Identify: WORKERS=2 with group commit over WORKERS=1 committing each write alone. */
  groupOverPerWriteCommit: 1.5,
  /** Every write: WORKERS=2 at synchronous=full over WORKERS=1 at the previous default, normal. */
  fullOverNormal: 1,
} as const;

/** The token the bench's services serve `/metrics` with. */
const metricsToken = "bench-metrics-token";

/** A measured run, with what the cluster suite reads besides the load. */
export type ClusterRun = LoadResult & {
  /**
   * CPU per call of the service's first process, in µs: the primary at
   * WORKERS=2 (the writer, the rate limits' counters), the only one at 1.
   */
  readonly primaryCpuUs?: number;
  /** Cores the rest of the machine kept busy during the run (other work, interrupts). */
  readonly otherCores?: number;
  /** Runs measured before this one and discarded: the rest of the machine was busier. */
  readonly noisyRunsDiscarded?: number;
};

/** One read at WORKERS=1 and at WORKERS=2. */
export interface ClusterReadRow {
  readonly scenario: string;
  readonly protocol: Protocol;
  /** The connections the load is spread over (HTTP/1.1 for REST, HTTP/2 for gRPC). */
  readonly connections: number;
  readonly one: ClusterRun;
  readonly two: ClusterRun;
  /** req/s at WORKERS=2 over req/s at WORKERS=1 (medians). */
  readonly scaling: number;
  readonly runs: { readonly one: ClusterRun[]; readonly two: ClusterRun[] };
}

/** How the service is run for a write: workers, durability, group commit. */
export type WriteSetup = "workers2-full" | "workers1-full" | "per-write-commit" | "workers1-normal";

/** The write setups, in the tables' order: (a), (b), (c), (d). */
export const writeSetups: readonly WriteSetup[] = [
  "workers2-full",
  "workers1-full",
  "per-write-commit",
  "workers1-normal",
];

const setupOf: Record<
  WriteSetup,
  { readonly label: string; readonly env: Record<string, string>; readonly variant: ServiceVariant }
> = {
  "workers2-full": {
    label: "(a) WORKERS=2, full, group commit",
    env: serviceEnv(2, "full"),
    variant: "deployed",
  },
  "workers1-full": {
    label: "(b) WORKERS=1, full, group commit",
    env: serviceEnv(1, "full"),
    variant: "deployed",
  },
  "per-write-commit": {
    label: "(c) WORKERS=1, full, a commit per write",
    env: serviceEnv(1, "full"),
    variant: "per-write-commit",
  },
  "workers1-normal": {
    label: "(d) WORKERS=1, normal, group commit",
    env: serviceEnv(1, "normal"),
    variant: "deployed",
  },
};

/** The store's commits over a measured run, from `/metrics`. */
export interface CommitCounts {
  /** Collection writes committed (`store_committed_writes_total`). */
  readonly writes: number;
  /** Commits (`store_group_commits_total`). */
  readonly commits: number;
  /** Seconds between the two scrapes. */
  readonly seconds: number;
}

/** One write in one setup. */
export interface ClusterWriteRun {
  readonly result: ClusterRun;
  readonly commits?: CommitCounts;
  /** Closed-loop connections of the run. */
  readonly connections: number;
}

/** One write kind in every setup. */
export interface ClusterWriteRow {
  readonly kind: WriteKind;
  readonly protocol: Protocol;
  readonly setups: Partial<
    Record<
      WriteSetup,
      {
        /** The peak: the median run at the connection count whose median rate was highest. */
        readonly result: ClusterRun;
        /** The connections of the peak (see {@link writeConnectionCounts}). */
        readonly connections: number;
        /** The median rate at each connection count measured. */
        readonly rpsByConnections: Readonly<Record<string, number>>;
        /** Store writes per commit over the peak's runs (medians). */
        readonly writesPerCommit?: number;
        readonly commitsPerSecond?: number;
        readonly runs: ClusterWriteRun[];
      }
    >
  >;
}

/** Identify of new customers at half the peak of setup (a). */
export interface ClusterHalfPeak {
  readonly kind: WriteKind;
  readonly protocol: Protocol;
  readonly setup: WriteSetup;
  /** The peak's connections, over which the open loop sends (see {@link halfPeakRun}). */
  readonly connections: number;
  readonly peakRps: number;
  readonly result: ClusterRun;
  readonly runs: ClusterRun[];
}

/** Resident memory of every process after the read runs, in bytes (medians over the repeats). */
export interface ClusterMemory {
  readonly one: Record<string, number>;
  readonly two: Record<string, number>;
  readonly runs: { readonly one: Record<string, number>[]; readonly two: Record<string, number>[] };
}

/** How long an fsync takes on the file system of the stores (DATA_DIR is in the temporary directory). */
export interface FsyncTiming {
  readonly samples: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
}

/** What the cluster suite measured. */
export interface ClusterResults {
  readonly reads: ClusterReadRow[];
  readonly memory?: ClusterMemory;
  readonly writes: ClusterWriteRow[];
  readonly halfPeak?: ClusterHalfPeak;
  readonly fsync: FsyncTiming;
}

/** A read of the suite: its scenario and protocol, over one connection or many. */
interface ReadTarget {
  readonly scenario: string;
  readonly protocol: Protocol;
  readonly oneConnection?: boolean;
}

/** The reads, each at WORKERS=1 and 2; the last one over a single HTTP/2 connection. */
const readTargets: readonly ReadTarget[] = [
  { scenario: "GetCustomer", protocol: "rest" },
  { scenario: "GetCustomer", protocol: "grpc" },
  { scenario: "ListCampaigns", protocol: "rest" },
  { scenario: "GetCustomer", protocol: "grpc", oneConnection: true },
];

const writeKindsMeasured: readonly WriteKind[] = [
  "identify-new",
  "create-referral",
  "trigger-checkpoint",
];
const writeProtocol: Protocol = "rest";
const halfPeakKind: WriteKind = "identify-new";
const halfPeakSetup: WriteSetup = "workers2-full";

/**
 * WORKERS=2 against WORKERS=1 on the embedded store: reads (each at both,
 * with its scaling ratio, and gRPC over one HTTP/2 connection, which stays
 * on one worker), resident memory per process, and durable writes in four
 * setups (WORKERS=2 and 1 at synchronous=full with group commit, WORKERS=1
 * committing each write alone, WORKERS=1 at synchronous=normal) with the
 * store's writes per commit; then identify at half the WORKERS=2 peak.
 */
export async function runCluster(context: BenchContext): Promise<ClusterResults> {
  const fsync = timeFsync();
  context.log(
    `cluster: fsync of a 4 KiB append in ${tmpdir()}: p50 ${formatMs(fsync.p50Ms)} ms, ` +
      `p99 ${formatMs(fsync.p99Ms)} ms`,
  );
  const { reads, memory } = await readRows(context);
  const writes = await writeRows(context);
  const halfPeak = await halfPeakRun(context, writes);
  return {
    reads,
    ...(memory ? { memory } : {}),
    writes,
    ...(halfPeak ? { halfPeak } : {}),
    fsync,
  };
}

function serviceEnv(workers: number, synchronous: "full" | "normal"): Record<string, string> {
  return {
    WORKERS: String(workers),
    SQLITE_SYNCHRONOUS: synchronous,
    METRICS_TOKEN: metricsToken,
  };
}

function wantedReads(options: BenchOptions) {
  return readTargets.filter(
    (target) =>
      selected(options, target.scenario) ||
      (target.oneConnection === true && selected(options, "one-connection")),
  );
}

/**
 * The reads, on one seeded store copied for every start of a service. In
 * each repeat, one service at a time (WORKERS=1, then 2; the other way
 * round in the next repeat) is started, warmed up on every read, measured
 * on every read, its processes' resident memory read from /metrics, and
 * stopped: the one not measured is not running.
 */
async function readRows(
  context: BenchContext,
): Promise<{ reads: ClusterReadRow[]; memory?: ClusterMemory }> {
  const { options, log } = context;
  const targets = wantedReads(options);
  if (targets.length === 0) return { reads: [] };
  log(`cluster: seeding ${options.baseCustomers} customers for the reads`);
  const directory = mkdtempSync(join(tmpdir(), "referrals-bench-"));
  try {
    const seeded = await seedStore(join(directory, "seeded"), { customers: options.baseCustomers });
    context.engine ??= seeded.engine;
    const scenarios = readScenarios(seeded);
    const scenarioOf = (name: string) =>
      scenarios.find((scenario) => scenario.name === name) as Scenario;
    const runs = targets.map(() => ({ one: [] as ClusterRun[], two: [] as ClusterRun[] }));
    const memory = { one: [] as Record<string, number>[], two: [] as Record<string, number>[] };
    const checked = [...new Set(targets.map((target) => target.scenario))].map(scenarioOf);
    let starts = 0;
    for (let repeat = 0; repeat < options.repeats; repeat++) {
      for (const workers of repeat % 2 === 0 ? [1, 2] : [2, 1]) {
        // A fresh copy of the seeded store for every start.
        const dataDir = join(directory, `run-${starts++}`);
        const start = async () => {
          cpSync(join(directory, "seeded"), dataDir, { recursive: true });
          const started = await startService(dataDir, serviceEnv(workers, "full"));
          await checkAnswers(started.origin, checked);
          return started;
        };
        let service = await start();
        const measure = (target: ReadTarget, seconds: number) => {
          const loadOptions = target.oneConnection ? { ...options, h2Connections: 1 } : options;
          const scenario = scenarioOf(target.scenario);
          return measureWhileAlive(
            context,
            `cluster ${readLabel(target, options)} WORKERS=${workers}`,
            () => service.alive(),
            () =>
              observed(service, () =>
                load(target.protocol, service.origin, scenario, { seconds }, loadOptions),
              ),
            async () => {
              await stopService(context, service);
              rmSync(dataDir, { recursive: true, force: true });
              service = await start();
            },
          );
        };
        try {
          if (options.warmupSeconds > 0) {
            log(
              `cluster: warming up every read at WORKERS=${workers} for ${options.warmupSeconds} s`,
            );
            for (const target of targets) await measure(target, options.warmupSeconds);
          }
          for (const [index, target] of targets.entries()) {
            const result = await quietRun(
              context,
              `${readLabel(target, options)} WORKERS=${workers}`,
              () => measure(target, options.seconds),
              (run) => run.otherCores,
              (run, discarded) => ({ ...run, noisyRunsDiscarded: discarded }),
            );
            const entry = runs[index] as { one: ClusterRun[]; two: ClusterRun[] };
            (workers === 1 ? entry.one : entry.two).push(result);
            log(
              `cluster ${repeat + 1}/${options.repeats} ${readLabel(target, options)} WORKERS=${workers}: ` +
                `${formatRate(result.rps)} req/s${failureNote(result)}`,
            );
          }
          const resident = await residentMemory(service.origin);
          (workers === 1 ? memory.one : memory.two).push(resident);
          log(`cluster WORKERS=${workers} resident memory: ${describeMemory(resident)}`);
        } finally {
          await stopService(context, service);
          rmSync(dataDir, { recursive: true, force: true });
        }
      }
    }
    const reads = targets.map((target, index) => {
      const entry = runs[index] as { one: ClusterRun[]; two: ClusterRun[] };
      const one = medianRun(entry.one);
      const two = medianRun(entry.two);
      return {
        scenario: target.scenario,
        protocol: target.protocol,
        connections: connectionsOf(target, options),
        one,
        two,
        scaling: two.rps / one.rps,
        runs: entry,
      };
    });
    return {
      reads,
      memory: {
        one: medianMemory(memory.one),
        two: medianMemory(memory.two),
        runs: memory,
      },
    };
  } finally {
    rmSync(directory, { recursive: true, force: true });
  }
}

function connectionsOf(target: ReadTarget, options: BenchOptions): number {
  if (target.oneConnection) return 1;
  return target.protocol === "grpc" ? options.h2Connections : options.concurrency;
}

function readLabel(target: ReadTarget, options: BenchOptions): string {
  const connections = connectionsOf(target, options);
  return `${target.scenario}/${target.protocol} (${connections} connection${connections === 1 ? "" : "s"})`;
}

/** Every scenario answers 200 over REST and grpc-status 0 over gRPC: a benchmark of errors measures nothing. */
async function checkAnswers(origin: string, scenarios: readonly Scenario[]): Promise<void> {
  for (const scenario of scenarios) {
    const spec = restRequest(scenario);
    const response = await fetch(`${origin}${spec.path(0)}`, { headers: spec.headers });
    const body = await response.text();
    if (response.status !== 200) {
      throw new Error(`REST ${scenario.name} answered ${response.status}: ${body.slice(0, 300)}`);
    }
    const sender = await grpcSender(origin, grpcRequest(scenario), 1);
    try {
      const reply = await sender.call(0);
      if (reply.status !== 0) {
        throw new Error(`gRPC ${scenario.name} ended with grpc-status ${reply.status}`);
      }
    } finally {
      sender.close();
    }
  }
}

/**
 * Every write kind in every setup, closed loop over REST, each run on a
 * freshly seeded store (the writes suite's `writeRun`), the setups taking
 * turns within every repeat (reversed in the next), with the store's
 * commits read from /metrics before and after the measured load.
 */
async function writeRows(context: BenchContext): Promise<ClusterWriteRow[]> {
  const { options } = context;
  const rows: ClusterWriteRow[] = [];
  const connectionCounts = writeConnectionCounts(options);
  for (const kind of writeKindsMeasured.filter((name) => selected(options, name))) {
    const runs: Record<WriteSetup, ClusterWriteRun[]> = {
      "workers2-full": [],
      "workers1-full": [],
      "per-write-commit": [],
      "workers1-normal": [],
    };
    for (let repeat = 0; repeat < options.repeats; repeat++) {
      const order = repeat % 2 === 0 ? writeSetups : [...writeSetups].reverse();
      for (const setup of order) {
        for (const connections of connectionCounts) {
          runs[setup].push(await measureWrite(context, kind, setup, connections, repeat));
        }
      }
    }
    const setups: ClusterWriteRow["setups"] = {};
    for (const setup of writeSetups) {
      const rpsByConnections: Record<string, number> = {};
      for (const connections of connectionCounts) {
        rpsByConnections[connections] = median(
          runs[setup].filter((run) => run.connections === connections).map((run) => run.result.rps),
        );
      }
      const connections = connectionCounts.reduce((best, count) =>
        (rpsByConnections[count] ?? 0) > (rpsByConnections[best] ?? 0) ? count : best,
      );
      const peakRuns = runs[setup].filter((run) => run.connections === connections);
      const counted = peakRuns.flatMap((run) => (run.commits ? [run.commits] : []));
      setups[setup] = {
        result: medianRun(peakRuns.map((run) => run.result)),
        connections,
        rpsByConnections,
        ...(counted.length > 0
          ? {
              writesPerCommit: median(counted.map((c) => c.writes / c.commits)),
              commitsPerSecond: median(counted.map((c) => c.commits / c.seconds)),
            }
          : {}),
        runs: runs[setup],
      };
    }
    rows.push({ kind, protocol: writeProtocol, setups });
  }
  return rows;
}

/**
 * One write in one setup at `connections`, on a quiet machine (see
 * {@link quietRun}), logged; measured again with a larger pool if it used
 * its own up.
 */
async function measureWrite(
  context: BenchContext,
  kind: WriteKind,
  setup: WriteSetup,
  connections: number,
  repeat: number,
): Promise<ClusterWriteRun> {
  const what = `${kind} ${setupOf[setup].label}, ${connections} connections`;
  const key = `${kind}/${writeProtocol}`;
  // The best rate so far sizes the next runs' pools, so no setup runs out.
  const noteRate = (rps: number) =>
    context.estimates.set(key, Math.max(context.estimates.get(key) ?? 0, rps));
  const run = await quietRun(
    context,
    what,
    async () => {
      let run = await writeSetupRun(context, kind, setup, connections);
      noteRate(run.result.rps);
      if (run.result.exhausted) {
        // Faster than any run before it (the probe runs the default setup):
        // again, with a pool sized from its own rate.
        context.log(
          `cluster ${what}: used its pool up at ${formatRate(run.result.rps)} req/s; ` +
            "measuring again with a larger one",
        );
        run = await writeSetupRun(context, kind, setup, connections);
        noteRate(run.result.rps);
      }
      return run;
    },
    (run) => run.result.otherCores,
    (run, discarded) => ({
      ...run,
      result: { ...run.result, noisyRunsDiscarded: discarded },
    }),
  );
  const { result, commits } = run;
  context.log(
    `cluster ${repeat + 1}/${context.options.repeats} ${what}: ` +
      `${formatRate(result.rps)} req/s${failureNote(result)}` +
      (commits ? `, ${formatRatio(commits.writes / commits.commits)} writes per commit` : "") +
      `${result.exhausted ? " (pool used up)" : ""}`,
  );
  return run;
}

/** The context with its runs over `connections` connections. */
function withConnections(context: BenchContext, connections: number): BenchContext {
  return { ...context, options: { ...context.options, concurrency: connections } };
}

/**
 * A write's peak is its best rate over these closed-loop connection counts
 * (the usual 32, and twice that): a setup whose calls wait longer for their
 * commits with cores to spare (workers, forwarding every write to the
 * primary) is bound at 32 by connections over latency, not by what it can
 * do; one process on one core is already saturated at 32 and gains nothing.
 */
function writeConnectionCounts(options: BenchOptions): number[] {
  return [options.concurrency, options.concurrency * 2];
}

/**
 * One closed-loop run of a write in a setup on a freshly seeded store, with
 * the store's commits over the measured load (from /metrics).
 */
async function writeSetupRun(
  context: BenchContext,
  kind: WriteKind,
  setup: WriteSetup,
  connections: number,
): Promise<ClusterWriteRun> {
  let commits: CommitCounts | undefined;
  // What `around` returns, the run's result, holds the figures `observed` adds.
  const result: ClusterRun = await writeRun(
    withConnections(context, connections),
    kind,
    writeProtocol,
    {
      env: setupOf[setup].env,
      variant: setupOf[setup].variant,
      around: async (target, measure) => {
        const before = await commitCounts(target.service.origin);
        const started = performance.now();
        const measured = await observed(target.service, measure, false);
        const seconds = (performance.now() - started) / 1000;
        const after = await commitCounts(target.service.origin);
        commits =
          before && after
            ? {
                writes: after.writes - before.writes,
                commits: after.commits - before.commits,
                seconds,
              }
            : undefined;
        return measured;
      },
    },
  );
  return { result, connections, ...(commits ? { commits } : {}) };
}

/** Identify of new customers in setup (a), open loop at half its median peak: p50 and p99. */
async function halfPeakRun(
  context: BenchContext,
  writes: readonly ClusterWriteRow[],
): Promise<ClusterHalfPeak | undefined> {
  const peak = writes.find((row) => row.kind === halfPeakKind)?.setups[halfPeakSetup];
  if (!peak) return undefined;
  const rate = Math.max(1, Math.round(peak.result.rps / 2));
  // Over the peak's connections: fewer could not carry the rate at the peak's latency.
  const overPeakConnections = withConnections(context, peak.connections);
  const runs: ClusterRun[] = [];
  for (let repeat = 0; repeat < context.options.repeats; repeat++) {
    const result = await quietRun(
      context,
      `${halfPeakKind} at ${rate}/s`,
      // What `around` returns, the run's result, holds the figures `observed` adds.
      (): Promise<ClusterRun> =>
        writeRun(overPeakConnections, halfPeakKind, writeProtocol, {
          rate,
          env: setupOf[halfPeakSetup].env,
          variant: setupOf[halfPeakSetup].variant,
          around: (target, measure) => observed(target.service, measure, false),
        }),
      (run) => run.otherCores,
      (run, discarded) => ({ ...run, noisyRunsDiscarded: discarded }),
    );
    runs.push(result);
    context.log(
      `cluster ${halfPeakKind} ${setupOf[halfPeakSetup].label} at ${rate}/s ` +
        `${repeat + 1}/${context.options.repeats}: p50 ${formatMs(result.p50Ms)} ms, ` +
        `p99 ${formatMs(result.p99Ms)} ms${failureNote(result)}`,
    );
  }
  return {
    kind: halfPeakKind,
    protocol: writeProtocol,
    setup: halfPeakSetup,
    connections: peak.connections,
    peakRps: peak.result.rps,
    result: medianRun(runs),
    runs,
  };
}

/**
 * A measured run with the CPU it took: the service's (every process of it),
 * its first process's alone (the cluster's primary, which holds the writer
 * and the rate limits' counters), and the load generator's, per call; and
 * the cores the rest of the machine kept busy meanwhile (other work on it,
 * interrupts), which a run on a quiet machine keeps low.
 */
async function observed(
  service: { readonly pid: number; cpuSeconds(): number },
  run: () => Promise<LoadResult>,
  serviceCpu = true,
): Promise<ClusterRun> {
  const machineBefore = machineBusySeconds();
  const primaryBefore = cpuSecondsOf(service.pid);
  const started = performance.now();
  const measure = serviceCpu ? () => withServiceCpu(() => service.cpuSeconds(), run) : run;
  const result = await withGeneratorCpu(generatorCpuSeconds, measure);
  const seconds = (performance.now() - started) / 1000;
  const primary = cpuSecondsOf(service.pid) - primaryBefore;
  const ours = (((result.serviceCpuUs ?? 0) + (result.generatorCpuUs ?? 0)) * result.ok) / 1e6;
  const other = Math.max(0, (machineBusySeconds() - machineBefore - ours) / seconds);
  return {
    ...result,
    ...(result.ok > 0 && primary > 0 ? { primaryCpuUs: (primary * 1e6) / result.ok } : {}),
    otherCores: other,
  };
}

// Past this many cores kept busy by the rest of the machine, a run is not a quiet machine's.
const otherWorkLimit = 0.3;
// Runs of one figure at most, while the rest of the machine is busy.
const attemptsWhenBusy = 3;

/**
 * Runs `measure` again (a new run, at most {@link attemptsWhenBusy} in all)
 * while the rest of the machine kept more than {@link otherWorkLimit} cores
 * busy during it: on a shared machine, other work comes in bursts. Keeps the
 * quietest run, marked with the runs it took the place of.
 */
async function quietRun<T>(
  context: BenchContext,
  what: string,
  measure: () => Promise<T>,
  otherCores: (run: T) => number | undefined,
  mark: (run: T, discarded: number) => T,
): Promise<T> {
  let quietest: T | undefined;
  let attempts = 0;
  while (attempts < attemptsWhenBusy) {
    const run = await measure();
    attempts++;
    const other = otherCores(run) ?? 0;
    if (quietest === undefined || other < (otherCores(quietest) ?? 0)) quietest = run;
    if (other <= otherWorkLimit) break;
    context.log(
      `cluster ${what}: the rest of the machine kept ${other.toFixed(2)} cores busy during ` +
        `the run (other work?)${attempts < attemptsWhenBusy ? "; measuring again" : `; keeping the quietest of ${attempts} runs`}`,
    );
  }
  const kept = quietest as T;
  return attempts > 1 ? mark(kept, attempts - 1) : kept;
}

/** The figure-by-figure median of runs, with the cluster suite's own figures. */
function medianRun(runs: readonly ClusterRun[]): ClusterRun {
  const primaryCpuUs = medianOf(runs, (run) => run.primaryCpuUs);
  const otherCores = medianOf(runs, (run) => run.otherCores);
  return {
    ...medianResult(runs),
    ...(primaryCpuUs === undefined ? {} : { primaryCpuUs }),
    ...(otherCores === undefined ? {} : { otherCores }),
  };
}

/** The median of a figure over the runs that have it; undefined when none has. */
function medianOf(runs: readonly ClusterRun[], figure: (run: ClusterRun) => number | undefined) {
  const values = runs.flatMap((run) => {
    const value = figure(run);
    return value === undefined ? [] : [value];
  });
  return values.length > 0 ? median(values) : undefined;
}

async function commitCounts(
  origin: string,
): Promise<{ writes: number; commits: number } | undefined> {
  const text = await scrapeMetrics(origin, metricsToken);
  if (text === undefined) return undefined;
  const sum = (name: string) => metricSum(text, name);
  return { writes: sum("store_committed_writes_total"), commits: sum("store_group_commits_total") };
}

/**
 * `process_resident_memory_bytes` of every process of the service: `process`
 * alone at WORKERS=1; `primary`, `worker 1`, `worker 2` (workers in the order
 * of their ids) in a cluster.
 */
async function residentMemory(origin: string): Promise<Record<string, number>> {
  const text = await scrapeMetrics(origin, metricsToken);
  if (text === undefined) return {};
  const found = metricSamples(text, "process_resident_memory_bytes");
  const memory: Record<string, number> = {};
  const workers: [number, number][] = [];
  for (const [labels, bytes] of found) {
    const worker = /worker="([^"]*)"/.exec(labels)?.[1];
    if (worker === undefined) memory.process = bytes;
    else if (worker === "primary") memory.primary = bytes;
    else workers.push([Number(worker), bytes]);
  }
  workers.sort((a, b) => a[0] - b[0]);
  workers.forEach(([, bytes], index) => {
    memory[`worker ${index + 1}`] = bytes;
  });
  return memory;
}

function medianMemory(runs: readonly Record<string, number>[]): Record<string, number> {
  const labels = [...new Set(runs.flatMap((run) => Object.keys(run)))];
  return Object.fromEntries(
    labels.map((label) => [
      label,
      median(runs.flatMap((run) => (run[label] === undefined ? [] : [run[label] as number]))),
    ]),
  );
}

function describeMemory(memory: Record<string, number>): string {
  const parts = Object.entries(memory).map(([label, bytes]) => `${label} ${mebibytes(bytes)}`);
  return parts.length > 0 ? parts.join(", ") : "not read";
}

/**
 * Times fsync of a 4 KiB append to a new file in the temporary directory
 * (where the bench's stores live), one after another: what a commit at
 * synchronous=full waits for at least.
 */
function timeFsync(samplesWanted = 1000): FsyncTiming {
  const directory = mkdtempSync(join(tmpdir(), "referrals-bench-fsync-"));
  try {
    const file = join(directory, "probe");
    const fd = openSync(file, "w");
    const block = Buffer.alloc(4096, 1);
    const times: number[] = [];
    try {
      for (let i = 0; i < samplesWanted; i++) {
        writeSync(fd, block);
        const started = performance.now();
        fsyncSync(fd);
        times.push(performance.now() - started);
      }
    } finally {
      closeSync(fd);
    }
    times.sort((a, b) => a - b);
    const at = (share: number) => times[Math.floor(share * (times.length - 1))] as number;
    return { samples: times.length, p50Ms: at(0.5), p99Ms: at(0.99) };
  } finally {
    rmSync(directory, { recursive: true, force: true });
  }
}

function formatRatio(value: number | undefined): string {
  return value === undefined || !Number.isFinite(value) ? "-" : value.toFixed(2);
}

function formatTimes(value: number): string {
  return Number.isFinite(value) ? `${value.toFixed(2)}×` : "-";
}

/** CPU cores kept busy by a run: (service + generator CPU per call) × calls a second. */
function coresBusy(result: LoadResult): string {
  if (result.serviceCpuUs === undefined || result.generatorCpuUs === undefined) return "-";
  return (((result.serviceCpuUs + result.generatorCpuUs) * result.rps) / 1e6).toFixed(2);
}

function mebibytes(bytes: number): string {
  return `${Math.round(bytes / 2 ** 20).toLocaleString("en-US")} MiB`;
}

/** The cluster suite's tables in Markdown. */
export function clusterTables(results: ClusterResults): string {
  const parts: string[] = [];
  if (results.reads.length > 0) parts.push(readsTable(results.reads));
  if (results.memory) parts.push(memoryTable(results.memory));
  if (results.writes.length > 0) {
    parts.push(writesTable(results.writes), ratiosTable(results.writes));
  }
  if (results.halfPeak) parts.push(halfPeakTable(results.halfPeak));
  parts.push(
    `fsync of a 4 KiB append on the stores' file system, one after another: p50 ` +
      `${formatMs(results.fsync.p50Ms)} ms, p99 ${formatMs(results.fsync.p99Ms)} ms ` +
      `(${formatRate(1000 / results.fsync.p50Ms)} fsyncs a second at most, each waited for).`,
  );
  const other = allRuns(results).flatMap((run) =>
    run.otherCores === undefined ? [] : [run.otherCores],
  );
  if (other.length > 0) {
    const discarded = allRuns(results).reduce((sum, run) => sum + (run.noisyRunsDiscarded ?? 0), 0);
    parts.push(
      `The rest of the machine (other processes, interrupts, loopback networking) kept a median ` +
        `of ${median(other).toFixed(2)} cores busy during the measured runs, at most ` +
        `${Math.max(...other).toFixed(2)}` +
        (discarded > 0
          ? `; ${discarded} runs during which it kept more than ${otherWorkLimit} busy were measured again.`
          : "."),
    );
  }
  return parts.join("\n\n");
}

/** Every measured run of the results. */
function allRuns(results: ClusterResults): ClusterRun[] {
  return [
    ...results.reads.flatMap((row) => [...row.runs.one, ...row.runs.two]),
    ...results.writes.flatMap((row) =>
      Object.values(row.setups).flatMap((setup) => setup.runs.map((run) => run.result)),
    ),
    ...(results.halfPeak?.runs ?? []),
  ];
}

function readsTable(rows: readonly ClusterReadRow[]): string {
  return markdownTable(
    [
      "read",
      "protocol",
      "connections",
      "req/s WORKERS=1",
      "req/s WORKERS=2",
      "2 over 1",
      `goal ≥ ${clusterGoals.readScaling}× (aim ${clusterGoals.readScalingAim}×)`,
      "service CPU µs/call 1",
      "2",
      "of it the primary's",
      "generator CPU µs/call 1",
      "2",
      "cores busy 1",
      "2",
    ],
    rows.map((row) => [
      row.scenario,
      protocolLabel[row.protocol],
      String(row.connections),
      resultCells(row.one)[0] as string,
      resultCells(row.two)[0] as string,
      formatTimes(row.scaling),
      row.connections === 1
        ? "- (one worker)"
        : row.scaling >= clusterGoals.readScaling
          ? "met"
          : "missed",
      formatMicros(row.one.serviceCpuUs),
      formatMicros(row.two.serviceCpuUs),
      formatMicros(row.two.primaryCpuUs),
      formatMicros(row.one.generatorCpuUs),
      formatMicros(row.two.generatorCpuUs),
      coresBusy(row.one),
      coresBusy(row.two),
    ]),
  );
}

function memoryTable(memory: ClusterMemory): string {
  const rows = (workers: number, byProcess: Record<string, number>) => {
    const entries = Object.entries(byProcess);
    const total = entries.reduce((sum, [, bytes]) => sum + bytes, 0);
    return [
      ...entries.map(([label, bytes]) => [String(workers), label, mebibytes(bytes)]),
      ...(entries.length > 1 ? [[String(workers), "all", mebibytes(total)]] : []),
    ];
  };
  return markdownTable(
    ["WORKERS", "process", "resident memory after the reads"],
    [...rows(1, memory.one), ...rows(2, memory.two)],
  );
}

function writesTable(rows: readonly ClusterWriteRow[]): string {
  return markdownTable(
    [
      "write",
      "setup",
      "connections of the peak",
      "req/s",
      "req/s by connections",
      "p50 ms",
      "p99 ms",
      "store writes per commit",
      "commits/s",
      "service CPU µs/call",
      "of it the primary's",
      "generator CPU µs/call",
      "cores busy",
    ],
    rows.flatMap((row) =>
      writeSetups.flatMap((setup) => {
        const measured = row.setups[setup];
        if (!measured) return [];
        return [
          [
            `${row.kind} (${protocolLabel[row.protocol]})`,
            setupOf[setup].label,
            String(measured.connections),
            ...resultCells(measured.result).slice(0, 1),
            Object.entries(measured.rpsByConnections)
              .map(([count, rps]) => `${count}: ${formatRate(rps)}`)
              .join(", "),
            ...resultCells(measured.result).slice(1),
            formatRatio(measured.writesPerCommit),
            measured.commitsPerSecond === undefined ? "-" : formatRate(measured.commitsPerSecond),
            formatMicros(measured.result.serviceCpuUs),
            formatMicros(measured.result.primaryCpuUs),
            formatMicros(measured.result.generatorCpuUs),
            coresBusy(measured.result),
          ],
        ];
      }),
    ),
  );
}

function ratiosTable(rows: readonly ClusterWriteRow[]): string {
  const rps = (row: ClusterWriteRow, setup: WriteSetup) =>
    row.setups[setup]?.result.rps ?? Number.NaN;
  return markdownTable(
    [
      "write",
      "(a) over (c): group commit",
      `goal ≥ ${clusterGoals.groupOverPerWriteCommit}× (identify)`,
      "(a) over (d): full at WORKERS=2 over normal at 1",
      `goal ≥ ${clusterGoals.fullOverNormal.toFixed(1)}×`,
      "(b) over (c)",
      "(b) over (d)",
    ],
    rows.map((row) => {
      const overPerWrite = rps(row, "workers2-full") / rps(row, "per-write-commit");
      const overNormal = rps(row, "workers2-full") / rps(row, "workers1-normal");
      return [
        `${row.kind} (${protocolLabel[row.protocol]})`,
        formatTimes(overPerWrite),
        row.kind !== "identify-new"
          ? "-"
          : overPerWrite >= clusterGoals.groupOverPerWriteCommit
            ? "met"
            : "missed",
        formatTimes(overNormal),
        overNormal >= clusterGoals.fullOverNormal ? "met" : "missed",
        formatTimes(rps(row, "workers1-full") / rps(row, "per-write-commit")),
        formatTimes(rps(row, "workers1-full") / rps(row, "workers1-normal")),
      ];
    }),
  );
}

function halfPeakTable(half: ClusterHalfPeak): string {
  return markdownTable(
    [
      "write",
      "setup",
      "peak req/s",
      "rate",
      "connections",
      "p50 ms",
      "p99 ms",
      `p99 goal ≤ ${halfRateP99GoalMs} ms`,
      // At half a write's peak rate the machine is mostly busy: a write
      // costs less CPU the more writes share its commit.
      "cores busy",
    ],
    [
      [
        `${half.kind} (${protocolLabel[half.protocol]})`,
        setupOf[half.setup].label,
        formatRate(half.peakRps),
        `${formatRate(half.result.targetRate ?? Number.NaN)}/s${failureNote(half.result)}`,
        String(half.connections),
        formatMs(half.result.p50Ms),
        formatMs(half.result.p99Ms),
        half.result.p99Ms <= halfRateP99GoalMs ? "met" : "missed",
        coresBusy(half.result),
      ],
    ],
  );
}
