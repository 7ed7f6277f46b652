import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, statfsSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import test from "ava";
import { type Json, keys, rest, startServer, type TestServer } from "../helpers/server.js";
import { eventually } from "../helpers/wait.js";
import { healthCheck } from "./service.js";

/**
 * A full disk, on a real small tmpfs: writes answer 503 `unavailable` with
 * Retry-After and change nothing, reads go on, `/readyz` and gRPC health say
 * NOT_SERVING, the failures are logged once a second with a count, and the
 * service takes writes again by itself once space returns, having lost
 * nothing it acknowledged. Mounting needs privileges; without them the
 * tests are skipped, saying why.
 */

const mounts: string[] = [];

/** A fresh tmpfs of `mebibytes`, or why none could be mounted. */
function mountTmpfs(mebibytes: number): string | { refused: string } {
  const dir = mkdtempSync(join(tmpdir(), "referrals-tmpfs-"));
  try {
    execFileSync("mount", ["-t", "tmpfs", "-o", `size=${mebibytes}m`, "tmpfs", dir], {
      stdio: "pipe",
    });
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    const stderr = (error as { stderr?: Buffer }).stderr?.toString().trim();
    return { refused: stderr || (error as Error).message };
  }
  mounts.push(dir);
  return dir;
}

test.after.always(() => {
  for (const dir of mounts) {
    try {
      execFileSync("umount", [dir], { stdio: "ignore" });
    } catch {}
    rmSync(dir, { recursive: true, force: true });
  }
});

const probe = mountTmpfs(1);
const mountable = typeof probe === "string";
if (!mountable) {
  console.log(`disk-full tests skipped: cannot mount a tmpfs here (${probe.refused})`);
}
const diskTest = mountable ? test.serial : test.serial.skip;

const freeBytes = (dir: string) => {
  const disk = statfsSync(dir);
  return disk.bavail * disk.bsize;
};

/** Fills the file system of `dir` until `leaveBytes` are free; returns the filler's path. */
function fillUntil(dir: string, leaveBytes: number): string {
  const filler = join(dir, "filler");
  const size = Math.max(0, freeBytes(dir) - leaveBytes);
  writeFileSync(filler, Buffer.alloc(size));
  return filler;
}

const metricsToken = "metrics-token-for-disk-tests";
/** The gauges that tell an operator how the store stands. */
const storeGauges = [
  "store_disk_free_bytes",
  "store_size_bytes",
  "store_write_queue",
  "webhook_queue_depth",
  "webhook_oldest_pending_age_seconds",
];

let identified = 0;
function identify(server: TestServer, bytes = 0) {
  identified += 1;
  return rest(server, "POST", "/customers/identify", {
    key: keys.public,
    body: {
      externalUserId: `disk-${identified}`,
      name: "Ada",
      ...(bytes > 0 ? { customProperties: { note: "x".repeat(bytes) } } : {}),
    },
  });
}

diskTest(
  "under MIN_FREE_DISK writes are refused before the disk fills, reads go on, and it recovers",
  async (t) => {
    const dir = mountTmpfs(24) as string;
    const server = await startServer({
      dataDir: join(dir, "data"),
      env: { MIN_FREE_DISK: "12MiB" },
    });
    try {
      t.is((await identify(server)).status, 201);
      const filler = fillUntil(dir, 8 * 1024 * 1024);
      await eventually(
        "readiness to turn",
        async () => (await rest(server, "GET", "/readyz")).status === 503,
      );
      const readiness = await rest(server, "GET", "/readyz");
      t.is(readiness.body.status, "unavailable");
      t.regex(readiness.body.reason, /under MIN_FREE_DISK/);
      t.is(await healthCheck(server.port, ""), "NOT_SERVING");

      const refused = await identify(server);
      t.is(refused.status, 503);
      t.is(refused.body.code, "unavailable");
      t.regex(refused.body.message, /MIN_FREE_DISK.*nothing was changed; retry in 5 s/);
      t.is(refused.headers.get("retry-after"), "5");
      const read = await rest(server, "GET", "/customers", { key: keys.secret });
      t.is(read.status, 200, "reads are served");
      t.is(read.body.total, 1, "the refused write changed nothing");

      rmSync(filler);
      await eventually(
        "readiness to return",
        async () => (await rest(server, "GET", "/readyz")).status === 200,
      );
      t.is(await healthCheck(server.port, ""), "SERVING");
      t.is((await identify(server)).status, 201);
    } finally {
      await server.stop();
    }
  },
);

diskTest(
  "a start on a disk already under MIN_FREE_DISK serves reads, refuses writes and says why",
  async (t) => {
    const dir = mountTmpfs(24) as string;
    for (const workers of [1, 2]) {
      const server = await startServer({
        dataDir: join(dir, `data-${workers}`),
        workers,
        env: { MIN_FREE_DISK: "64MiB", METRICS_TOKEN: metricsToken },
      });
      try {
        const readiness = await rest(server, "GET", "/readyz");
        t.is(readiness.status, 503, `WORKERS=${workers}`);
        t.regex(readiness.body.reason, /under MIN_FREE_DISK/);
        t.is((await rest(server, "GET", "/campaigns", { key: keys.public })).status, 200);
        t.is((await identify(server)).status, 503, "writes are refused");
        const scrape = await rest(server, "GET", "/metrics", {
          headers: { authorization: `Bearer ${metricsToken}` },
        });
        t.is(scrape.status, 200);
        for (const gauge of storeGauges) t.regex(scrape.body, new RegExp(`^${gauge} \\d`, "m"));
      } finally {
        await server.stop();
      }
    }
  },
);

