import { setTimeout as sleep } from "node:timers/promises";
import test from "ava";
import { startReceiver } from "../helpers/receiver.js";
import { type Json, keys } from "../helpers/server.js";
import { eventually } from "../helpers/wait.js";
import {
  type Cluster,
  identify,
  inPool,
  launchCluster,
  scrape,
  send,
  seriesValue,
  workersOf,
} from "./cluster-service.js";
import { healthCheck } from "./service.js";

/**
 * WORKERS=2, as `npm start` runs it: a primary holding the store's writer
 * and the background jobs, two workers serving the port, answering as one
 * service (an idempotency key, webhook deliveries, metrics, health). The
 * tests share one service, one after another; those that change its
 * configuration or its processes start their own (cluster-limits.test.ts,
 * cluster-failures.test.ts, cluster-startup.test.ts).
 */

let shared: (Cluster & { stop(): Promise<void> }) | undefined;
const cluster = (): Cluster => {
  if (!shared) throw new Error("the cluster is not started");
  return shared;
};
test.before(async () => {
  shared = await launchCluster({ WEBHOOK_ALLOW_PRIVATE: "true" });
});
test.after.always(async () => {
  await shared?.stop();
});

test.serial(
  "one Idempotency-Key sent to both workers runs once: the others replay its response",
  async (t) => {
    t.timeout(90_000);
    const { port, service } = cluster();
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
  const { port, service } = cluster();
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
  "/metrics on any worker is the whole service's: calls summed over the workers, each process's own series",
  async (t) => {
    t.timeout(90_000);
    const { port, service } = cluster();
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
  const { port } = cluster();
  // New connections: the primary hands them to the workers in turn.
  for (let i = 0; i < 6; i++) {
    const ready = await send(port, "GET", "/readyz");
    t.is(ready.status, 200);
    t.deepEqual(ready.body, { status: "ok" });
    t.is(await healthCheck(port, ""), "SERVING");
    t.is(await healthCheck(port, "referral.v1.CustomersService"), "SERVING");
  }
});
