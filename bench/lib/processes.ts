import { type ChildProcess, fork, spawn, spawnSync } from "node:child_process";
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join, resolve } from "node:path";
import { metricSum, scrapeMetrics } from "./metrics.js";
import { profileClockMicros, summarizeProfiles } from "./profiles.js";

/** The repository root (bench/lib/ is two levels down). */
export const repoRoot = resolve(import.meta.dirname, "../..");

/** A port that was free a moment ago on loopback. */
export function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      server.close(() => resolvePort(port));
    });
  });
}

/** A running service process. */
export interface ServiceProcess {
  readonly origin: string;
  readonly pid: number;
  /** From spawning the process to `/readyz` answering 200. */
  readonly readyMs: number;
  /** Resident memory now, in bytes (of the first process only, not a cluster's workers). */
  rssBytes(): number;
  /**
   * CPU time the process and its live child processes (a cluster's workers)
   * have used so far (user and system), in seconds.
   */
  cpuSeconds(): number;
  /** What the service wrote to stderr, and the error lines of its log, most recent last. */
  problems(): string;
  /** False once the process has exited (on a shared machine, something may kill it). */
  alive(): boolean;
  /** SIGTERM, then waits for the exit (SIGKILL after 30 s). */
  stop(): Promise<void>;
}

/**
 * Which service: `npm start`'s (`deployed`), or the same compiled service
 * built without its operations steps (request log, metrics, rate limits,
 * idempotency keys), without its program counters, or committing each
 * write of the embedded store alone instead of in groups
 * (`bench/service-variant.ts`), to measure what those cost or save.
 */
export type ServiceVariant =
  | "deployed"
  | "without-operations"
  | "without-stats"
  | "per-write-commit";

// Seeding 1M customers then starting on them takes minutes, not seconds.
const readyTimeoutMs = 15 * 60_000;

let built = false;

/** Compiles the service as `npm start` does (`npm run build`), once per bench run. */
function buildOnce(): void {
  if (built) return;
  const result = spawnSync("npm", ["run", "build"], { cwd: repoRoot, stdio: "inherit" });
  if (result.status !== 0) throw new Error("npm run build failed");
  built = true;
}

/** The Node flags of `npm start` (`exec node <flags> dist/src/main.js`), so the bench runs what it runs. */
function startNodeFlags(): string[] {
  const manifest = JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")) as {
    scripts: { start: string };
  };
  const command = /^exec node (.*?)\s*dist\/src\/main\.js$/.exec(manifest.scripts.start);
  if (!command)
    throw new Error(`npm start is not "exec node … dist/src/main.js": ${manifest.scripts.start}`);
  return command[1]?.split(/\s+/).filter(Boolean) ?? [];
}

/**
 * Starts the real entry (`dist/src/main.js`, compiled, as `npm start` runs it) in
 * its own process, so the load generator never shares its event loop, and
 * waits until `/readyz` answers 200.
 */
export async function startService(
  dataDir: string,
  env: Record<string, string> = {},
  variant: ServiceVariant = "deployed",
): Promise<ServiceProcess> {
  const entry =
    variant === "deployed"
      ? ["dist/src/main.js"]
      : ["--import", "tsx", "bench/service-variant.ts", variant];
  const port = await freePort();
  const [service] = await spawnService(entry, [port], { ...env, DATA_DIR: dataDir });
  return service as ServiceProcess;
}

/** CPU the calibration service burns in each call before its response, in µs. */
export const calibrationMicros = 4;

/** The shared process's services: both variants, and the calibration service. */
export type SharedServices = Record<OperationsVariant | "calibration", ServiceProcess>;

/** The variants the operations suite compares in one process. */
export type OperationsVariant = Exclude<ServiceVariant, "without-stats" | "per-write-commit">;

/**
 * Both variants in one process (`bench/service-with-and-without-operations.ts`),
 * and the one without operations again with a step that burns
 * `calibrationMicros` of CPU before each call goes on, each on its own port
 * and store: one process, so one speed for all three (two processes of one
 * build differ by up to a third in CPU per call). Each view has its own origin; they
 * share the process, its CPU time and its stop.
 */
