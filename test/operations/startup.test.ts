import { spawn } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import test from "ava";
import { eventually } from "../helpers/wait.js";
import { isRefused, repoRoot, runService, serviceEnv } from "./service.js";

/**
 * A start that fails for the operator's reason says which in one line, on
 * stderr, with exit code 1 and no stack trace, and never loses the demo
 * keys; `npm start` runs the compiled service, which SIGTERM stops. Each
 * test spawns the real process.
 */

const dirs: string[] = [];
function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "referrals-startup-"));
  dirs.push(dir);
  return dir;
}
/** Process groups of `npm start`, killed whatever the test's outcome. */
const groups: number[] = [];
test.after.always(() => {
  for (const group of groups) {
    try {
      process.kill(-group, "SIGKILL");
    } catch {}
  }
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** The one line a failed start prints, with nothing else on either stream. */
function oneLine(
  t: { is(a: unknown, b: unknown, m?: string): void },
  exited: { code: number | null; stdout: string; stderr: string },
) {
  t.is(exited.code, 1, "exit code");
  t.is(exited.stdout, "", "nothing on stdout");
  t.is(exited.stderr.split("\n").length, 2, `one line on stderr: ${exited.stderr}`);
}

test("the port in use: one line naming PORT, and no demo keys created until a start succeeds", async (t) => {
  const taken = createServer();
  await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
  const address = taken.address();
  const port = typeof address === "object" && address ? address.port : 0;
  const dataDir = tempDir();
  try {
    const failed = await runService({ PORT: String(port), HOST: "127.0.0.1", DATA_DIR: dataDir });
    oneLine(t, failed);
    t.is(
      failed.stderr,
      `referral-service: PORT ${port} is already in use on 127.0.0.1: stop the other process or set PORT\n`,
    );
  } finally {
    await new Promise((resolve) => taken.close(resolve));
  }
  const next = await runService({ PORT: "0", HOST: "127.0.0.1", DATA_DIR: dataDir });
  t.regex(next.stdout, /First start: provisioned/);
  t.regex(next.stdout, /secret key: sk_[\w-]{43}\n/);
  t.regex(next.stdout, /public key: pk_[\w-]{43}\n/);
  t.regex(next.stdout, /live: http:\/\/127\.0\.0\.1:\d+\/dashboard \(paste a secret key\)/);
  // A later start shows no key, and says how to make another.
  const later = await runService({ PORT: "0", HOST: "127.0.0.1", DATA_DIR: dataDir });
  t.notRegex(later.stdout, /sk_[\w-]{43}/);
  t.regex(later.stdout, /the API keys were printed on the first start\. To make another:/);
  t.regex(later.stdout, /npm run admin -- create-key <applicationId> secret/);
});

test("demo keys given by the environment are named, not printed", async (t) => {
  const secret = `sk_${"s".repeat(43)}`;
  const given = `pk_${"p".repeat(43)}`;
  const started = await runService({
    PORT: "0",
    HOST: "127.0.0.1",
    DATA_DIR: tempDir(),
    BOOTSTRAP_SECRET_KEY: secret,
    BOOTSTRAP_PUBLIC_KEY: given,
    // DEVELOPMENT prints only what `npm run dev` made itself, never what was given.
    DEVELOPMENT: "true",
    ADMIN_TOKEN: "an-operator-token",
  });
  t.false(started.stdout.includes("an-operator-token"), "no admin token printed");
  t.regex(started.stdout, /First start: provisioned/);
  t.regex(started.stdout, /secret key: the value of BOOTSTRAP_SECRET_KEY\n/);
  t.regex(started.stdout, /-H "Authorization: \$BOOTSTRAP_PUBLIC_KEY"/);
  t.false(started.stdout.includes(secret) || started.stdout.includes(given), "no key printed");
});

test("an invalid LOG_LEVEL: one line naming it", async (t) => {
  const exited = await runService({ LOG_LEVEL: "loud", DATA_DIR: tempDir() });
  oneLine(t, exited);
  t.is(
    exited.stderr,
    'referral-service: LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent, got "loud"\n',
  );
});

test("a MONGODB_URI that is not a connection string: one line naming it, no password", async (t) => {
  for (const [uri, why] of [
    ["garbage", "Invalid scheme"],
    ["mongodb://admin:hunter2@", "host"],
    ["mongodb://db.example/?bogusOption=1", "bogusoption is not supported"],
    ["mongodb://admin:hunter2@db.example:99999/", "Unable to parse"],
  ]) {
    const exited = await runService({
      MONGODB_URI: uri as string,
      WEBHOOK_SECRET_KEY: Buffer.alloc(32, 7).toString("base64"),
      PORT: "0",
    });
    oneLine(t, exited);
    t.regex(exited.stderr, /^referral-service: MONGODB_URI is not a MongoDB connection string: /);
    t.true(exited.stderr.includes(why as string), exited.stderr);
    t.false(exited.stderr.includes("hunter2"), "the password is not printed");
  }
});

test("a DATA_DIR that is not writable: one line naming it", async (t) => {
  const dataDir = join(tempDir(), "read-only");
  mkdirSync(dataDir, { mode: 0o555 });
  chmodSync(dataDir, 0o555);
  // Root writes anywhere: run the service as nobody then, which needs the
  // repository and the Node binary reachable by others (CI's Node may live
  // under /root); else a path below a file stands in.
  const root = process.getuid?.() === 0;
  const nobodyCanRun =
    searchableByOthers(join(repoRoot, "node_modules")) && searchableByOthers(process.execPath);
  if (root && !nobodyCanRun) {
    const belowFile = join(tempDir(), "file", "data");
    writeFileSync(dirname(belowFile), "");
    const exited = await runService({ DATA_DIR: belowFile, PORT: "0" });
    oneLine(t, exited);
    t.regex(exited.stderr, new RegExp(`^referral-service: DATA_DIR ${belowFile} is not writable`));
    return;
  }
  const exited = await runService(
    { DATA_DIR: dataDir, PORT: "0" },
    root ? { uid: 65534, gid: 65534 } : {},
  );
  oneLine(t, exited);
  t.regex(
    exited.stderr,
    new RegExp(`^referral-service: DATA_DIR ${dataDir} is not writable \\(EACCES: [^\\n]*\\)\\n$`),
  );
});

/** Whether users other than the owner can reach and read `path`. */
function searchableByOthers(path: string): boolean {
  if ((statSync(path).mode & 0o005) !== 0o005) return false;
  for (let dir = dirname(path); dir !== dirname(dir); dir = dirname(dir)) {
    if ((statSync(dir).mode & 0o001) === 0) return false;
  }
  return true;
}

test("a DATA_DIR another live process holds: one line naming it", async (t) => {
  const dataDir = tempDir();
  // This test process plays the running service.
  writeFileSync(join(dataDir, "LOCK"), String(process.pid));
  const exited = await runService({ DATA_DIR: dataDir, PORT: "0" });
  oneLine(t, exited);
  t.regex(
    exited.stderr,
    new RegExp(`^referral-service: ${dataDir} is in use by process ${process.pid}`),
  );
});

test("npm start runs the compiled service, and SIGTERM to npm stops it", async (t) => {
  const child = spawn("npm", ["start"], {
    cwd: repoRoot,
    env: serviceEnv({ PORT: "0", HOST: "127.0.0.1", DATA_DIR: tempDir() }),
    // Its own process group, so the test can see that no process of it is left.
    detached: true,
  });
  const group = child.pid as number;
  groups.push(group);
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => {
    stdout += chunk;
  });
  child.stderr.on("data", (chunk: Buffer) => {
    stderr += chunk;
  });
  // 'exit', not 'close': a service left behind would hold npm's stdout open.
  const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
  try {
    // The build runs first (prestart): up to half a minute on a busy machine.
    const port = await eventually(
      "npm start to listen",
      () => {
        const match = /listening on 127\.0\.0\.1:(\d+)/.exec(stdout);
        if (match) return Number(match[1]);
        if (child.exitCode !== null) throw new Error(`npm start exited:\n${stdout}\n${stderr}`);
        return undefined;
      },
      { timeoutMs: 45_000 },
    );
    t.regex(stdout, /exec node (--\S+ )*dist\/src\/main\.js/, "the compiled entry");
    t.is((await fetch(`http://127.0.0.1:${port}/healthz`)).status, 200);

    process.kill(group, "SIGTERM");
    t.is(await exited, 0);
    t.true(await isRefused(port), "the port is closed");
    t.throws(() => process.kill(-group, 0), { code: "ESRCH" }, "no process of npm start is left");
  } finally {
    try {
      process.kill(-group, "SIGKILL");
    } catch {}
  }
});

test("a restart loads the compiled code the start before it kept, in the primary and every worker", async (t) => {
  t.timeout(90_000);
  const dataDir = tempDir();
  /** Starts the compiled entry with two workers; its stderr once it served and stopped. */
  const startAndStop = async (env: Record<string, string>) => {
    const child = spawn(process.execPath, ["dist/src/main.js"], {
      cwd: repoRoot,
      env: serviceEnv({ PORT: "0", HOST: "127.0.0.1", DATA_DIR: dataDir, WORKERS: "2", ...env }),
      detached: true,
    });
    groups.push(child.pid as number);
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk;
      if (/listening on/.test(stdout)) child.kill("SIGTERM");
    });
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk;
    });
    const code = await new Promise<number | null>((resolve) => child.once("close", resolve));
    t.is(code, 0, `the start served and stopped: ${stdout}\n${stderr.slice(-2000)}`);
    return stderr;
  };
  // Node's compile cache under its debug switch: what it reads, and from where.
  const debug = { NODE_DEBUG_NATIVE: "COMPILE_CACHE" };
  await startAndStop(debug);
  const restart = await startAndStop(debug);
  const directory = `${repoRoot}node_modules/.cache/referral-service/compiled`;
  t.true(restart.includes(`resolved path ${directory} `), "kept beside the dependencies");
  const loaded = restart.match(/V8 code cache for ESM \S+\/dist\/src\/serve\.js was accepted/g);
  t.is(loaded?.length, 3, "the primary's and both workers' compiled code came from the cache");
  t.notRegex(restart, /dist\/src\/serve\.js was (rejected|not initialized)/);
});

test("SIGTERM at any moment of a start stops it cleanly, never with an error of its own", async (t) => {
  t.timeout(120_000);
  // From before the handlers exist to after the workers serve: the compiled
  // entry, as `npm start` runs it, with a worker per core.
  for (const delayMs of [150, 400, 700, 1_000, 1_300, 1_700, 2_500]) {
    const child = spawn(process.execPath, ["dist/src/main.js"], {
      cwd: repoRoot,
      env: serviceEnv({ PORT: "0", HOST: "127.0.0.1", DATA_DIR: tempDir(), WORKERS: "2" }),
      detached: true,
    });
    groups.push(child.pid as number);
    let stderr = "";
    child.stderr?.on("data", (chunk: Buffer) => {
      stderr += chunk;
    });
    child.stdout?.resume();
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      child.once("close", (code, signal) => resolve({ code, signal })),
    );
    await new Promise((resolve) => setTimeout(resolve, delayMs));
    child.kill("SIGTERM");
    const { code, signal } = await exited;
    t.false(/Error/.test(stderr), `SIGTERM ${delayMs} ms after the start: ${stderr}`);
    t.true(code === 0 || signal === "SIGTERM", `${delayMs} ms: exit ${code} ${signal}`);
  }
});
