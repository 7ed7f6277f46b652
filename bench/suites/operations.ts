import { cpSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type BenchContext, measureWhileAlive, stopService } from "../lib/context.js";
import { load } from "../lib/load.js";
import { type LoadResult, medianResult, withServiceCpu } from "../lib/measure.js";
import { selected } from "../lib/options.js";
import {
  calibrationMicros,
  type OperationsVariant,
  type ServiceProcess,
  type SharedServices,
  startService,
  startSharedServices,
} from "../lib/processes.js";
import {
  failureNote,
  formatMs,
  formatPercent,
  formatRate,
  markdownTable,
  protocolLabel,
} from "../lib/report.js";
import { type Protocol, readScenarios, type WriteKind } from "../lib/scenarios.js";
import { seedStore } from "../lib/seed.js";
import { writeRun } from "./writes.js";

/** The operations issue's goal: the steps around each call keep this share of the throughput. */
export const operationsGoal = 0.9;

/**
 * Where the two variants run: each in its own process (as deployed), or
 * both in one process, on two ports (one speed for both; see `readRows`).
 */
export type VariantProcesses = "separate" | "shared";

/** What a run loads: a variant, or (in the shared process) the calibration service. */
type Measured = keyof SharedServices;

/** One call on one protocol, with and without the operations steps. */
export interface OperationsRow {
  readonly call: string;
  readonly protocol: Protocol;
  readonly processes: VariantProcesses;
  readonly without: LoadResult;
  readonly with: LoadResult;
  /** req/s with over req/s without (medians). */
  readonly kept: number;
  /**
   * Shared process only: the service without the steps, plus a step that
   * burns `calibrationMicros` of CPU before each call goes on; `kept` as above.
   */
  readonly calibration?: LoadResult;
  readonly calibrationKept?: number;
  readonly runs: {
    readonly without: LoadResult[];
    readonly with: LoadResult[];
    readonly calibration?: LoadResult[];
  };
}

// The reads served most (a kept customer, the campaign list) on every
// protocol, and the write apps make most on the two protocols writes use.
const reads: readonly { scenario: string; protocols: readonly Protocol[] }[] = [
  { scenario: "GetCustomer", protocols: ["rest", "grpc", "connect"] },
  { scenario: "ListCampaigns", protocols: ["rest", "grpc"] },
];
const writes: readonly { kind: WriteKind; protocols: readonly Protocol[] }[] = [
  { kind: "identify-new", protocols: ["rest", "grpc"] },
];

const variants: readonly OperationsVariant[] = ["without-operations", "deployed"];

/** What each kind of run loads, in the first repeat's order. */
const measuredIn: Record<VariantProcesses, readonly Measured[]> = {
  separate: variants,
  shared: [...variants, "calibration"],
};

const noRuns = (): Record<Measured, LoadResult[]> => ({
  deployed: [],
  "without-operations": [],
  calibration: [],
});

/**
 * What the operations steps around every call (request log and id, metrics,
 * rate limits counted, idempotency keys, store timings) cost in throughput:
 * `npm start`'s service against the same compiled service built without
 * them, closed loop, alternating within every repeat; the reads again with
 * both variants in one process.
 */
export async function runOperations(context: BenchContext): Promise<OperationsRow[]> {
  const rows = await readRows(context, "separate");
  for (const { kind, protocols } of writes.filter(({ kind }) => selected(context.options, kind))) {
    for (const protocol of protocols) {
      const runs = noRuns();
      for (let repeat = 0; repeat < context.options.repeats; repeat++) {
        for (const variant of alternate(variants, repeat)) {
          const result = await writeRun(context, kind, protocol, { variant });
          runs[variant].push(result);
          logRun(context, repeat, `${kind}/${protocol}`, variant, result);
        }
      }
      rows.push(rowOf(kind, protocol, "separate", runs));
    }
  }
  rows.push(...(await readRows(context, "shared")));
  return rows;
}

/**
 * Each service on its own copy of one seeded store (the embedded store has
 * one writer), so both serve the same customers. Both are started anew for
 * every repeat, in turns: two processes running the same build differ by
 * up to a third in CPU per call for as long as they live (not because of
 * where the scheduler puts them: pinned, they differ the same way), so one pair of processes for all repeats would measure
 * that pair. With `shared`, both variants run in one process on two ports,
 * loaded one at a time: the process's speed is then the same for both, and
 * the difference is the steps'. The shared process also serves the
 * calibration service on a third port: what `calibrationMicros` of work
 * before each response costs in the same run.
 */
