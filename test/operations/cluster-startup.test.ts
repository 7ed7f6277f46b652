import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import test from "ava";
import { spawnService } from "../helpers/cluster.js";
import { reservedPort } from "../helpers/ports.js";
import { keys } from "../helpers/server.js";
import { inPool, send, startCluster } from "./cluster-service.js";

/**
 * With WORKERS=2, a fresh start: calls are served from the first connection
 * the port accepts, and a worker slow to load its code is not taken for a
 * stuck one. Each test starts its own services.
 */

test.serial(
  "from the first connection a fresh start accepts, valid keys are served on every worker, and /readyz says so only once each serves them",
  async (t) => {
    t.timeout(120_000);
    // Starts with two workers (the window the service once had, a worker
    // serving its port before the provisioned keys were committed, showed
    // in 2 of 8), and one with one process, which bound its port before too.
    for (const [start, workers] of ["2", "2", "1"].entries()) {
      const dataDir = mkdtempSync(join(tmpdir(), "referrals-cluster-"));
      t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
      const port = await reservedPort();
      const starting = spawnService({
        DATA_DIR: dataDir,
        PORT: String(port),
        WORKERS: workers,
        BOOTSTRAP_SECRET_KEY: keys.secret,
        BOOTSTRAP_PUBLIC_KEY: keys.public,
      });
      t.teardown(async () => (await starting).stop());
      // Calls on new connections, as soon as the port takes them, until
      // /readyz says ready, then more: each waits for the service to be
      // ready, none is refused.
      let exited: unknown;
      starting.catch((error: unknown) => {
        exited = error;
      });
      const call = async (path: string, key?: string) => {
        for (;;) {
          try {
            return await send(port, "GET", path, { key, timeoutMs: 15_000 });
          } catch (error) {
            if (exited) throw exited;
            if ((error as NodeJS.ErrnoException).code !== "ECONNREFUSED") throw error;
            await sleep(2);
          }
        }
      };
      const key = (index: number) => (index % 2 === 0 ? keys.public : keys.secret);
      const answers: number[] = [];
      for (;;) {
        const [ready, ...calls] = await Promise.all([
          call("/readyz"),
          ...Array.from({ length: 4 }, (_, i) => call("/campaigns", key(i))),
        ]);
        answers.push(...calls.map((answer) => answer.status));
        if (ready.status === 200) break;
        t.is(ready.status, 503);
        t.deepEqual(ready.body, { status: "starting" });
      }
      // Ready on the worker that answered means ready on both: new connections land on each.
      const after = await Promise.all(
        Array.from({ length: 8 }, (_, i) => call("/campaigns", key(i))),
      );
      answers.push(...after.map((answer) => answer.status));
      t.deepEqual(
        answers.filter((status) => status !== 200),
        [],
        `start ${start + 1} (WORKERS=${workers}): every call with a provisioned key is served`,
      );
    }
  },
);

test.serial(
  "a worker slower to load than WORKER_STUCK_TIMEOUT is not taken for a stuck one",
  async (t) => {
    t.timeout(90_000);
    // Each worker's event loop is held for 3 s, past a timeout of 1 s (as a
    // cold disk or a busy machine would): before its code loads, and again
    // once it has heard the primary, while it builds its app.
    const holdWorkers = [
      'import cluster from "node:cluster";',
      // Blocked, not spinning: the other tests running meanwhile keep the cores.
      "const hold = () => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 3000);",
      "if (cluster.isWorker) {",
      "  hold();",
      '  process.once("message", () => setImmediate(hold));',
      "}",
    ].join("\n");
    const { port, service } = await startCluster(t, {
      WORKER_STUCK_TIMEOUT: "1s",
      NODE_OPTIONS: `--import=data:text/javascript;base64,${Buffer.from(holdWorkers).toString("base64")}`,
    });
    const pids = service.workerPids();
    const answers = await inPool(Array.from({ length: 4 }), 2, () =>
      send(port, "GET", "/campaigns", { key: keys.public }),
    );
    t.deepEqual(
      answers.map((answer) => answer.status),
      [200, 200, 200, 200],
    );
    t.notRegex(service.output(), /stopped answering/);
    t.deepEqual(service.workerPids(), pids, "the workers that started still serve");
  },
);