export async function startSharedServices(
  dataDirs: Record<keyof SharedServices, string>,
): Promise<SharedServices> {
  const ports = [await freePort(), await freePort(), await freePort()];
  const [deployed, without, calibration] = await spawnService(
    ["--import", "tsx", "bench/service-with-and-without-operations.ts"],
    ports,
    {
      DATA_DIR: dataDirs.deployed,
      DATA_DIR_WITHOUT_OPERATIONS: dataDirs["without-operations"],
      PORT_WITHOUT_OPERATIONS: String(ports[1]),
      DATA_DIR_CALIBRATION: dataDirs.calibration,
      PORT_CALIBRATION: String(ports[2]),
      CALIBRATION_MICROS: String(calibrationMicros),
    },
  );
  return {
    deployed: deployed as ServiceProcess,
    "without-operations": without as ServiceProcess,
    calibration: calibration as ServiceProcess,
  };
}

let profileRoot: string | undefined;
let profiledServices = 0;

/**
 * Makes every service started from now on write V8 CPU profiles
 * (`--cpu-prof`, each of a cluster's processes and threads its own) into a
 * directory of its own under `root`, summarized per call answered once it
 * stops (`--profile`).
 */
export function profileServicesInto(root: string): void {
  profileRoot = resolve(repoRoot, root);
}

/**
 * Spawns a service entry with `npm start`'s Node flags, serving on `ports`
 * (the first is `PORT`), and waits until every port's `/readyz` answers
 * 200: one view of the process per port.
 */