async function readRows(
  context: BenchContext,
  processes: VariantProcesses,
): Promise<OperationsRow[]> {
  const { options } = context;
  const wanted = reads.filter(({ scenario }) => selected(options, scenario));
  if (wanted.length === 0) return [];
  context.log(`operations (${processes} processes): seeding ${options.baseCustomers} customers`);
  const dataDir = mkdtempSync(join(tmpdir(), "referrals-bench-"));
  const running: Partial<Record<Measured, ServiceProcess>> = {};
  const measured = measuredIn[processes];
  const startAll = async (order: readonly Measured[]) => {
    if (processes === "shared") {
      Object.assign(
        running,
        await startSharedServices({
          deployed: join(dataDir, "deployed"),
          "without-operations": join(dataDir, "without-operations"),
          calibration: join(dataDir, "calibration"),
        }),
      );
      return;
    }
    for (const variant of order) {
      if (variant === "calibration") throw new Error("calibration runs in the shared process");
      running[variant] = await startService(join(dataDir, variant), {}, variant);
    }
  };
  const stopAll = async (order: readonly Measured[]) => {
    for (const variant of order) {
      const service = running[variant];
      running[variant] = undefined;
      if (service) await stopService(context, service);
    }
  };
  try {
    const seeded = await seedStore(join(dataDir, "deployed"), {
      customers: options.baseCustomers,
    });
    context.engine ??= seeded.engine;
    for (const copy of measured.filter((variant) => variant !== "deployed")) {
      cpSync(join(dataDir, "deployed"), join(dataDir, copy), { recursive: true });
    }
    const serviceOf = (variant: Measured) => running[variant] as ServiceProcess;
    const scenarios = readScenarios(seeded);
    const measure = (
      name: string,
      protocol: Protocol,
      variant: Measured,
      seconds: number,
      order: readonly Measured[],
    ) => {
      const scenario = scenarios.find((candidate) => candidate.name === name);
      if (!scenario) throw new Error(`no read scenario ${name}`);
      return measureWhileAlive(
        context,
        `operations ${name}/${protocol} ${variant} (${processes} processes)`,
        () => serviceOf(variant).alive(),
        () =>
          withServiceCpu(
            () => serviceOf(variant).cpuSeconds(),
            () => load(protocol, serviceOf(variant).origin, scenario, { seconds }, options),
          ),
        // One process may serve both: both start again.
        async () => {
          await stopAll(order);
          await startAll(order);
        },
      );
    };
    const targets = wanted.flatMap(({ scenario, protocols }) =>
      protocols.map((protocol) => ({ scenario, protocol })),
    );
    const runs = new Map<string, Record<Measured, LoadResult[]>>();
    for (let repeat = 0; repeat < options.repeats; repeat++) {
      const order = alternate(measured, repeat);
      await startAll(order);
      for (const { scenario, protocol } of targets) {
        for (const variant of order) {
          if (options.warmupSeconds > 0) {
            await measure(scenario, protocol, variant, options.warmupSeconds, order);
          }
        }
      }
      for (const { scenario, protocol } of targets) {
        const key = `${scenario}/${protocol}`;
        const entry = runs.get(key) ?? noRuns();
        runs.set(key, entry);
        for (const variant of order) {
          const result = await measure(scenario, protocol, variant, options.seconds, order);
          entry[variant].push(result);
          logRun(context, repeat, `${key} (${processes} processes)`, variant, result);
        }
      }
      await stopAll(order);
    }
    return targets.map(({ scenario, protocol }) =>
      rowOf(scenario, protocol, processes, runs.get(`${scenario}/${protocol}`) ?? noRuns()),
    );
  } finally {
    await stopAll(measured);
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** Which variant runs first in this repeat: they take turns, so drift falls on both. */
function alternate<T>(order: readonly T[], repeat: number): readonly T[] {
  return repeat % 2 === 0 ? order : [...order].reverse();
}

function logRun(
  context: BenchContext,
  repeat: number,
  key: string,
  variant: Measured,
  result: LoadResult,
): void {
  context.log(
    `operations ${repeat + 1}/${context.options.repeats} ${key} ${variant}: ` +
      `${formatRate(result.rps)} req/s${failureNote(result)}`,
  );
}

function rowOf(
  call: string,
  protocol: Protocol,
  processes: VariantProcesses,
  runs: Record<Measured, LoadResult[]>,
): OperationsRow {
  const without = medianResult(runs["without-operations"]);
  const deployed = medianResult(runs.deployed);
  const calibration = runs.calibration.length > 0 ? medianResult(runs.calibration) : undefined;
  return {
    call,
    protocol,
    processes,
    without,
    with: deployed,
    kept: deployed.rps / without.rps,
    ...(calibration && { calibration, calibrationKept: calibration.rps / without.rps }),
    runs: {
      without: runs["without-operations"],
      with: runs.deployed,
      ...(calibration && { calibration: runs.calibration }),
    },
  };
}

function formatMicros(value: number | undefined): string {
  return value === undefined ? "-" : value.toFixed(1);
}

/** The operations table in Markdown. */
export function operationsTable(rows: readonly OperationsRow[]): string {
  return markdownTable(
    [
      "call",
      "protocol",
      "processes",
      "req/s without",
      "req/s with",
      "kept",
      `goal ≥ ${formatPercent(operationsGoal)}`,
      "service CPU µs/call without",
      "with",
      "p99 ms without",
      "with",
      `a ${calibrationMicros} µs step kept`,
    ],
    rows.map((row) => [
      row.call,
      protocolLabel[row.protocol],
      // Results written before the shared runs existed had separate processes only.
      row.processes === "shared" ? "one for both" : "one each",
      formatRate(row.without.rps),
      formatRate(row.with.rps),
      formatPercent(row.kept),
      row.kept >= operationsGoal ? "met" : "missed",
      formatMicros(row.without.serviceCpuUs),
      formatMicros(row.with.serviceCpuUs),
      formatMs(row.without.p99Ms),
      formatMs(row.with.p99Ms),
      row.calibrationKept === undefined ? "-" : formatPercent(row.calibrationKept),
    ]),
  );
}
