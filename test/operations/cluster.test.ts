import { once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import { request as httpRequest, type IncomingHttpHeaders } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import test, { type ExecutionContext } from "ava";
import {
  customersMissing,
  isRunning,
  type SpawnedService,
  spawnService,
} from "../helpers/cluster.js";
import { checkRestResponse } from "../helpers/openapi.js";
import { burstsUntilMixed, identifyOverGrpc, identifyOverRest } from "../helpers/queued-writes.js";
import { startReceiver } from "../helpers/receiver.js";
import { closeGrpcClient, type Json, keys, type TestServer } from "../helpers/server.js";
import { eventually } from "../helpers/wait.js";
import { healthCheck, isRefused } from "./service.js";

/**
 * WORKERS=2, as `npm start` runs it: a primary holding the store's writer
 * and the background jobs, two workers serving the port. Each test starts
 * its own service on a fresh data directory and calls it over connections
 * of their own, which the primary hands to the workers in turn, so the
 * calls of a test land on both. The request log (each line names its
 * worker) tells which worker served which call.
 */

const metricsToken = "metrics-token-for-cluster-tests";

/** A service with two workers, its data directory, and what its processes logged. */
interface Cluster {
  readonly service: SpawnedService;
  readonly port: number;
  readonly dataDir: string;
}

/**
 * Starts the service with WORKERS=2 on a fresh data directory, with the test
 * keys, limits that refuse nothing (unless `env` sets its own) and the
 * request log on; stopped and removed when the test ends.
 */
async function startCluster(
  t: ExecutionContext,
  env: Record<string, string> = {},
  dataDir = mkdtempSync(join(tmpdir(), "referrals-cluster-")),
): Promise<Cluster> {
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const service = await spawnService({
    DATA_DIR: dataDir,
    WORKERS: "2",
    ADMIN_TOKEN: keys.admin,
    BOOTSTRAP_SECRET_KEY: keys.secret,
    BOOTSTRAP_PUBLIC_KEY: keys.public,
    METRICS_TOKEN: metricsToken,
    LOG_LEVEL: "info",
    RATE_LIMIT_PUBLIC: "1000000/1s",
    RATE_LIMIT_SECRET: "1000000/1s",
    RATE_LIMIT_ADMIN: "1000000/1s",
    RATE_LIMIT_UNAUTHENTICATED: "1000000/1s",
    ...env,
  });
  // Registered after the directory's removal, so it runs first (teardowns run in reverse).
  t.teardown(async () => {
    await service.stop();
  });
  t.is(service.workerPids().length, 2, "two workers serve the port");
  return { service, port: service.port, dataDir };
}

/** What a REST call answered. */
interface Answer {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: Json;
}

let requests = 0;

/**
 * A REST call on a connection of its own, closed after the answer, so that
 * the primary hands each call to either worker. Sends an `x-request-id` of
 * its own (see `servedBy`). Rejects when the connection fails or no
 * answer comes within `timeoutMs`.
 */
function send(
  port: number,
  method: string,
  path: string,
  options: {
    key?: string;
    body?: unknown;
    headers?: Record<string, string>;
    timeoutMs?: number;
  } = {},
): Promise<Answer & { requestId: string }> {
  const requestId = `cluster-${process.pid}-${++requests}`;
  const headers: Record<string, string> = { "x-request-id": requestId, ...options.headers };
  if (options.key !== undefined) headers.authorization = options.key;
  const body = options.body === undefined ? undefined : JSON.stringify(options.body);
  if (body !== undefined) headers["content-type"] = "application/json";
  return new Promise((resolve, reject) => {
    const request = httpRequest(
      {
        host: "127.0.0.1",
        port,
        method,
        path,
        headers,
        // A new connection, closed after its one call.
        agent: false,
        signal: AbortSignal.timeout(options.timeoutMs ?? 20_000),
      },
      (response) => {
        let text = "";
        response.setEncoding("utf8");
        response.on("data", (chunk: string) => {
          text += chunk;
        });
        response.on("error", reject);
        response.on("end", () => {
          const status = response.statusCode ?? 0;
          try {
            checkRestResponse({
              method,
              path,
              status,
              contentType: response.headers["content-type"],
              body: text,
            });
          } catch (error) {
            return reject(error);
          }
          let parsed: unknown = text;
          try {
            parsed = JSON.parse(text);
          } catch {}
          resolve({ status, headers: response.headers, body: parsed, requestId });
        });
      },
    );
    request.on("error", reject);
    request.end(body);
  });
}

/** POST /customers/identify of a new (or known) user with the public key. */
function identify(
  port: number,
  externalUserId: string,
  options: { environment?: string; timeoutMs?: number } = {},
) {
  return send(port, "POST", "/customers/identify", {
    key: keys.public,
    body: { externalUserId, name: "Clustered", environment: options.environment ?? "production" },
    timeoutMs: options.timeoutMs,
  });
}

/** GET /metrics with the token: the whole service's, whichever worker answers. */
async function scrape(port: number): Promise<string> {
  const answer = await send(port, "GET", "/metrics", {
    headers: { authorization: `Bearer ${metricsToken}` },
  });
  if (answer.status !== 200) throw new Error(`GET /metrics answered ${answer.status}`);
  return answer.body as string;
}

/** The value of one series (`name{labels}`, exactly as the text writes it); undefined when absent. */
function seriesValue(metrics: string, series: string): number | undefined {
  for (const line of metrics.split("\n")) {
    if (line.startsWith(`${series} `)) return Number(line.slice(series.length + 1));
  }
  return undefined;
}

/** Which worker (its `worker` log field) served each call, by the call's request id. */
function servedBy(service: SpawnedService): Map<string, string> {
  const workers = new Map<string, string>();
  for (const line of service.output().split("\n")) {
    if (!line.startsWith("{")) continue;
    try {
      const entry = JSON.parse(line) as Json;
      if (entry.msg === "call" && typeof entry.requestId === "string") {
        workers.set(entry.requestId, String(entry.worker));
      }
    } catch {
      // A line cut by the end of the output so far.
    }
  }
  return workers;
}

/** The workers that served the calls of `requestIds`, once each call's line is written. */
async function workersOf(service: SpawnedService, requestIds: readonly string[]) {
  const served = await eventually(
    `the request log's lines of ${requestIds.length} calls`,
    () => {
      const all = servedBy(service);
      return requestIds.every((id) => all.has(id)) && all;
    },
    { timeoutMs: 10_000 },
  );
  return new Set(requestIds.map((id) => served.get(id)));
}

/** Runs `work` over `items`, at most `concurrency` at a time. */
async function inPool<T, R>(
  items: readonly T[],
  concurrency: number,
  work: (item: T) => Promise<R>,
): Promise<R[]> {
  const results: R[] = new Array(items.length);
  let next = 0;
  const runner = async () => {
    while (next < items.length) {
      const index = next++;
      results[index] = await work(items[index] as T);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, runner));
  return results;
}

/**
 * Identify calls of new users from `clients` concurrent clients, each call
 * on a connection of its own, until stopped: the users acknowledged (201),
 * and when (performance.now()) each answer or failure came.
 */
function writeLoad(port: number, prefix: string, clients: number) {
  const acknowledged: { externalUserId: string; requestId: string; at: number }[] = [];
  const failures: { reason: string; at: number }[] = [];
  let stopped = false;
  const client = async (index: number) => {
    for (let i = 0; !stopped; i++) {
      const externalUserId = `${prefix}_${index}_${i}`;
      try {
        const answer = await identify(port, externalUserId, { timeoutMs: 4_000 });
        const at = performance.now();
        if (answer.status === 201) {
          acknowledged.push({ externalUserId, requestId: answer.requestId, at });
        } else failures.push({ reason: `${answer.status} ${JSON.stringify(answer.body)}`, at });
      } catch (error) {
        failures.push({ reason: (error as Error).message, at: performance.now() });
        // The connection failed (a worker died, the port closed): a moment before the next.
        await sleep(20);
      }
    }
  };
  const running = Array.from({ length: clients }, (_, index) => client(index));
  return {
    acknowledged,
    failures,
    async stop() {
      stopped = true;
      await Promise.all(running);
    },
  };
}

/** The customers of `externalUserIds` the service does not find (production environment). */
async function missingThroughService(port: number, externalUserIds: readonly string[]) {
  const found = await inPool(externalUserIds, 8, async (externalUserId) => {
    const answer = await send(
      port,
      "GET",
      `/customers?externalUserId=${encodeURIComponent(externalUserId)}&environment=production`,
      { key: keys.secret },
    );
    return answer.status === 200 && answer.body.total === 1;
  });
  return externalUserIds.filter((_, index) => !found[index]);
}

test.serial(
  "a rate limit is one budget for the whole service: 20 of 60 calls spread over both workers pass",
  async (t) => {
    t.timeout(90_000);
    const { port, service } = await startCluster(t, { RATE_LIMIT_PUBLIC: "20/60s" });
    const answers = await inPool(Array.from({ length: 60 }), 6, () =>
      send(port, "GET", "/campaigns", { key: keys.public }),
    );
    const statuses = answers.map((answer) => answer.status);
    t.is(statuses.filter((status) => status === 200).length, 20, "exactly the budget passed");
    t.is(statuses.filter((status) => status === 429).length, 40, "every other call was refused");
    for (const refused of answers.filter((answer) => answer.status === 429)) {
      t.is(refused.body.code, "resource_exhausted");
      t.regex(String(refused.headers["retry-after"]), /^\d+$/);
    }
    const served = await workersOf(
      service,
      answers.map((answer) => answer.requestId),
    );
    t.deepEqual([...served].sort(), ["1", "2"], "both workers served the calls");
    const passedOn = await workersOf(
      service,
      answers.filter((answer) => answer.status === 200).map((answer) => answer.requestId),
    );
    t.log(`the 20 calls that passed were served by workers ${[...passedOn].sort().join(", ")}`);
  },
);

test.serial(
  "a larger limit is taken by the workers in slices: never more than the budget, at most a slice less one per worker unused",
  async (t) => {
    t.timeout(90_000);
    // 500 a minute: each worker asks the primary for 5 calls at a time.
    const { port, service } = await startCluster(t, { RATE_LIMIT_PUBLIC: "500/60s" });
    const answers = await inPool(Array.from({ length: 700 }), 8, () =>
      send(port, "GET", "/campaigns", { key: keys.public }),
    );
    const passed = answers.filter((answer) => answer.status === 200).length;
    t.true(passed <= 500, `${passed} passed: never more than the budget`);
    t.true(passed >= 500 - 2 * 4, `${passed} passed: at most 4 per worker unused`);
    t.is(passed + answers.filter((answer) => answer.status === 429).length, 700);
    const served = await workersOf(
      service,
      answers.map((answer) => answer.requestId),
    );
    t.deepEqual([...served].sort(), ["1", "2"], "both workers served the calls");
  },
);

test.serial(
  "one Idempotency-Key sent to both workers runs once: the others replay its response",
  async (t) => {
    t.timeout(90_000);
    const { port, service } = await startCluster(t);
    const customer = await identify(port, "idempotent-grantee");
    t.is(customer.status, 201);
    const grant = {
      customerId: customer.body.id,
      reason: "goodwill, once",
      value: { type: "payout", method: "custom", currency: "usd", amount: 5 },
    };
    let aborted = 0;
    // As a client does: ABORTED (409) means the first call still runs; retry a moment later.
    const createGrant = async () => {
      for (;;) {
        const answer = await send(port, "POST", "/reward-grants", {
          key: keys.secret,
          body: grant,
          headers: { "idempotency-key": "cluster-goodwill" },
        });
        if (answer.status !== 409) return answer;
        t.is(answer.body.code, "aborted");
        aborted += 1;
        await sleep(10);
      }
    };
    // Together, then one after another: each on a connection of its own.
    const together = await Promise.all(Array.from({ length: 8 }, createGrant));
    const after = [];
    for (let i = 0; i < 4; i++) after.push(await createGrant());
    const answers = [...together, ...after];
    t.deepEqual(
      answers.map((answer) => answer.status),
      Array(answers.length).fill(201),
    );
    for (const answer of answers) t.deepEqual(answer.body, answers[0]?.body);
    const ran = answers.filter((answer) => answer.headers["idempotent-replayed"] !== "true");
    t.is(ran.length, 1, "one call ran");
    t.is(ran[0]?.headers["idempotent-replayed"], undefined, "the call that ran is no replay");
    for (const answer of answers) {
      if (answer !== ran[0]) t.is(answer.headers["idempotent-replayed"], "true");
    }
    const grants = await send(
      port,
      "GET",
      `/reward-grants?customerId=${customer.body.id}&environment=production`,
      { key: keys.secret },
    );
    t.is(grants.status, 200);
    t.is(grants.body.total, 1, "one grant was made");
    const served = await workersOf(
      service,
      answers.map((answer) => answer.requestId),
    );
    t.deepEqual([...served].sort(), ["1", "2"], "both workers were sent the key");
    t.log(`${aborted} answers were ABORTED while the first ran, and retried`);
  },
);

test.serial("each webhook event is delivered once while two workers write events", async (t) => {
  t.timeout(120_000);
  const receiver = await startReceiver();
  t.teardown(() => receiver.close());
  const { port, service } = await startCluster(t, { WEBHOOK_ALLOW_PRIVATE: "true" });
  const endpoint = await send(port, "POST", "/webhooks", {
    key: keys.secret,
    body: { url: `${receiver.url}/cluster`, environment: "test" },
  });
  t.is(endpoint.status, 201, JSON.stringify(endpoint.body));

  const users = Array.from({ length: 40 }, (_, index) => `hooked_${index}`);
  const identified = await inPool(users, 4, (user) =>
    identify(port, user, { environment: "test" }),
  );
  t.deepEqual(
    identified.map((answer) => answer.status),
    Array(users.length).fill(201),
  );
  const served = await workersOf(
    service,
    identified.map((answer) => answer.requestId),
  );
  t.deepEqual([...served].sort(), ["1", "2"], "both workers wrote events");

  const customerIds = new Set(identified.map((answer) => answer.body.id as string));
  const createdFor = () =>
    receiver.received
      .map((request) => JSON.parse(request.body) as Json)
      .filter((event) => event.type === "customer.created" && customerIds.has(event.data.id));
  await receiver.waitFor(() => createdFor().length >= users.length, 60_000);
  // Every delivery the writer attempted has been recorded and nothing waits:
  // a second delivery of an event would have been attempted by now.
  await eventually(
    "every delivery attempted and none waiting",
    async () => {
      const metrics = await scrape(port);
      const succeeded = seriesValue(metrics, 'webhook_deliveries_total{outcome="succeeded"}');
      return (
        succeeded === receiver.received.length && seriesValue(metrics, "webhook_queue_depth") === 0
      );
    },
    { timeoutMs: 30_000, intervalMs: 200 },
  );
  const ids = receiver.received.map((request) => request.headers["webhook-id"]);
  t.is(new Set(ids).size, ids.length, "each webhook-id arrived once");
  const created = createdFor();
  t.is(created.length, users.length, "one customer.created for each new customer");
  t.deepEqual(
    created.map((event) => event.data.id as string).sort(),
    [...customerIds].sort(),
    "and one for every one of them",
  );
});

test.serial(
  "a worker killed under load is replaced; the service goes on and every acknowledged write is kept",
  async (t) => {
    t.timeout(120_000);
    const { port, service } = await startCluster(t);
    const [victim, survivor] = service.workerPids() as [number, number];
    const load = writeLoad(port, "killed", 6);
    try {
      await eventually("100 acknowledged writes", () => load.acknowledged.length >= 100, {
        timeoutMs: 30_000,
      });
      const killedAt = performance.now();
      process.kill(victim, "SIGKILL");
      const pids = await eventually(
        "a new worker in place of the killed one",
        () => {
          const now = service.workerPids();
          return now.length === 2 && !now.includes(victim) && now;
        },
        { timeoutMs: 30_000 },
      );
      t.true(pids.includes(survivor), "the other worker went on");
      const replaced = performance.now();
      // The new worker (the third forked) serves calls too.
      await eventually(
        "50 acknowledged writes since, some served by the new worker",
        () => {
          const since = load.acknowledged.filter((ack) => ack.at > replaced);
          if (since.length < 50) return false;
          const served = servedBy(service);
          return since.some((ack) => served.get(ack.requestId) === "3");
        },
        { timeoutMs: 30_000 },
      );
      t.true(
        load.acknowledged.some((ack) => ack.at > killedAt),
        "writes were acknowledged after the kill",
      );
      t.regex(service.output(), /a worker exited; starting another/);
    } finally {
      await load.stop();
    }
    const acknowledged = load.acknowledged.map((ack) => ack.externalUserId);
    t.log(
      `${acknowledged.length} writes acknowledged; ${load.failures.length} calls failed (the killed worker's): ${[...new Set(load.failures.map((failure) => failure.reason))].join("; ")}`,
    );
    t.deepEqual(await missingThroughService(port, acknowledged), [], "every acknowledged write");
  },
);

test.serial(
  "a stopped worker is killed after WORKER_STUCK_TIMEOUT and replaced; the other serves meanwhile",
  async (t) => {
    t.timeout(120_000);
    const { port, service } = await startCluster(t, { WORKER_STUCK_TIMEOUT: "2s" });
    const [stuck, other] = service.workerPids() as [number, number];
    // Calls on new connections go on throughout; at most the one the primary
    // handed the stopped worker hangs (until its timeout).
    const load = writeLoad(port, "stuck", 3);
    try {
      await eventually("a few acknowledged writes", () => load.acknowledged.length >= 10, {
        timeoutMs: 30_000,
      });
      process.kill(stuck, "SIGSTOP");
      const stoppedAt = performance.now();
      let pids: number[] = [];
      try {
        pids = await eventually(
          "the stopped worker killed and replaced",
          () => {
            const now = service.workerPids();
            return !isRunning(stuck) && now.length === 2 && !now.includes(stuck) && now;
          },
          { timeoutMs: 20_000, intervalMs: 50 },
        );
      } finally {
        // Harmless once it is dead (and lets it go if the test failed).
        try {
          process.kill(stuck, "SIGCONT");
        } catch {}
      }
      const goneAt = performance.now();
      t.false(isRunning(stuck), "the stopped worker is dead");
      t.true(pids.includes(other), "the other worker was left alone");
      t.regex(service.output(), /a worker stopped answering; replacing it/);
      const meanwhile = load.acknowledged.filter(
        (ack) => ack.at > stoppedAt && ack.at < goneAt,
      ).length;
      t.true(meanwhile > 0, "calls were answered while the worker was stopped");
      t.log(
        `${meanwhile} writes acknowledged in the ${Math.round(goneAt - stoppedAt)} ms the worker was stopped`,
      );
      t.log(`calls that failed: ${load.failures.map((failure) => failure.reason).join("; ")}`);
    } finally {
      await load.stop();
    }
    // Once it listens, the new worker (the third forked) is handed calls too.
    const after: Awaited<ReturnType<typeof identify>>[] = [];
    await eventually(
      "a call served by the new worker",
      async () => {
        const answer = await identify(port, `after_stuck_${after.length}`);
        after.push(answer);
        const served = servedBy(service);
        return after.some((call) => served.get(call.requestId) === "3");
      },
      { timeoutMs: 30_000 },
    );
    t.deepEqual(
      after.map((answer) => answer.status),
      Array(after.length).fill(201),
    );
    t.deepEqual(
      await missingThroughService(
        port,
        load.acknowledged.map((ack) => ack.externalUserId),
      ),
      [],
    );
  },
);

/**
 * An identify whose headers are sent with `Expect: 100-continue` and whose
 * body waits: once the service answers 100 Continue, a worker has the call
 * in flight; `finish` sends the body and resolves with the answer.
 */
function slowIdentify(port: number, externalUserId: string) {
  const body = JSON.stringify({ externalUserId, name: "Slow" });
  const request = httpRequest({
    host: "127.0.0.1",
    port,
    method: "POST",
    path: "/customers/identify",
    agent: false,
    headers: {
      authorization: keys.public,
      "content-type": "application/json",
      "content-length": String(Buffer.byteLength(body)),
      expect: "100-continue",
    },
  });
  const answered = new Promise<Answer>((resolve, reject) => {
    request.on("error", reject);
    request.on("response", (response) => {
      let text = "";
      response.setEncoding("utf8");
      response.on("data", (chunk: string) => {
        text += chunk;
      });
      response.on("end", () =>
        resolve({
          status: response.statusCode ?? 0,
          headers: response.headers,
          body: JSON.parse(text),
        }),
      );
    });
  });
  // Keeps an early failure from being unhandled before `finish` is awaited.
  answered.catch(() => {});
  const continued = once(request, "continue");
  request.flushHeaders();
  return {
    externalUserId,
    continued,
    finish(): Promise<Answer> {
      request.end(body);
      return answered;
    },
  };
}

test.serial(
  "SIGTERM drains every worker: calls in flight finish, the primary exits 0, every acknowledged write is stored",
  async (t) => {
    t.timeout(120_000);
    const { port, service, dataDir } = await startCluster(t, { SHUTDOWN_GRACE: "30s" });
    const load = writeLoad(port, "drained", 4);
    const slow = Array.from({ length: 4 }, (_, index) => slowIdentify(port, `slow_${index}`));
    let exit: Awaited<ReturnType<SpawnedService["stop"]>> | undefined;
    try {
      await Promise.all(slow.map((call) => call.continued));
      await eventually("50 acknowledged writes", () => load.acknowledged.length >= 50, {
        timeoutMs: 30_000,
      });
      const workers = service.workerPids();
      const stopped = service.stop();
      // The workers close the port at the start of their drain.
      await eventually("the port to refuse connections", () => isRefused(port), {
        timeoutMs: 20_000,
      });
      t.true(workers.every(isRunning), "the workers drain their calls in flight");
      // The calls in flight get their bodies only now, and are served.
      const answers = await Promise.all(slow.map((call) => call.finish()));
      t.deepEqual(
        answers.map((answer) => answer.status),
        Array(slow.length).fill(201),
        JSON.stringify(answers.map((answer) => answer.body)),
      );
      for (const answer of answers) t.is(answer.headers.connection, "close");
      exit = await stopped;
      t.false(workers.some(isRunning), "every worker exited");
    } finally {
      await load.stop();
    }
    t.deepEqual(exit, { code: 0, signal: null }, "the primary exits 0");

    const wanted = [
      ...load.acknowledged.map((ack) => ack.externalUserId),
      ...slow.map((call) => call.externalUserId),
    ];
    t.deepEqual(
      await customersMissing(dataDir, wanted),
      [],
      `${wanted.length} acknowledged identifies`,
    );
  },
);

test.serial(
  "/metrics on any worker is the whole service's: calls summed over the workers, each process's own series",
  async (t) => {
    t.timeout(90_000);
    const { port, service } = await startCluster(t);
    const calls = await inPool(Array.from({ length: 24 }), 3, () =>
      send(port, "GET", "/campaigns", { key: keys.public }),
    );
    t.deepEqual(
      calls.map((answer) => answer.status),
      Array(calls.length).fill(200),
    );
    const served = await workersOf(
      service,
      calls.map((answer) => answer.requestId),
    );
    t.deepEqual([...served].sort(), ["1", "2"], "both workers served the calls");
    await identify(port, "metered");

    const listCampaigns =
      'rpc_calls_total{rpc="referral.v1.CampaignsService/ListCampaigns",protocol="rest",code="ok"}';
    // Two scrapes, on new connections: one on each worker.
    for (const scrapeNumber of [1, 2]) {
      const metrics = await eventually(
        `scrape ${scrapeNumber} counting every call`,
        async () => {
          const text = await scrape(port);
          return (seriesValue(text, listCampaigns) ?? 0) >= calls.length && text;
        },
        { timeoutMs: 15_000, intervalMs: 100 },
      );
      t.is(seriesValue(metrics, listCampaigns), calls.length, "every call counted once");
      for (const worker of ["primary", "1", "2"]) {
        const memory = seriesValue(metrics, `process_resident_memory_bytes{worker="${worker}"}`);
        t.true((memory ?? 0) > 0, `process_resident_memory_bytes of ${worker}: ${memory}`);
      }
      for (const series of ["store_group_commits_total", "store_committed_writes_total"]) {
        t.true((seriesValue(metrics, series) ?? 0) > 0, series);
      }
    }
  },
);

test.serial("/readyz and gRPC health answer for the whole service on every worker", async (t) => {
  t.timeout(90_000);
  const { port } = await startCluster(t);
  // New connections: the primary hands them to the workers in turn.
  for (let i = 0; i < 6; i++) {
    const ready = await send(port, "GET", "/readyz");
    t.is(ready.status, 200);
    t.deepEqual(ready.body, { status: "ok" });
    t.is(await healthCheck(port, ""), "SERVING");
    t.is(await healthCheck(port, "referral.v1.CustomersService"), "SERVING");
  }
});

/** A cluster as the helpers' clients call it (`rest`, `grpcCall`): no app in this process. */
function asTestServer(t: ExecutionContext, cluster: Cluster): TestServer {
  const server: TestServer = {
    get app(): never {
      throw new Error("the service runs in other processes");
    },
    port: cluster.port,
    baseUrl: `http://127.0.0.1:${cluster.port}`,
    dataDir: cluster.dataDir,
    stop: async () => {
      await cluster.service.stop();
    },
  };
  t.teardown(() => closeGrpcClient(server));
  return server;
}

test.serial(
  "past WRITE_QUEUE_LIMIT, a worker's writes are refused as unavailable and change nothing",
  async (t) => {
    t.timeout(90_000);
    const dataDir = mkdtempSync(join(tmpdir(), "referrals-cluster-"));
    const cluster = await startCluster(t, { WRITE_QUEUE_LIMIT: "1" }, dataDir);
    const server = asTestServer(t, cluster);
    // A burst on one HTTP/2 connection over REST and one over gRPC, at once:
    // each worker's writes waiting for the primary reach the limit.
    const restBurst = (round: number) =>
      Array.from({ length: 150 }, (_, index) =>
        identifyOverRest(t, server, `queued_rest_${round}_${index}`, "2"),
      );
    const grpcBurst = (round: number) =>
      Array.from({ length: 150 }, (_, index) =>
        identifyOverGrpc(t, server, `queued_grpc_${round}_${index}`),
      );
    const outcomes = await burstsUntilMixed(t, (round) =>
      Promise.all([...restBurst(round), ...grpcBurst(round)]),
    );
    const refused = outcomes.filter((outcome) => !outcome.ok);
    const succeeded = outcomes.filter((outcome) => outcome.ok);
    t.deepEqual(
      await missingThroughService(
        cluster.port,
        succeeded.map((outcome) => outcome.externalUserId),
      ),
      [],
      "every served write is stored",
    );
    const refusedIds = refused.map((outcome) => outcome.externalUserId);
    t.deepEqual(
      await missingThroughService(cluster.port, refusedIds),
      refusedIds,
      "no refused write is",
    );
    t.log(`${refused.length} of ${outcomes.length} refused`);
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
      "const hold = () => { const end = Date.now() + 3000; while (Date.now() < end); };",
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
