import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { LoadResult } from "./measure.js";
import type { BenchOptions } from "./options.js";
import { type ServiceProcess, startService } from "./processes.js";
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
  readonly service: ServiceProcess;
  readonly seeded: SeededData;
  readonly dataDir: string;
  /** Stops the service and deletes its directory. */
  dispose(): Promise<void>;
}

/** Seeds a new temporary store with `plan` and starts the service on it. */
export async function startSeededService(
  context: BenchContext,
  plan: SeedPlan,
  env: Record<string, string> = {},
): Promise<SeededService> {
  const dataDir = mkdtempSync(join(tmpdir(), "referrals-bench-"));
  try {
    const seeded = await seedStore(dataDir, plan);
    context.engine ??= seeded.engine;
    const service = await startService(dataDir, env);
    return {
      service,
      seeded,
      dataDir,
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