diskTest(
  "a full disk is 503 with Retry-After, logged once a second, and nothing acknowledged is lost",
  async (t) => {
    const dir = mountTmpfs(16) as string;
    const dataDir = join(dir, "data");
    const lines: string[] = [];
    const env = { MIN_FREE_DISK: "0", LOG_LEVEL: "info", METRICS_TOKEN: metricsToken };
    let server = await startServer({ dataDir, env, logTo: { write: (line) => lines.push(line) } });
    const acknowledged: string[] = [];
    const statuses = new Map<number, number>();
    let filler = "";
    try {
      const before = await identify(server);
      t.is(before.status, 201);
      acknowledged.push(before.body.id);
      // Freed once writes are refused: room for a row, not for a call's
      // writes. Written before the filler, which leaves the service little.
      const slack = join(dir, "slack");
      writeFileSync(slack, Buffer.alloc(64 * 1024));
      filler = fillUntil(dir, 512 * 1024);
      const started = Date.now();
      let refusal: Awaited<ReturnType<typeof identify>> | undefined;
      // Writes of 4 KB each until the disk refuses one (far fewer than these
      // fill 512 KB), then 20 more: as many as a busy machine takes.
      let afterRefusal = 0;
      for (let written = 0; written < 2000 && afterRefusal < 20; written++) {
        const answer = await identify(server, 4096);
        statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
        if (answer.status === 201) acknowledged.push(answer.body.id);
        else refusal ??= answer;
        if (refusal) afterRefusal++;
      }
      const writingMs = Date.now() - started;
      t.deepEqual(
        [...statuses.keys()].filter((status) => status !== 201 && status !== 503),
        [],
        "every write is taken or refused as unavailable, none is a 500",
      );
      t.truthy(refusal, "the disk filled");
      t.is(refusal?.body.code, "unavailable");
      t.regex(refusal?.body.message ?? "", /the disk (is full|failed a read or write)/);
      t.is(refusal?.headers.get("retry-after"), "5");
      t.is((await rest(server, "GET", "/readyz")).status, 503);
      // Reads go on: the customer stored before the disk filled. How many of
      // the writes after the fill are taken depends on the log's state at
      // that moment, and may be none (seen once in a full run): the first of
      // them cannot stand for a stored customer.
      t.is(
        (await rest(server, "GET", `/customers/${before.body.id}`, { key: keys.secret })).status,
        200,
      );
      // What an operator looks at while the disk is full: the store's gauges too.
      const scrape = await rest(server, "GET", "/metrics", {
        headers: { authorization: `Bearer ${metricsToken}` },
      });
      t.is(scrape.status, 200);
      for (const gauge of storeGauges) {
        t.regex(scrape.body, new RegExp(`^${gauge} \\d`, "m"), `${gauge} while the disk is full`);
      }

      const entries = lines.map((line) => JSON.parse(line) as Json);
      t.deepEqual(
        entries.filter((entry) => entry.level >= 50).map((entry) => entry.msg),
        [],
        "no error lines (stack traces) for a full disk",
      );
      const warnings = entries.filter((entry) => entry.msg === "the store refuses writes");
      t.true(warnings.length >= 1);
      t.true(
        warnings.length <= Math.ceil(writingMs / 1000) + 1,
        `at most one line a second: ${warnings.length} in ${writingMs} ms`,
      );

      // With 64 KB freed, a probe write of one row fits where a customer's
      // does not: readiness must not turn back on it (two probes' time).
      rmSync(slack);
      await sleep(2500);
      const stillFull = await rest(server, "GET", "/readyz");
      t.is(stillFull.status, 503, "readiness stays refused while a call's write cannot fit");
      t.regex(stillFull.body.reason, /the disk (is full|failed a read or write)/);
      t.is((await identify(server, 4096)).status, 503);

      rmSync(filler);
      filler = "";
      await eventually(
        "readiness to return",
        async () => (await rest(server, "GET", "/readyz")).status === 200,
      );
      const after = await identify(server);
      t.is(after.status, 201, "writes are taken again once space returns");
      acknowledged.push(after.body.id);
    } finally {
      if (filler) rmSync(filler, { force: true });
      await server.stop({ keepData: true });
    }
    // Everything acknowledged is there after a restart.
    server = await startServer({ dataDir, env: { MIN_FREE_DISK: "0" } });
    try {
      for (const id of acknowledged) {
        const read = await rest(server, "GET", `/customers/${id}`, { key: keys.secret });
        t.is(read.status, 200, id);
      }
      t.log(`${acknowledged.length} writes acknowledged, ${statuses.get(503) ?? 0} refused`);
    } finally {
      await server.stop();
    }
  },
);
