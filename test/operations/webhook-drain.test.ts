import test from "ava";
import type { WebhookResponse, WebhookSender } from "../../src/delivery/sender.js";
import { unpackPayload } from "../../src/store/event-payload.js";
import { openStore } from "../../src/store/store.js";
import { deliveriesIn } from "../helpers/relay.js";
import { keys, rest } from "../helpers/server.js";
import { eventually } from "../helpers/wait.js";
import { isRefused, type OperationsServer, startService, waitUntil } from "./service.js";

/**
 * Webhook workers on close: an attempt in flight finishes within
 * SHUTDOWN_GRACE and is recorded; one still running after it is aborted,
 * and nothing is held against the endpoint. A new event's first attempt is
 * made before its delivery is stored (also when many wait for a busy
 * worker): cut short, or never started, its event waits in its document's
 * outbox and is delivered at the next start; a stored delivery is released
 * (due again at once).
 */

/** A sender that answers 200 when `answer` is called, or gives up when aborted; it keeps what it was sent. */
function createSlowEndpoint() {
  const bodies: string[] = [];
  let attempts = 0;
  let answer = () => {};
  const answered = new Promise<void>((resolve) => {
    answer = resolve;
  });
  const send: WebhookSender = (request) => {
    attempts++;
    bodies.push(request.body);
    return new Promise<WebhookResponse>((resolve) => {
      void answered.then(() => resolve({ statusCode: 200, durationMs: 1, error: null }));
      request.signal?.addEventListener("abort", () =>
        resolve({ statusCode: null, durationMs: 1, error: "aborted" }),
      );
    });
  };
  return {
    send,
    bodies,
    answer: () => answer(),
    untilAttempted: () => waitUntil(() => attempts > 0, "a delivery attempt"),
  };
}

/** Subscribes an endpoint and identifies a customer: one delivery, attempted at once. */
async function queueOneDelivery(server: OperationsServer): Promise<void> {
  const created = await rest(server, "POST", "/webhooks", {
    key: keys.secret,
    body: {
      // Never called: the fake sender answers instead.
      url: "http://127.0.0.1:9/referrals",
      environment: "test",
      eventTypes: ["customer.created"],
    },
  });
  if (created.status !== 201) throw new Error(JSON.stringify(created.body));
  const identified = await rest(server, "POST", "/customers/identify", {
    key: keys.public,
    body: { externalUserId: "drained", name: "Drained", environment: "test" },
  });
  if (identified.status !== 201) throw new Error(JSON.stringify(identified.body));
}

/** Waits until `count` deliveries wait in the delivery workers' hands (`webhook_deliveries_in_hand`). */
async function untilInHand(server: OperationsServer, count: number, what: string): Promise<void> {
  await eventually(what, async () => {
    const metrics = await server.app.metricsJson();
    const inHand = metrics.find((metric) => metric.name === "webhook_deliveries_in_hand");
    return inHand?.values[0]?.value === count;
  });
}

/** The deliveries, endpoints and events still in an outbox, as the closed service left them. */
async function leftBehind(server: OperationsServer) {
  const store = await openStore(server.config.store);
  try {
    const waiting = await store.system.customers.find({ outboxPending: true }).toArray();
    return {
      deliveries: await deliveriesIn(store.system),
      webhooks: await store.system.webhooks.find({}).toArray(),
      inOutboxes: waiting.flatMap((customer) => customer.outbox ?? []).length,
    };
  } finally {
    await store.close();
  }
}

/**
 * Starts the service again on what `server` left, with an endpoint that
 * answers at once, and waits until `count` deliveries succeeded: how many
 * requests it received, by event id.
 */