async function spawnService(
  entry: readonly string[],
  ports: readonly number[],
  env: Record<string, string>,
): Promise<ServiceProcess[]> {
  buildOnce();
  const profileDir = profileRoot && join(profileRoot, String(++profiledServices).padStart(3, "0"));
  if (profileDir) mkdirSync(profileDir, { recursive: true });
  const profileFlags = profileDir ? ["--cpu-prof", `--cpu-prof-dir=${profileDir}`] : [];
  // A profile is read per call answered, which the service's metrics count.
  const metricsToken = env.METRICS_TOKEN ?? "bench-profile-metrics";
  const started = performance.now();
  const child = spawn(process.execPath, [...startNodeFlags(), ...profileFlags, ...entry], {
    cwd: repoRoot,
    env: {
      ...process.env,
      PORT: String(ports[0]),
      HOST: "127.0.0.1",
      LOG_LEVEL: "warn",
      // One key drives tens of thousands of calls a second: limits that never
      // refuse it, yet are counted, so the runs include the limiter's cost.
      RATE_LIMIT_PUBLIC: "100000000/1s",
      RATE_LIMIT_SECRET: "100000000/1s",
      // One process unless the suite says otherwise (the cluster suite does):
      // the other suites compare one process's costs with bare ceilings.
      WORKERS: "1",
      ...(profileDir ? { METRICS_TOKEN: metricsToken } : {}),
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const errors: string[] = [];
  const keep = (text: string) => {
    errors.push(text);
    if (errors.length > 50) errors.shift();
  };
  child.stderr?.on("data", (chunk: Buffer) => keep(chunk.toString()));
  // The log (pino, on stdout) is JSON lines; keep those at error level and above.
  child.stdout?.on("data", (chunk: Buffer) => {
    for (const line of chunk.toString().split("\n")) {
      if (/"level":(50|60)/.test(line)) keep(`${line}\n`);
    }
  });
  const exited = exitOf(child);
  let stopping = false;
  // A service that dies mid-run (or is killed from outside) turns every
  // later request into a failure; say so rather than leave only the count.
  child.once("exit", (code, signal) => {
    if (!stopping) keep(`the service exited during the run (${signal ?? `code ${code}`})\n`);
  });
  const origins = ports.map((port) => `http://127.0.0.1:${port}`);
  for (const origin of origins) {
    await waitUntilReady(origin, exited, readyTimeoutMs, () => errors.join(""));
  }
  const readyMs = performance.now() - started;
  // What a start costs (compiling, loading, a first start's provisioning) is not a call's cost.
  const profileFrom = profileClockMicros();
  let reported = false;
  return origins.map((origin) => ({
    origin,
    pid: child.pid as number,
    readyMs,
    rssBytes: () => rssOf(child.pid as number),
    cpuSeconds: () => treeCpuSecondsOf(child.pid as number),
    // Told once, whichever view of the process asks first.
    problems: () => {
      if (reported) return "";
      reported = true;
      return errors.join("");
    },
    alive: () => child.exitCode === null && child.signalCode === null,
    stop: async () => {
      if (stopping) return exited.then(() => undefined);
      stopping = true;
      // Every call it answered, all after its start (0 if it cannot tell).
      const metrics = profileDir && (await scrapeMetrics(origins[0] as string, metricsToken));
      const calls = metrics ? metricSum(metrics, "rpc_calls_total") : 0;
      await stopChild(child, exited);
      if (profileDir) {
        process.stderr.write(`[bench] profiled service ${child.pid}:\n`);
        process.stderr.write(
          summarizeProfiles(profileDir, repoRoot, calls, { rows: 12, fromMicros: profileFrom }),
        );
      }
    },
  }));
}

async function waitUntilReady(
  origin: string,
  exited: Promise<number | null>,
  timeoutMs: number,
  stderr: () => string,
): Promise<void> {
  let gone = false;
  void exited.then(() => {
    gone = true;
  });
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    if (gone) throw new Error(`the service exited before it was ready:\n${stderr()}`);
    try {
      const response = await fetch(`${origin}/readyz`);
      await response.arrayBuffer();
      if (response.status === 200) return;
    } catch {}
    await new Promise((resolveWait) => setTimeout(resolveWait, 20));
  }
  throw new Error(`the service was not ready within ${timeoutMs} ms:\n${stderr()}`);
}

/** A TypeScript entry of the bench in its own Node process, with an IPC channel. */
export function forkBenchProcess(entry: string, env: Record<string, string> = {}): ChildProcess {
  return fork(join(repoRoot, entry), [], {
    cwd: repoRoot,
    execArgv: ["--import", "tsx"],
    env: { ...process.env, ...env },
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
}

/** The first IPC message of a child, or a rejection when it exits first. */
export function firstMessage<T>(child: ChildProcess): Promise<T> {
  return new Promise((resolveMessage, reject) => {
    const onExit = (code: number | null) => reject(new Error(`bench process exited with ${code}`));
    child.once("exit", onExit);
    child.once("message", (message) => {
      child.off("exit", onExit);
      resolveMessage(message as T);
    });
  });
}

function exitOf(child: ChildProcess): Promise<number | null> {
  return new Promise((resolveExit) => child.once("exit", (code) => resolveExit(code)));
}

/** Terminates a child the bench started, and waits for it. */
export async function stopChild(
  child: ChildProcess,
  exited: Promise<unknown> = exitOf(child),
): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
  await exited;
  clearTimeout(timer);
}

/** Resident set size of a process from /proc (Linux); 0 where that does not exist. */
export function rssOf(pid: number): number {
  try {
    const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return match ? Number(match[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

/**
 * The peak resident set size of a process (`VmHWM`, Linux) since it started
 * or since {@link resetPeakRss}; 0 where that does not exist.
 */
export function peakRssOf(pid: number): number {
  try {
    const match = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return match ? Number(match[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

/**
 * Starts a process's peak resident set size again from its current one
 * (writes 5 to `/proc/<pid>/clear_refs`, Linux 4.0 and later), so
 * {@link peakRssOf} then reads the peak of what follows; false where that
 * is not allowed or does not exist.
 */
export function resetPeakRss(pid: number): boolean {
  try {
    writeFileSync(`/proc/${pid}/clear_refs`, "5");
    return true;
  } catch {
    return false;
  }
}

// Linux reports CPU times in clock ticks of 1/100 s (USER_HZ) on every common architecture.
const ticksPerSecond = 100;

/** User and system CPU time of a process from /proc (Linux); 0 where that does not exist. */
export function cpuSecondsOf(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the command name (which may hold spaces), from the state on: utime is the 12th, stime the 13th.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) / ticksPerSecond;
  } catch {
    return 0;
  }
}

/**
 * CPU time of a process and of its live descendants (a cluster primary's
 * workers), in seconds; children that exited are left out.
 */
export function treeCpuSecondsOf(pid: number): number {
  return (
    cpuSecondsOf(pid) + childPidsOf(pid).reduce((sum, child) => sum + treeCpuSecondsOf(child), 0)
  );
}

/**
 * Time the threads of a process and of its live descendants have spent
 * runnable but waiting for a core (the run queue's delay, the second field
 * of `/proc/<pid>/task/<tid>/schedstat`), in seconds; undefined where the
 * kernel does not keep it. Over a run, what the machine's cores being busy
 * added to the service's latency, hop by hop.
 */
export function treeRunQueueWaitSecondsOf(pid: number): number | undefined {
  let waited: number | undefined;
  for (const process of [pid, ...descendantsOf(pid)]) {
    try {
      for (const task of readdirSync(`/proc/${process}/task`)) {
        const fields = readFileSync(`/proc/${process}/task/${task}/schedstat`, "utf8").split(" ");
        waited = (waited ?? 0) + Number(fields[1]) / 1e9;
      }
    } catch {}
  }
  return waited;
}

function descendantsOf(pid: number): number[] {
  return childPidsOf(pid).flatMap((child) => [child, ...descendantsOf(child)]);
}

/** The live child processes of a process (Linux 3.5 and later); none where that does not exist. */
function childPidsOf(pid: number): number[] {
  const pids: number[] = [];
  try {
    for (const task of readdirSync(`/proc/${pid}/task`)) {
      const listed = readFileSync(`/proc/${pid}/task/${task}/children`, "utf8").trim();
      if (listed !== "") pids.push(...listed.split(/\s+/).map(Number));
    }
  } catch {}
  return pids;
}

/**
 * CPU time the bench itself has used so far: this process (every thread:
 * autocannon, the HTTP/2 clients) and its children that have exited and
 * been waited for (h2load, after each run), in seconds. Over a load run,
 * its difference is what the load generator used.
 */
export function generatorCpuSeconds(): number {
  const own = process.cpuUsage();
  let children = 0;
  try {
    const stat = readFileSync("/proc/self/stat", "utf8");
    // cutime and cstime are the 14th and 15th fields after the command name.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    children = (Number(fields[13]) + Number(fields[14])) / ticksPerSecond;
  } catch {}
  return (own.user + own.system) / 1e6 + children;
}

/**
 * CPU time every core of the machine has been busy so far (`/proc/stat`:
 * all but idle and I/O wait), in seconds; 0 where that does not exist.
 * Over a run, its difference less the service's and the generator's is
 * what the rest of the machine used (interrupts and loopback networking
 * included).
 */
export function machineBusySeconds(): number {
  try {
    const line = readFileSync("/proc/stat", "utf8").split("\n", 1)[0] ?? "";
    // cpu user nice system idle iowait irq softirq steal (guest time is in user).
    const [user, nice, system, , , irq, softirq, steal] = line
      .trim()
      .split(/\s+/)
      .slice(1)
      .map(Number);
    return (
      ((user ?? 0) + (nice ?? 0) + (system ?? 0) + (irq ?? 0) + (softirq ?? 0) + (steal ?? 0)) /
      ticksPerSecond
    );
  } catch {
    return 0;
  }
}

/** Bytes of every file under a directory. */
export function diskBytes(directory: string): number {
  let total = 0;
  for (const entry of readdirSync(directory, { withFileTypes: true })) {
    const path = join(directory, entry.name);
    total += entry.isDirectory() ? diskBytes(path) : statSync(path).size;
  }
  return total;
}
