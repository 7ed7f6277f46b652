import test from "ava";
import type { WebhookResponse, WebhookSender } from "../../src/delivery/sender.js";
import { openStore } from "../../src/store/store.js";
import { keys, rest } from "../helpers/server.js";
import { eventually } from "../helpers/wait.js";
import { isRefused, type OperationsServer, startService, waitUntil } from "./service.js";

/**
 * Webhook workers on close: an attempt in flight finishes within
 * SHUTDOWN_GRACE and is recorded; one still running after it is aborted and
 * its lease released (due again at once, and no failure held against the
 * endpoint), before the store closes.
 */

/** A sender that answers 200 when `answer` is called, or gives up when aborted. */
function createSlowEndpoint() {
  let attempts = 0;
  let answer = () => {};
  const answered = new Promise<void>((resolve) => {
    answer = resolve;
  });
  const send: WebhookSender = (request) => {
    attempts++;
    return new Promise<WebhookResponse>((resolve) => {
      void answered.then(() => resolve({ statusCode: 200, durationMs: 1, error: null }));
      request.signal?.addEventListener("abort", () =>
        resolve({ statusCode: null, durationMs: 1, error: "aborted" }),
      );
    });
  };
  return {
    send,
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

/** The deliveries and endpoints as the closed service left them. */
async function leftBehind(server: OperationsServer) {
  const store = await openStore(server.config.store);
  try {
    return {
      deliveries: await store.system.deliveries.find({}).toArray(),
      webhooks: await store.system.webhooks.find({}).toArray(),
    };
  } finally {
    await store.close();
  }
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

test("an attempt still running after SHUTDOWN_GRACE is aborted and its lease released", async (t) => {
  const endpoint = createSlowEndpoint();
  const server = await startService({
    sendWebhook: endpoint.send,
    // A recorded failure would wait an hour for its retry, an expired lease 40 s.
    env: {
      SHUTDOWN_GRACE: "300ms",
      WEBHOOK_ALLOW_PRIVATE: "true",
      WEBHOOK_RETRY_SCHEDULE: "0s,1h",
      WEBHOOK_TIMEOUT: "10s",
    },
  });
  try {
    await queueOneDelivery(server);
    await endpoint.untilAttempted();
    const started = performance.now();
    await server.app.close();
    // Ended by SHUTDOWN_GRACE: the attempt would otherwise run until the
    // endpoint answers (never) or WEBHOOK_TIMEOUT (10 s) and be recorded.
    t.true(performance.now() - started < 10_000, "aborted at SHUTDOWN_GRACE");
    const { deliveries, webhooks } = await leftBehind(server);
    t.is(deliveries.length, 1);
    const [delivery] = deliveries;
    t.like(delivery, { status: "pending", leaseOwner: null, attempts: [], scheduleAttempts: 0 });
    t.is(delivery?.leaseUntil.getTime(), 0, "due again at once");
    t.true((delivery?.nextAttemptAt?.getTime() ?? Infinity) <= Date.now());
    t.is(webhooks[0]?.health.consecutiveFailures, 0, "no failure held against the endpoint");
  } finally {
    endpoint.answer();
    await server.stop();
  }
});

test("deliveries handed to this instance's workers but never started are released on close", async (t) => {
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
  try {
    await queueOneDelivery(server);
    await endpoint.untilAttempted();
    for (const externalUserId of ["waiting-1", "waiting-2"]) {
      await rest(server, "POST", "/customers/identify", {
        key: keys.public,
        body: { externalUserId, name: externalUserId, environment: "test" },
      });
    }
    // Each is leased to this instance as the relay queues it.
    await eventually("three leased deliveries", async () => {
      const queued = await server.app.store.system.deliveries.find({}).toArray();
      return queued.length === 3 && queued.every((delivery) => delivery.leaseOwner !== null);
    });
    await server.app.close();
    const { deliveries } = await leftBehind(server);
    t.is(deliveries.length, 3);
    for (const delivery of deliveries) {
      t.like(delivery, { status: "pending", leaseOwner: null, attempts: [] });
      t.is(delivery.leaseUntil.getTime(), 0, "due again at once");
    }
  } finally {
    endpoint.answer();
    await server.stop();
  }
});