async function restartAndDeliver(
  server: OperationsServer,
  count: number,
  cleanups: (() => Promise<void>)[],
): Promise<Map<string, number>> {
  const received = new Map<string, number>();
  const restarted = await startService({
    dataDir: server.dataDir,
    sendWebhook: async (request) => {
      const id = request.headers["webhook-id"] ?? "";
      received.set(id, (received.get(id) ?? 0) + 1);
      return { statusCode: 200, durationMs: 1, error: null };
    },
    env: { WEBHOOK_ALLOW_PRIVATE: "true" },
  });
  cleanups.push(() => restarted.stop());
  await eventually(`${count} deliveries succeeded after the restart`, async () => {
    const deliveries = await deliveriesIn(restarted.app.store.system);
    return (
      deliveries.filter((delivery) => delivery.status === "succeeded").length === count &&
      deliveries.length === count
    );
  });
  await eventually("every outbox emptied after the restart", async () => {
    const waiting = await restarted.app.store.system.customers
      .find({ outboxPending: true })
      .toArray();
    return waiting.length === 0;
  });
  return received;
}

test("an attempt in flight finishes during the drain and is recorded", async (t) => {
  const endpoint = createSlowEndpoint();
  const server = await startService({
    sendWebhook: endpoint.send,
    env: { SHUTDOWN_GRACE: "5s", WEBHOOK_ALLOW_PRIVATE: "true" },
  });
  try {
    await queueOneDelivery(server);
    await endpoint.untilAttempted();
    const closing = server.app.close();
    // Answered once the drain has begun (the port no longer takes connections).
    t.true(await isRefused(server.port), "the drain has begun");
    endpoint.answer();
    await closing;
    const { deliveries } = await leftBehind(server);
    t.is(deliveries.length, 1);
    t.like(deliveries[0], { status: "succeeded", leaseOwner: null });
    t.is(deliveries[0]?.attempts.length, 1);
  } finally {
    await server.stop();
  }
});

test("a first attempt still running after SHUTDOWN_GRACE is aborted; its event waits in its outbox and is delivered at the next start", async (t) => {
  const endpoint = createSlowEndpoint();
  const server = await startService({
    sendWebhook: endpoint.send,
    // A recorded failure would wait an hour for its retry.
    env: {
      SHUTDOWN_GRACE: "300ms",
      WEBHOOK_ALLOW_PRIVATE: "true",
      WEBHOOK_RETRY_SCHEDULE: "0s,1h",
      WEBHOOK_TIMEOUT: "10s",
    },
  });
  const cleanups: (() => Promise<void>)[] = [];
  try {
    await queueOneDelivery(server);
    await endpoint.untilAttempted();
    const started = performance.now();
    await server.app.close();
    // Ended by SHUTDOWN_GRACE: the attempt would otherwise run until the
    // endpoint answers (never) or WEBHOOK_TIMEOUT (10 s) and be recorded.
    t.true(performance.now() - started < 10_000, "aborted at SHUTDOWN_GRACE");
    const { deliveries, webhooks, inOutboxes } = await leftBehind(server);
    t.deepEqual(
      deliveries,
      [],
      "a first attempt is stored with its delivery, and this one never ended",
    );
    t.is(inOutboxes, 1, "its event waits in the customer's outbox");
    t.is(webhooks[0]?.health.consecutiveFailures, 0, "no failure held against the endpoint");
    const received = await restartAndDeliver(server, 1, cleanups);
    t.deepEqual([...received.values()], [1], "sent at the next start, once");
  } finally {
    endpoint.answer();
    await server.stop({ keepData: true });
    for (const cleanup of cleanups) await cleanup();
  }
});

