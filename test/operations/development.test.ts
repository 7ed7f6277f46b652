import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import { runAdminCli } from "../../src/cli/admin.js";
import { runListen } from "../../src/cli/listen.js";
import { savedDevelopmentSecrets } from "../../src/development.js";
import { repoRoot, runService, serviceEnv } from "./service.js";

/**
 * `npm run dev` (src/dev.ts): the same development keys and admin token
 * printed at every start, and working; the admin API on, webhooks to
 * loopback taken for production too, pretty logs; the admin CLI beside it
 * needs no token; data from `npm start` is refused rather than printing
 * keys that do not work there. Each start spawns the real entry.
 */

const dirs: string[] = [];
const children: ChildProcess[] = [];
test.after.always(() => {
  for (const child of children) child.kill("SIGKILL");
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "referrals-dev-"));
  dirs.push(dir);
  return dir;
}

interface DevStart {
  readonly origin: string;
  readonly secretKey: string;
  readonly publicKey: string;
  readonly adminToken: string;
  readonly banner: string;
  /** What it printed after the banner (its logs). */
  readonly logs: () => string;
  stop(): Promise<number | null>;
}

/**
 * Starts the compiled entry as `npm run dev` does (`npm test` builds before
 * the tests, as the docs examples need too) and reads its banner.
 */
async function startDev(dataDir: string): Promise<DevStart> {
  const child = spawn(process.execPath, ["dist/src/dev.js"], {
    cwd: repoRoot,
    // WORKERS=1: one process shows the start and is quicker; the docs test
    // runs npm run dev on the default configuration (a worker per core).
    env: serviceEnv({
      DATA_DIR: dataDir,
      PORT: "0",
      HOST: "127.0.0.1",
      WORKERS: "1",
      LOG_LEVEL: "info",
    }),
  });
  children.push(child);
  let stdout = "";
  let stderr = "";
  child.stdout?.on("data", (chunk: Buffer) => {
    stdout += chunk;
  });
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr += chunk;
  });
  const exited = new Promise<number | null>((resolve) => child.once("close", resolve));
  // Generous: on two busy cores a start shares the machine with other suites.
  const deadline = Date.now() + 90_000;
  while (!/live: http/.test(stdout)) {
    if (child.exitCode !== null || Date.now() > deadline) {
      throw new Error(`npm run dev did not start:\n${stdout}\n${stderr}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const banner = stdout;
  const field = (name: string) => new RegExp(`${name}:\\s+(\\S+)`).exec(banner)?.[1] ?? "";
  return {
    origin: /listening on (\S+) /.exec(banner)?.[1]?.replace(/^/, "http://") ?? "",
    secretKey: field("secret key"),
    publicKey: field("public key"),
    adminToken: field("admin token"),
    banner,
    logs: () => stdout.slice(banner.length),
    stop: () => {
      child.kill("SIGTERM");
      return exited;
    },
  };
}

test("the same development keys and admin token at every start, and they work", async (t) => {
  t.timeout(240_000);
  const dataDir = tempDir();
  const first = await startDev(dataDir);
  t.regex(first.banner, /Development start \(npm run dev\)/);
  t.regex(first.secretKey, /^sk_[\w-]{43}$/);
  t.regex(first.publicKey, /^pk_[\w-]{43}$/);
  t.regex(first.adminToken, /^adm_[\w-]{43}$/);
  t.true(first.banner.includes(`export SK=${first.secretKey} PK=${first.publicKey}`));
  t.is(statSync(join(dataDir, "development.json")).mode & 0o777, 0o600, "owner-only");

  const campaigns = await fetch(`${first.origin}/campaigns`, {
    headers: { authorization: first.publicKey },
  });
  t.is(campaigns.status, 200);
  // The admin API is on, with the printed token.
  const apps = await fetch(`${first.origin}/admin/applications`, {
    headers: { authorization: `Bearer ${first.adminToken}` },
  });
  t.is(apps.status, 200);
  // Webhooks may go to this machine, production's events too (npm run admin -- listen).
  const webhook = await fetch(`${first.origin}/webhooks`, {
    method: "POST",
    headers: { authorization: first.secretKey, "content-type": "application/json" },
    body: JSON.stringify({ url: "http://127.0.0.1:9/hooks", environment: "production" }),
  });
  t.is(webhook.status, 201, await webhook.clone().text());
  // Pretty logs: a line a person reads, not JSON.
  await new Promise((resolve) => setTimeout(resolve, 200));
  t.regex(first.logs(), /INFO: call/);
  t.false(first.logs().trimStart().startsWith("{"), "not JSON lines");

  // The admin CLI beside it finds the token itself.
  const lines: string[] = [];
  const previous = process.env.DATA_DIR;
  process.env.DATA_DIR = dataDir;
  try {
    const code = await runAdminCli(["list-apps", "--url", first.origin], (text) =>
      lines.push(text),
    );
    t.is(code, 0, lines.join("\n"));
    t.regex(lines.join("\n"), /Demo App/);
    // And listen its secret key, with no SK set.
    const previousSk = process.env.SK;
    delete process.env.SK;
    const heard: string[] = [];
    const stop = new AbortController();
    const listening = runListen(["--url", first.origin], (text) => heard.push(text), stop.signal);
    try {
      const deadline = Date.now() + 30_000;
      while (!heard.some((text) => text.startsWith("Ready"))) {
        if (Date.now() > deadline) throw new Error(`listen did not start: ${heard.join("\n")}`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    } finally {
      stop.abort();
      t.is(await listening, 0, heard.join("\n"));
      if (previousSk !== undefined) process.env.SK = previousSk;
    }
  } finally {
    if (previous === undefined) delete process.env.DATA_DIR;
    else process.env.DATA_DIR = previous;
  }
  t.is(await first.stop(), 0);

  const again = await startDev(dataDir);
  t.is(again.secretKey, first.secretKey, "the same keys at every start");
  t.is(again.publicKey, first.publicKey);
  t.is(again.adminToken, first.adminToken);
  const read = await fetch(`${again.origin}/customers`, {
    headers: { authorization: again.secretKey },
  });
  t.is(read.status, 200);
  t.is(await again.stop(), 0);
});

test("data from npm start is refused in one line, not started with keys that do not work", async (t) => {
  t.timeout(180_000);
  const dataDir = tempDir();
  const started = await runService({ PORT: "0", HOST: "127.0.0.1", DATA_DIR: dataDir });
  t.regex(started.stdout, /First start: provisioned/);
  const { code, stderr } = await refusedDevStart(dataDir);
  t.is(code, 1);
  t.is(
    stderr,
    `referral-service: ${dataDir} holds data from \`npm start\`, whose keys were printed then; ` +
      "`npm run dev` keeps its own data in ./data-dev (or set DATA_DIR to a new directory)\n",
  );
});

