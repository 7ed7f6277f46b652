import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test, { type ExecutionContext } from "ava";
import { StoreOpenError } from "../../src/store/errors.js";
import { differencesOf, recountStats } from "../../src/store/stats-recount.js";
import { embeddedDatabaseFile, openStore } from "../../src/store/store.js";
import {
  builtService,
  customersMissing,
  serviceEntry,
  waitGone,
  workerPidsOf,
} from "../helpers/cluster.js";
import { OpenApiMismatch, validatedFetch } from "../helpers/openapi.js";
import { startReceiver } from "../helpers/receiver.js";
import { keys } from "../helpers/server.js";
import { eventually } from "../helpers/wait.js";

/**
 * The embedded engine's promises about the file on disk: what was
 * acknowledged survives the process being killed, and a damaged database
 * stops the start with the file's name instead of being skipped.
 */

const root = new URL("../../", import.meta.url).pathname;
const tenantOfDemo = async (dataDir: string) => {
  const store = await openStore({ dataDir });
  const [application] = await store.system.applications.find({}).toArray();
  return { store, tenant: { organizationId: "", applicationId: application?._id ?? "" } };
};

/**
 * Starts `npm start`'s entry point in a child process with WORKERS set (with
 * more than one, the child is the primary, the store's one writer); resolves
 * with its port.
 */
async function startService(
  dataDir: string,
  workers: number,
  env: Record<string, string> = {},
): Promise<{ child: ChildProcess; port: number }> {
  await builtService();
  const child = spawn(process.execPath, [serviceEntry], {
    cwd: root,
    env: {
      ...process.env,
      WORKERS: String(workers),
      DATA_DIR: dataDir,
      PORT: "0",
      HOST: "127.0.0.1",
      LOG_LEVEL: "silent",
      BOOTSTRAP_SECRET_KEY: keys.secret,
      BOOTSTRAP_PUBLIC_KEY: keys.public,
      // Every write of the burst is the test: none may be refused for its rate.
      RATE_LIMIT_PUBLIC: "off",
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  return new Promise((resolve, reject) => {
    let output = "";
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const match = /listening on 127\.0\.0\.1:(\d+)/.exec(output);
      if (match) resolve({ child, port: Number(match[1]) });
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.on("exit", (code) => reject(new Error(`the service exited (${code}): ${output}`)));
  });
}

/**
 * Kills the service (with workers, the primary alone) with SIGKILL once
 * `ready` holds (or when it never does, failing the test); resolves with the
 * exit, which reaps it, so its lock on the directory is seen to be stale,
 * once its workers, if any, are gone too: they end when their channel to
 * the primary closes.
 */
async function killOnce(child: ChildProcess, what: string, ready: () => boolean) {
  const workers = workerPidsOf(child.pid ?? 0);
  await eventually(what, ready, { timeoutMs: 30_000, intervalMs: 5 }).catch((error: unknown) => {
    child.kill("SIGKILL");
    throw error;
  });
  const exited = once(child, "exit");
  child.kill("SIGKILL");
  const exit = await exited;
  await waitGone(workers);
  return exit;
}

/**
 * Eight writers identifying new customers (`<prefix>_<n>`) until the service
 * is gone, or answers off the OpenAPI document: the ids acknowledged (201),
 * how many were sent, and the drift if any.
 */
function identifyBurst(port: number, prefix: string) {
  const burst = {
    acknowledged: [] as string[],
    sent: 0,
    mismatch: undefined as OpenApiMismatch | undefined,
    ended: Promise.resolve(),
  };
  const writer = async () => {
    for (;;) {
      const externalUserId = `${prefix}_${burst.sent++}`;
      try {
        const response = await validatedFetch(`http://127.0.0.1:${port}/customers/identify`, {
          method: "POST",
          headers: { authorization: keys.public, "content-type": "application/json" },
          body: JSON.stringify({ externalUserId, name: "D" }),
        });
        if (response.status === 201) burst.acknowledged.push(externalUserId);
      } catch (error) {
        if (error instanceof OpenApiMismatch) burst.mismatch = error;
        return; // the process is gone, or its answer drifted from the OpenAPI document
      }
    }
  };
  burst.ended = Promise.all(Array.from({ length: 8 }, writer)).then(() => undefined);
  return burst;
}

// The kill -9 tests run on one process, and on a primary (the store's one
// writer) with two workers serving the port, the primary killed.
for (const workers of [1, 2]) {
  const run = workers === 1 ? "WORKERS=1" : `WORKERS=${workers}, the primary killed`;
  test(`every acknowledged write survives kill -9 in the middle of a write burst (${run})`, (t) =>
    killDuringBurst(t, workers));
  test(`after kill -9 under load, the program's counters equal a recount, and every conversion has its checkpoint and grants (${run})`, (t) =>
    killUnderLoad(t, workers));
}

test("every acknowledged write's webhook event is delivered after kill -9 in the middle of a write burst (WORKERS=2, the primary killed)", async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), "referrals-kill-webhooks-"));
  const receiver = await startReceiver();
  receiver.respond = () => 204;
  const env = { WEBHOOK_ALLOW_PRIVATE: "true" };
  let restarted: ChildProcess | undefined;
  try {
    const { child, port } = await startService(dataDir, 2, env);
    const subscribed = await fetch(`http://127.0.0.1:${port}/webhooks`, {
      method: "POST",
      headers: { authorization: keys.secret, "content-type": "application/json" },
      body: JSON.stringify({
        url: receiver.url,
        environment: "production",
        eventTypes: ["customer.created"],
      }),
    });
    t.is(subscribed.status, 201);
    const burst = identifyBurst(port, "hooked");
    const { acknowledged } = burst;
    // Killed with first attempts in flight and events in outboxes.
    await killOnce(
      child,
      "300 acknowledged writes",
      () => acknowledged.length >= 300 || !!burst.mismatch,
    );
    await burst.ended;
    if (burst.mismatch) throw burst.mismatch;
    const deliveredTo = () =>
      new Set(
        receiver.received.map(
          (request) =>
            (JSON.parse(request.body) as { data: { externalUserId: string } }).data.externalUserId,
        ),
      );
    const before = deliveredTo().size;
    restarted = (await startService(dataDir, 2, env)).child;
    // Delivered at least once (a first attempt cut by the kill is sent again).
    const missing = await eventually(
      "every acknowledged write's event delivered",
      () => {
        const delivered = deliveredTo();
        const left = acknowledged.filter((id) => !delivered.has(id));
        return left.length === 0 ? left : undefined;
      },
      { timeoutMs: 30_000 },
    ).catch(() => acknowledged.filter((id) => !deliveredTo().has(id)));
    t.deepEqual(missing, [], `${acknowledged.length} acknowledged identifies`);
    t.log(`${before} delivered before the kill, ${deliveredTo().size} after the restart`);
  } finally {
    restarted?.kill("SIGKILL");
    await receiver.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

async function killDuringBurst(t: ExecutionContext, workers: number): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), "referrals-kill-"));
  try {
    const { child, port } = await startService(dataDir, workers);
    if (workers > 1) t.is(workerPidsOf(child.pid ?? 0).length, workers, "the workers serve");
    const burst = identifyBurst(port, "durable");
    const { acknowledged } = burst;
    // Kill once writes are flowing, with requests in flight.
    const exited = await killOnce(
      child,
      "300 acknowledged writes",
      () => acknowledged.length >= 300 || !!burst.mismatch,
    );
    await burst.ended;
    if (burst.mismatch) throw burst.mismatch;
    // Reaped, so its lock on the directory is seen to be stale.
    await exited;
    t.true(burst.sent > acknowledged.length, "some requests were in flight when the process died");

    t.deepEqual(
      await customersMissing(dataDir, acknowledged),
      [],
      `${acknowledged.length} acknowledged identifies`,
    );
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}