test("first attempts handed to this instance's workers but never started wait in their outboxes, and are delivered at the next start", async (t) => {
  const endpoint = createSlowEndpoint();
  const server = await startService({
    sendWebhook: endpoint.send,
    // One worker: the first delivery holds it, the others wait in its hands.
    env: {
      SHUTDOWN_GRACE: "300ms",
      WEBHOOK_ALLOW_PRIVATE: "true",
      WEBHOOK_CONCURRENCY: "1",
      WEBHOOK_TIMEOUT: "10s",
    },
  });
  const cleanups: (() => Promise<void>)[] = [];
  try {
    await queueOneDelivery(server);
    await endpoint.untilAttempted();
    for (const externalUserId of ["waiting-1", "waiting-2"]) {
      await rest(server, "POST", "/customers/identify", {
        key: keys.public,
        body: { externalUserId, name: externalUserId, environment: "test" },
      });
    }
    // Handed over before anything is stored: two wait in the worker's hands.
    await untilInHand(server, 2, "two first attempts in the worker's hands");
    await server.app.close();
    const { deliveries, inOutboxes } = await leftBehind(server);
    t.deepEqual(deliveries, [], "none attempted to the end, none stored");
    t.is(inOutboxes, 3, "every event waits in its customer's outbox");
    // Relayed again at the start, stored events have their deliveries
    // queued (leased to the new instance) and sent: each once.
    const received = await restartAndDeliver(server, 3, cleanups);
    t.is(received.size, 3);
    t.deepEqual([...received.values()], [1, 1, 1]);
  } finally {
    endpoint.answer();
    await server.stop({ keepData: true });
    for (const cleanup of cleanups) await cleanup();
  }
});

test("deliveries waiting for a busy worker are still attempted before they are stored: each is kept in its event, none queued on its own", async (t) => {
  const endpoint = createSlowEndpoint();
  const server = await startService({
    sendWebhook: endpoint.send,
    // One worker, held by the first delivery: the next events' deliveries
    // wait in its hands, as they do when the writes keep the workers behind.
    env: { WEBHOOK_ALLOW_PRIVATE: "true", WEBHOOK_CONCURRENCY: "1" },
  });
  try {
    await queueOneDelivery(server);
    await endpoint.untilAttempted();
    // More than the 256 first attempts the relay used to allow at once.
    const waiting = 300;
    for (let first = 0; first < waiting; first += 25) {
      await Promise.all(
        Array.from({ length: Math.min(25, waiting - first) }, (_, index) =>
          rest(server, "POST", "/customers/identify", {
            key: keys.public,
            body: { externalUserId: `busy-${first + index}`, name: "Busy", environment: "test" },
          }),
        ),
      );
    }
    await untilInHand(server, waiting, `${waiting} first attempts in the worker's hands`);
    endpoint.answer();
    const db = server.app.store.system;
    await eventually(`${waiting + 1} deliveries succeeded`, async () => {
      const deliveries = await deliveriesIn(db);
      return (
        deliveries.filter((delivery) => delivery.status === "succeeded").length === waiting + 1
      );
    });
    t.deepEqual(
      (await db.deliveries.find({}).toArray()).map((delivery) => delivery.eventId),
      [],
      "every delivery succeeded at its first attempt and is kept in its event",
    );
  } finally {
    endpoint.answer();
    await server.stop();
  }
});

test("a delivery waiting in a worker's hands when its customer is erased is sent without the customer's data", async (t) => {
  const endpoint = createSlowEndpoint();
  const server = await startService({
    sendWebhook: endpoint.send,
    // One worker, held by the first delivery: the next event's waits in its hands.
    env: { WEBHOOK_ALLOW_PRIVATE: "true", WEBHOOK_CONCURRENCY: "1" },
  });
  try {
    await queueOneDelivery(server);
    await endpoint.untilAttempted();
    const identified = await rest(server, "POST", "/customers/identify", {
      key: keys.public,
      body: {
        externalUserId: "erin-in-hand",
        name: "Erin Inhand",
        email: "erin.inhand@example.com",
        environment: "test",
      },
    });
    t.is(identified.status, 201, JSON.stringify(identified.body));
    const id = (identified.body as { id: string }).id;
    await untilInHand(server, 1, "the customer's first attempt in the worker's hands");
    // Built before the erasure, sent after it was acknowledged.
    const erased = await rest(server, "DELETE", `/customers/${id}`, {
      key: keys.secret,
    });
    t.is(erased.status, 200, JSON.stringify(erased.body));
    endpoint.answer();
    await eventually("the erased customer's delivery attempted", async () =>
      endpoint.bodies.some((body) => body.includes(id)),
    );
    const sent = endpoint.bodies.find((body) => body.includes(id)) ?? "";
    for (const data of ["erin-in-hand", "Erin Inhand", "erin.inhand@example.com"]) {
      t.false(sent.includes(data), `the delivery sent after the erasure holds ${data}: ${sent}`);
    }
    const db = server.app.store.system;
    await eventually("the delivery stored with its event", async () => {
      const deliveries = await deliveriesIn(db);
      return deliveries.filter((delivery) => delivery.status === "succeeded").length === 2;
    });
    const stored = await db.events.find({ customerId: id }).toArray();
    t.true(stored.length > 0, "the event is stored");
    for (const event of stored) {
      const payload = unpackPayload(event.payload, event);
      t.false(
        payload.includes("erin.inhand@example.com"),
        `the stored event holds the email: ${payload}`,
      );
    }
  } finally {
    endpoint.answer();
    await server.stop();
  }
});