test("a damaged development.json is refused in one line naming it", async (t) => {
  t.timeout(120_000);
  const dataDir = tempDir();
  writeFileSync(join(dataDir, "development.json"), '{"secretKey":"sk_x"}');
  const { code, stderr } = await refusedDevStart(dataDir);
  t.is(code, 1);
  t.is(stderr.split("\n").length, 2, stderr);
  t.regex(stderr, /development\.json is not the development keys `npm run dev` wrote/);
});

test("the saved development secrets are read for a service on this machine only", (t) => {
  const dataDir = tempDir();
  writeFileSync(
    join(dataDir, "development.json"),
    JSON.stringify({
      secretKey: `sk_${"s".repeat(43)}`,
      publicKey: `pk_${"p".repeat(43)}`,
      adminToken: `adm_${"a".repeat(43)}`,
    }),
  );
  const env = { DATA_DIR: dataDir };
  for (const url of ["http://localhost:8080", "http://127.0.0.1:1", "http://[::1]:8080"]) {
    t.is(savedDevelopmentSecrets(url, env)?.adminToken, `adm_${"a".repeat(43)}`, url);
  }
  for (const url of [
    "https://referrals.example.com",
    "http://10.0.0.5:8080",
    "http://localhost.evil.example",
  ]) {
    t.is(savedDevelopmentSecrets(url, env), undefined, url);
  }
});

/** A development start expected to stop at once: its exit code and what it said. */
async function refusedDevStart(dataDir: string): Promise<{ code: unknown; stderr: string }> {
  const child = spawn(process.execPath, ["dist/src/dev.js"], {
    cwd: repoRoot,
    env: serviceEnv({ DATA_DIR: dataDir, PORT: "0", HOST: "127.0.0.1" }),
  });
  let stderr = "";
  child.stderr.on("data", (chunk: Buffer) => {
    stderr += chunk;
  });
  child.stdout.resume();
  const code = await new Promise((resolve) => child.once("close", resolve));
  return { code, stderr };
}