async function killUnderLoad(t: ExecutionContext, workers: number): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), "referrals-kill-stats-"));
  try {
    const { child, port } = await startService(dataDir, workers);
    const post = async (path: string, key: string, body: unknown) => {
      const response = await fetch(`http://127.0.0.1:${port}${path}`, {
        method: "POST",
        headers: { authorization: key, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      return { status: response.status, body: (await response.json()) as Record<string, string> };
    };
    const converted: string[] = [];
    let stopped = false;
    // Each writer: a referrer, then referees referred and converted, until the process dies.
    const writer = async (writerIndex: number) => {
      try {
        const referrer = await post("/customers/identify", keys.public, {
          externalUserId: `referrer_${writerIndex}`,
          name: "R",
        });
        for (let i = 0; !stopped; i++) {
          const externalUserId = `referee_${writerIndex}_${i}`;
          const referee = await post("/customers/identify", keys.public, {
            externalUserId,
            name: "E",
          });
          await post("/referrals", keys.public, {
            referralCode: referrer.body.referralCode,
            refereeId: referee.body.id,
          });
          const ingested = await post("/checkpoints/ingest", keys.secret, {
            name: "purchase",
            externalUserId,
            environment: "production",
          });
          if (ingested.status === 201) converted.push(externalUserId);
        }
      } catch {
        // The process is gone.
      }
    };
    const writers = Array.from({ length: 6 }, (_, index) => writer(index));
    const exited = await killOnce(child, "60 conversions", () => converted.length >= 60);
    stopped = true;
    await Promise.all(writers);
    await exited;

    const { store, tenant } = await tenantOfDemo(dataDir);
    try {
      const { scopes, wanted, recordsRead } = await recountStats(
        store.system,
        tenant.applicationId,
      );
      t.true(recordsRead > 200, `${recordsRead} records`);
      t.deepEqual(differencesOf(await store.stats.snapshot(scopes), wanted), []);
      t.deepEqual(await conversionsIncomplete(store, converted), []);
    } finally {
      await store.close();
    }
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/**
 * What a kill left half-done among conversions: a referee whose checkpoint
 * was acknowledged without its checkpoint stored or its referral accepted,
 * and an acceptance (acknowledged or not) without the checkpoint that made
 * it or without the demo campaign's two grants. A checkpoint is stored in
 * its conversion's write, so there is none or both.
 */
async function conversionsIncomplete(
  store: Awaited<ReturnType<typeof openStore>>,
  acknowledged: readonly string[],
): Promise<string[]> {
  const { customers, checkpoints, referrals, rewardGrants } = store.system;
  const problems: string[] = [];
  for (const externalUserId of acknowledged) {
    const customer = await customers.findOne({ externalUserId });
    const referral = customer && (await referrals.findOne({ refereeId: customer._id }));
    const stored = customer && (await checkpoints.countDocuments({ customerId: customer._id }));
    if (!stored) problems.push(`${externalUserId}: its acknowledged checkpoint is missing`);
    if (referral?.status !== "accepted") problems.push(`${externalUserId}: not accepted`);
  }
  for (const referral of await referrals.find({ status: "accepted" }).toArray()) {
    const madeBy = referral.statusHistory.at(-1)?.actorId ?? "";
    if ((await checkpoints.countDocuments({ _id: madeBy })) !== 1)
      problems.push(`${referral._id}: accepted without its checkpoint ${madeBy}`);
    const grants = await rewardGrants.countDocuments({ referralId: referral._id });
    if (grants !== 2) problems.push(`${referral._id}: accepted with ${grants} grants`);
  }
  return problems;
}

test("a new data directory and its database files are this user's only", async (t) => {
  const parent = mkdtempSync(join(tmpdir(), "referrals-private-"));
  t.teardown(() => rmSync(parent, { recursive: true, force: true }));
  const dataDir = join(parent, "data");
  const { store } = await tenantOfDemo(dataDir);
  await store.system.applications.insertOne({
    _id: "app_private",
    organizationId: "org_private",
    name: "Private",
    createdAt: new Date(),
    updatedAt: new Date(),
  });
  const modes = Object.fromEntries(
    readdirSync(dataDir).map((name) => [name, statSync(join(dataDir, name)).mode & 0o777]),
  );
  await store.close();
  t.is(statSync(dataDir).mode & 0o777, 0o700);
  for (const name of [embeddedDatabaseFile, `${embeddedDatabaseFile}-wal`]) {
    t.is(modes[name], 0o600, `${name}: ${modes[name]?.toString(8)}`);
  }
});

test("a file that is not a database stops the start with the file's name", async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), "referrals-corrupt-"));
  try {
    const file = join(dataDir, embeddedDatabaseFile);
    writeFileSync(
      file,
      "this is not a database, but it is long enough to have a header ".repeat(80),
    );
    const error = await t.throwsAsync(() => openStore({ dataDir }));
    t.true(error instanceof StoreOpenError);
    t.true(error?.message.includes(file), error?.message);

    // The service says it in one line and exits non-zero.
    const failed = await t.throwsAsync(() => startService(dataDir, 1));
    t.regex(
      failed?.message ?? "",
      /exited \(1\): referral-service: .*referrals\.sqlite is not a readable SQLite database/,
    );
    t.notRegex(failed?.message ?? "", /\n\s+at /, "no stack trace");
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test("a database whose header was damaged is refused, not read as empty", async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), "referrals-damaged-"));
  try {
    const store = await openStore({ dataDir });
    await store.system.customers.insertOne({ _id: "c1" } as never);
    await store.close();
    const file = join(dataDir, embeddedDatabaseFile);
    // Every page in the file itself: a write-ahead log left beside it (a
    // close on a busy machine whose checkpointer answered late) holds the
    // first page too, and SQLite would read that one, undamaged.
    const { DatabaseSync } = await import("node:sqlite");
    const direct = new DatabaseSync(file);
    direct.exec("PRAGMA wal_checkpoint(TRUNCATE)");
    direct.close();
    const { openSync, writeSync, closeSync } = await import("node:fs");
    const fd = openSync(file, "r+");
    writeSync(fd, Buffer.alloc(100, 0x5a), 0, 100, 0);
    closeSync(fd);
    const error = await t.throwsAsync(() => openStore({ dataDir }));
    t.true(error instanceof StoreOpenError);
    t.true(error?.message.includes(file));
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});