test("an event appended while its document's first attempts are being stored is relayed, though a pass read past the document meanwhile", async (t) => {
  const sent: string[] = [];
  let releaseFirst = () => {};
  const firstHeld = new Promise<void>((resolve) => {
    releaseFirst = resolve;
  });
  const server = await startService({
    sendWebhook: async (request) => {
      sent.push(JSON.parse(request.body).type);
      if (sent.length === 1) await firstHeld;
      return { statusCode: 200, durationMs: 1, error: null };
    },
    env: { WEBHOOK_ALLOW_PRIVATE: "true" },
  });
  const customers = server.app.store.system.customers;
  const find = customers.find;
  t.teardown(() => {
    customers.find = find;
  });
  try {
    const created = await rest(server, "POST", "/webhooks", {
      key: keys.secret,
      body: {
        url: "http://127.0.0.1:9/referrals",
        environment: "test",
        eventTypes: ["customer.created", "customer.erased"],
      },
    });
    t.is(created.status, 201);
    const identified = await rest(server, "POST", "/customers/identify", {
      key: keys.public,
      body: { externalUserId: "appended", name: "Appended", environment: "test" },
    });
    await waitUntil(() => sent.length === 1, "customer.created's first attempt");
    // An erasure in an environment the endpoint does not listen to moves
    // the store's erasure mark after the attempt looked for erased
    // customers: the storing looks again (see `withErasedScrubbed`).
    const elsewhere = await rest(server, "POST", "/customers/identify", {
      key: keys.secret,
      body: { externalUserId: "elsewhere", name: "Elsewhere", environment: "production" },
    });
    t.is(elsewhere.status, 201);
    const erasedElsewhere = await rest(server, "DELETE", `/customers/${elsewhere.body.id}`, {
      key: keys.secret,
    });
    t.is(erasedElsewhere.status, 200);
    // Holds the storing of that attempt after its write, before the
    // document is released: at its read of erased customers (the only
    // read of customers that asks for a deletedAt set).
    let entered = () => {};
    const storingHeld = new Promise<void>((resolve) => {
      entered = resolve;
    });
    let release = () => {};
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    customers.find = ((filter: { deletedAt?: unknown }, options?: never) => {
      const cursor = find.call(customers, filter as never, options);
      if (!filter?.deletedAt) return cursor;
      return {
        toArray: async () => {
          entered();
          await released;
          return cursor.toArray();
        },
      };
    }) as typeof find;
    releaseFirst();
    await storingHeld;
    // Appended now: after the storing emptied the outbox of what it read.
    const erased = await rest(server, "DELETE", `/customers/${identified.body.id}`, {
      key: keys.secret,
    });
    t.is(erased.status, 200);
    // The erasure wakes the relay, whose pass reads past the document.
    await new Promise((resolve) => setTimeout(resolve, 300));
    release();
    await eventually("customer.erased sent", () => sent.includes("customer.erased"), {
      timeoutMs: 5000,
    });
    t.deepEqual(sent, ["customer.created", "customer.erased"]);
  } finally {
    releaseFirst();
    await server.stop();
  }
});

