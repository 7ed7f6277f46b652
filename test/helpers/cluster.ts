import { type ChildProcess, execFile, spawn } from "node:child_process";
import { once } from "node:events";
import { mkdirSync, readdirSync, readFileSync, readlinkSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";
import { findCustomerByExternalId } from "../../src/store/customers.js";
import { openStore } from "../../src/store/store.js";

/** The repository, where a spawned service runs. */
const repoRoot = new URL("../../", import.meta.url).pathname;
const runFile = promisify(execFile);

/** The service run as `npm start` runs it, in child processes: a primary and its workers. */
export interface SpawnedService {
  /** The primary (or, with WORKERS=1, the one process). */
  readonly child: ChildProcess;
  readonly port: number;
  /** Everything it printed so far (stdout and stderr). */
  output(): string;
  /** The workers' process ids now (none with WORKERS=1). */
  workerPids(): number[];
  /** SIGTERM to the primary; resolves with its exit once every process is gone. */
  stop(): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** SIGKILL to the primary alone, as a crash would; resolves once it is reaped. */
  kill(): Promise<void>;
}

/**
 * `npm start`'s entry point: the build, which `builtService` makes first
 * where it is older than its sources. (Through tsx, each process loaded
 * the sources through the compiler again, 1.3 s more CPU per process, and
 * the suite starts hundreds.)
 */
export const serviceEntry = "dist/src/main.js";

let built: Promise<void> | undefined;

/**
 * Resolves once `dist/` is at least as new as its sources: built here if it
 * was not, as `npm start` builds it (`scripts/build-if-stale.mjs`). `npm test`
 * builds before the tests; a file run alone after an edit builds here. Once
 * per test process, one process at a time (a lock directory), so two files
 * never write the build at once.
 */
export function builtService(): Promise<void> {
  built ??= (async () => {
    const lock = join(repoRoot, ".tmp", "build.lock");
    mkdirSync(dirname(lock), { recursive: true });
    const since = Date.now();
    for (;;) {
      try {
        mkdirSync(lock);
        break;
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
        // Left by a process killed while it held it: a build takes seconds.
        if (Date.now() - since > 120_000) rmSync(lock, { recursive: true, force: true });
        await sleep(100);
      }
    }
    try {
      await runFile(process.execPath, ["scripts/build-if-stale.mjs"], { cwd: repoRoot });
    } finally {
      rmSync(lock, { recursive: true, force: true });
    }
  })();
  return built;
}

/**
 * Starts `npm start`'s entry point with `env` on top of the test keys, on
 * a loopback port chosen by the system; resolves once it prints its banner.
 */
export async function spawnService(env: Record<string, string>): Promise<SpawnedService> {
  await builtService();
  const inherited = { ...process.env };
  for (const name of ["MONGODB_URI", "MONGODB_DB", "PORT", "HOST", "WORKERS"]) {
    delete inherited[name];
  }
  const child = spawn(process.execPath, [serviceEntry], {
    cwd: repoRoot,
    env: { ...inherited, PORT: "0", HOST: "127.0.0.1", LOG_LEVEL: "warn", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout?.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  child.stderr?.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  const exited = once(child, "exit") as Promise<[number | null, NodeJS.Signals | null]>;
  return new Promise((resolve, reject) => {
    const onData = () => {
      const match = /listening on 127\.0\.0\.1:(\d+)/.exec(output);
      if (!match) return;
      child.stdout?.off("data", onData);
      const service: SpawnedService = {
        child,
        port: Number(match[1]),
        output: () => output,
        workerPids: () => workerPidsOf(child.pid ?? 0),
        async stop() {
          const workers = service.workerPids();
          if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
          const [code, signal] = await exited;
          await waitGone(workers);
          return { code, signal };
        },
        async kill() {
          if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
          await exited;
        },
      };
      resolve(service);
    };
    child.stdout?.on("data", onData);
    void exited.then(([code]) =>
      reject(new Error(`the service exited (${code}) before it listened: ${output}`)),
    );
  });
}

/**
 * The workers of a cluster's primary: its children running the same
 * program (node). Another program it runs (under tsx, esbuild's service)
 * is not one; nor is a worker that exited and is not reaped yet.
 */
export function workerPidsOf(pid: number): number[] {
  const program = programOf(pid);
  return childPids(pid).filter((child) => programOf(child) === program);
}

/** The executable a process runs; undefined once it has exited. */
function programOf(pid: number): string | undefined {
  try {
    return readlinkSync(`/proc/${pid}/exe`);
  } catch {
    return undefined;
  }
}

/** The direct children of a process, from /proc. */
export function childPids(pid: number): number[] {
  const children: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      // The parent is the 4th field, after the command in parentheses.
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const parent = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (parent === pid) children.push(Number(entry));
    } catch {
      // Gone between the listing and the read.
    }
  }
  return children;
}

/** Resolves once none of `pids` runs any more (at most 20 s). */
export async function waitGone(pids: readonly number[]): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (pids.some(isRunning)) {
    if (Date.now() > deadline) throw new Error(`processes ${pids.join(", ")} did not exit`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Whether a process runs (or is a zombie not reaped yet). */
export function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Of `externalUserIds`, those with no customer in the demo application's
 * production environment, read from `dataDir`'s store once the service that
 * wrote it is gone: what a crash or a drain must not have lost.
 */
export async function customersMissing(
  dataDir: string,
  externalUserIds: readonly string[],
): Promise<string[]> {
  const store = await openStore({ dataDir });
  try {
    const [application] = await store.system.applications.find({}).toArray();
    const tenant = { organizationId: "", applicationId: application?._id ?? "" };
    const missing: string[] = [];
    for (const externalUserId of externalUserIds) {
      const found = await findCustomerByExternalId(
        store.system,
        tenant,
        "production",
        externalUserId,
      );
      if (!found) missing.push(externalUserId);
    }
    return missing;
  } finally {
    await store.close();
  }
}
