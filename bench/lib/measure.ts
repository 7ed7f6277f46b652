import { createHistogram, type RecordableHistogram } from "node:perf_hooks";

/** What one load run measured. */
export interface LoadResult {
  /** Successful responses (2xx, or the status the request expects; for gRPC also grpc-status 0). */
  readonly ok: number;
  /** Error statuses, failed gRPC calls, socket errors and timeouts. */
  readonly failed: number;
  /** The failures by what they were (`http 404`, `grpc 5`, `socket`), on a single run. */
  readonly failures?: Readonly<Record<string, number>>;
  /** Wall time of the run. */
  readonly seconds: number;
  /** Successful responses per second. */
  readonly rps: number;
  /** Latency of successful responses, in milliseconds. */
  readonly p50Ms: number;
  readonly p99Ms: number;
  /** The run stopped early because its prepared requests (seeded referees) ran out. */
  readonly exhausted?: boolean;
  /** The rate asked for, on a rate-limited run. */
  readonly targetRate?: number;
  /** The service's CPU time per successful call in microseconds, where a suite measured it. */
  readonly serviceCpuUs?: number;
  /** The load generator's CPU time per successful call in microseconds, where a suite measured it. */
  readonly generatorCpuUs?: number;
  /**
   * Cores the service's first process kept busy over the run (its CPU time
   * over the run's): a cluster's primary, which holds the store's writer.
   */
  readonly primaryCores?: number;
  /**
   * Time the service's threads waited for a core (runnable, not running)
   * per successful call, in microseconds, where the kernel reports it.
   */
  readonly waitedUs?: number;
}

/**
 * Latencies in microseconds: the load generators report milliseconds with
 * fractions, and the fast paths answer well under one millisecond, so a
 * histogram of whole milliseconds (autocannon's own) would read 0 or 1.
 */
export class LatencyRecorder {
  private readonly histogram: RecordableHistogram = createHistogram();

  recordMs(ms: number): void {
    this.histogram.record(Math.max(1, Math.round(ms * 1000)));
  }

  recordMicros(us: number): void {
    this.histogram.record(Math.max(1, Math.round(us)));
  }

  get count(): number {
    return this.histogram.count;
  }

  /** A percentile in milliseconds; 0 when nothing was recorded. */
  percentileMs(p: number): number {
    return this.histogram.count === 0 ? 0 : this.histogram.percentile(p) / 1000;
  }
}

/** Assembles a result from its counts and latencies. */
export function loadResult(
  counts: {
    ok: number;
    failures: Record<string, number>;
    seconds: number;
    exhausted?: boolean;
    targetRate?: number;
  },
  latency: LatencyRecorder,
): LoadResult {
  const failed = Object.values(counts.failures).reduce((sum, count) => sum + count, 0);
  return {
    ok: counts.ok,
    failed,
    ...(failed > 0 ? { failures: counts.failures } : {}),
    seconds: counts.seconds,
    rps: counts.seconds > 0 ? counts.ok / counts.seconds : 0,
    p50Ms: latency.percentileMs(50),
    p99Ms: latency.percentileMs(99),
    ...(counts.exhausted ? { exhausted: true } : {}),
    ...(counts.targetRate !== undefined ? { targetRate: counts.targetRate } : {}),
  };
}

/** Counts one more failure of a kind. */
export function countFailure(failures: Record<string, number>, kind: string): void {
  failures[kind] = (failures[kind] ?? 0) + 1;
}

/** The median of the numbers (the mean of the middle two for an even count). */
export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1
    ? (sorted[middle] as number)
    : ((sorted[middle - 1] as number) + (sorted[middle] as number)) / 2;
}

/** The figure-by-figure median of repeated runs: each column on its own. */
export function medianResult(runs: readonly LoadResult[]): LoadResult {
  return {
    ok: median(runs.map((run) => run.ok)),
    failed: median(runs.map((run) => run.failed)),
    seconds: median(runs.map((run) => run.seconds)),
    rps: median(runs.map((run) => run.rps)),
    p50Ms: median(runs.map((run) => run.p50Ms)),
    p99Ms: median(runs.map((run) => run.p99Ms)),
    ...(runs.some((run) => run.exhausted) ? { exhausted: true } : {}),
    ...(runs[0]?.targetRate !== undefined ? { targetRate: runs[0].targetRate } : {}),
    ...(runs.every((run) => run.serviceCpuUs !== undefined) && runs.length > 0
      ? { serviceCpuUs: median(runs.map((run) => run.serviceCpuUs as number)) }
      : {}),
    ...(runs.every((run) => run.generatorCpuUs !== undefined) && runs.length > 0
      ? { generatorCpuUs: median(runs.map((run) => run.generatorCpuUs as number)) }
      : {}),
    ...(runs.every((run) => run.primaryCores !== undefined) && runs.length > 0
      ? { primaryCores: median(runs.map((run) => run.primaryCores as number)) }
      : {}),
    ...(runs.every((run) => run.waitedUs !== undefined) && runs.length > 0
      ? { waitedUs: median(runs.map((run) => run.waitedUs as number)) }
      : {}),
  };
}

/** A load run with the service's CPU time per successful call over it. */
export function withServiceCpu(
  cpuSeconds: () => number,
  run: () => Promise<LoadResult>,
): Promise<LoadResult> {
  return withCpuPerCall("serviceCpuUs", cpuSeconds, run);
}

/**
 * A load run with the load generator's CPU time per successful call over
 * it (`generatorCpuSeconds`: the bench process and the generators it ran).
 */
export function withGeneratorCpu(
  cpuSeconds: () => number,
  run: () => Promise<LoadResult>,
): Promise<LoadResult> {
  return withCpuPerCall("generatorCpuUs", cpuSeconds, run);
}

async function withCpuPerCall(
  field: "serviceCpuUs" | "generatorCpuUs",
  cpuSeconds: () => number,
  run: () => Promise<LoadResult>,
): Promise<LoadResult> {
  const before = cpuSeconds();
  const result = await run();
  const used = cpuSeconds() - before;
  // Nothing used means nothing read (no /proc): no figure rather than 0 µs.
  return result.ok > 0 && used > 0 ? { ...result, [field]: (used * 1e6) / result.ok } : result;
}