test("an event for two endpoints, one answering and one cut short by the stop: the answered delivery is kept with the event, and only the other is sent at the next start", async (t) => {
  let answering = 0;
  let cut = 0;
  const send: WebhookSender = (request) => {
    if (request.url.endsWith("/answers")) {
      answering++;
      return Promise.resolve({ statusCode: 200, durationMs: 1, error: null });
    }
    cut++;
    return new Promise<WebhookResponse>((resolve) =>
      request.signal?.addEventListener("abort", () =>
        resolve({ statusCode: null, durationMs: 1, error: "aborted" }),
      ),
    );
  };
  const server = await startService({
    sendWebhook: send,
    env: { SHUTDOWN_GRACE: "300ms", WEBHOOK_ALLOW_PRIVATE: "true", WEBHOOK_TIMEOUT: "10s" },
  });
  const cleanups: (() => Promise<void>)[] = [];
  try {
    for (const path of ["answers", "hangs"]) {
      const created = await rest(server, "POST", "/webhooks", {
        key: keys.secret,
        body: {
          url: `http://127.0.0.1:9/${path}`,
          environment: "test",
          eventTypes: ["customer.created"],
        },
      });
      if (created.status !== 201) throw new Error(JSON.stringify(created.body));
    }
    await rest(server, "POST", "/customers/identify", {
      key: keys.public,
      body: { externalUserId: "split", name: "Split", environment: "test" },
    });
    await waitUntil(() => answering === 1 && cut === 1, "both attempts made");
    await server.app.close();
    const { deliveries, inOutboxes } = await leftBehind(server);
    t.is(deliveries.length, 1, "the answered delivery, stored with its event");
    t.like(deliveries[0], { status: "succeeded" });
    t.is(inOutboxes, 1, "the event waits in its outbox for the other endpoint");

    const received: string[] = [];
    const restarted = await startService({
      dataDir: server.dataDir,
      sendWebhook: async (request) => {
        received.push(new URL(request.url).pathname);
        return { statusCode: 200, durationMs: 1, error: null };
      },
      env: { WEBHOOK_ALLOW_PRIVATE: "true" },
    });
    cleanups.push(() => restarted.stop());
    await eventually("both deliveries succeeded after the restart", async () => {
      const all = await deliveriesIn(restarted.app.store.system);
      return all.length === 2 && all.every((delivery) => delivery.status === "succeeded");
    });
    await eventually("the outbox emptied", async () => {
      const waiting = await restarted.app.store.system.customers
        .find({ outboxPending: true })
        .toArray();
      return waiting.length === 0;
    });
    t.deepEqual(received, ["/hangs"], "the answered endpoint is not sent the event again");
  } finally {
    await server.stop({ keepData: true });
    for (const cleanup of cleanups) await cleanup();
  }
});

test("idle delivery workers ask the store once per poll, not once each", async (t) => {
  const server = await startService({ env: { METRICS_TOKEN: "drain-metrics" } });
  try {
    const claims = async () => {
      const text = await (
        await fetch(`${server.baseUrl}/metrics`, {
          headers: { authorization: "Bearer drain-metrics" },
        })
      ).text();
      const line =
        /store_operation_duration_seconds_count\{collection="deliveries",operation="findOneAndUpdate"\} (\d+)/.exec(
          text,
        );
      return Number(line?.[1] ?? 0);
    };
    // Past the start, where each worker claims once, and its first poll.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const before = await claims();
    // Two polls (a second apart) with the default workers (128) idle.
    await new Promise((resolve) => setTimeout(resolve, 2200));
    const claimed = (await claims()) - before;
    t.true(claimed >= 1, `the store is still polled (${claimed} claims)`);
    // Each of 128 workers claimed at each poll before: 256.
    t.true(claimed <= 6, `${claimed} claims in two polls`);
  } finally {
    await server.stop();
  }
});
