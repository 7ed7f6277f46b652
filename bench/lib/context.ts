import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { LoadResult } from "./measure.js";
import type { BenchOptions } from "./options.js";
import { type ServiceProcess, type ServiceVariant, startService } from "./processes.js";
import { type SeededData, type SeedPlan, seedStore } from "./seed.js";

/** What the suites share within one `npm run bench`. */
export interface BenchContext {
  readonly options: BenchOptions;
  /** Progress for the person waiting, on stderr; the tables go to stdout. */
  log(message: string): void;
  /** Peak runs already measured in this run, by `kind/protocol`, so later suites compare against them. */
  readonly peaks: Map<string, LoadResult[]>;
  /** The best rate seen so far per `kind/protocol`, which sizes the seeded pools of the next runs. */
  readonly estimates: Map<string, number>;
  /** The store engine the runs used, for the machine line. */
  engine?: string;
}

/** A context for the options. */
export function createContext(options: BenchOptions): BenchContext {
  return {
    options,
    log: (message) => process.stderr.write(`[bench] ${message}\n`),
    peaks: new Map(),
    estimates: new Map(),
  };
}

/** A service on a freshly seeded store in a temporary directory. */
export interface SeededService {
  /** The running service; a new one after `restart`. */
  readonly service: ServiceProcess;
  readonly seeded: SeededData;
  readonly dataDir: string;
  /** Starts the service again on the same store (after it died). */
  restart(): Promise<void>;
  /** Stops the service and deletes its directory. */
  dispose(): Promise<void>;
}

/** Seeds a new temporary store with `plan` and starts the service on it. */
export async function startSeededService(
  context: BenchContext,
  plan: SeedPlan,
  env: Record<string, string> = {},
  variant: ServiceVariant = "deployed",
): Promise<SeededService> {
  const dataDir = mkdtempSync(join(tmpdir(), "referrals-bench-"));
  try {
    const seeded = await seedStore(dataDir, plan);
    context.engine ??= seeded.engine;
    let service = await startService(dataDir, env, variant);
    return {
      get service() {
        return service;
      },
      seeded,
      dataDir,
      async restart() {
        await stopService(context, service);
        service = await startService(dataDir, env, variant);
      },
      async dispose() {
        await stopService(context, service);
        rmSync(dataDir, { recursive: true, force: true });
      },
    };
  } catch (error) {
    rmSync(dataDir, { recursive: true, force: true });
    throw error;
  }
}

/** Stops a service and passes on what it complained about, so errors during a run are seen. */
export async function stopService(context: BenchContext, service: ServiceProcess): Promise<void> {
  await service.stop();
  const problems = service.problems();
  if (problems) context.log(`the service reported:\n${problems.slice(0, 2000)}`);
}

/**
 * Whether a process stops living within `ms` (a service that was sent
 * SIGTERM closes its port at once, but drains for seconds before it exits).
 */
export async function diesWithin(alive: () => boolean, ms = 15_000): Promise<boolean> {
  const deadline = performance.now() + ms;
  while (alive()) {
    if (performance.now() >= deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return true;
}

// On a shared machine something may kill the service mid-run (a neighbour's
// `pkill`); a run against a dead service measures nothing.
const attemptsPerRun = 3;

/**
 * Runs `measure` until the service outlives it: when the service died
 * during a run (whether the run then ended or failed: a generator that
 * opens its connections first fails when there is nobody to connect to),
 * `recover` (a restart, or a fresh store) prepares the next attempt; after
 * three attempts the bench gives up. A run that fails while the service
 * lives fails the bench.
 */
export async function measureWhileAlive<T>(
  context: BenchContext,
  what: string,
  alive: () => boolean,
  measure: () => Promise<T>,
  recover: () => Promise<void> = async () => {},
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    let result: T;
    try {
      result = await measure();
    } catch (error) {
      if (!(await diesWithin(alive)) || attempt >= attemptsPerRun) throw error;
      context.log(
        `${what}: the process serving it died during the run (${(error as Error).message}); measuring again`,
      );
      await recover();
      continue;
    }
    if (alive()) return result;
    if (attempt >= attemptsPerRun) {
      throw new Error(`${what}: the process serving it died during ${attempt} runs in a row`);
    }
    context.log(`${what}: the process serving it died during the run; measuring again`);
    await recover();
  }
}
