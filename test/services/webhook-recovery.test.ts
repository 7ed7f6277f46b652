import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import test from "ava";
import type { DeliveryDoc } from "../../src/store/documents.js";
import { findEvent } from "../../src/store/events.js";
import { deliveriesOf } from "../helpers/relay.js";
import { keys, rest, startServer, type TestServer } from "../helpers/server.js";
import { eventually } from "../helpers/wait.js";

/**
 * A receiver that comes back after an outage gets the events that failed
 * meanwhile within seconds of answering again, oldest first, instead of at
 * their next retry (5 min away on the default schedule). Each test runs
 * its own service and receiver.
 */

/** A request the receiver answered: when (performance.now()), for which customer, and how. */
interface Arrival {
  readonly at: number;
  readonly externalUserId: string;
  readonly status: number;
}

/**
 * A customer.created receiver on loopback that records each request's
 * arrival; stopped, its port refuses connections until it listens again.
 */
function createRecorder(answer: (externalUserId: string) => number) {
  const arrivals: Arrival[] = [];
  const server: Server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", () => {
      const at = performance.now();
      const { data } = JSON.parse(Buffer.concat(chunks).toString("utf8"));
      const status = answer(data.externalUserId);
      arrivals.push({ at, externalUserId: data.externalUserId, status });
      response.writeHead(status).end();
    });
  });
  return {
    arrivals,
    /** Listens on `port` (a free one when 0); resolves with it. */
    async listen(port = 0): Promise<number> {
      await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
      return (server.address() as AddressInfo).port;
    },
    async close(): Promise<void> {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
    /** The first 2xx each customer's event got. */
    firstSuccessOf(externalUserId: string): Arrival | undefined {
      return arrivals.find(
        (arrival) => arrival.externalUserId === externalUserId && arrival.status < 300,
      );
    },
  };
}

async function subscribe(server: TestServer, url: string): Promise<string> {
  const created = await rest(server, "POST", "/webhooks", {
    key: keys.secret,
    body: { url, environment: "test", eventTypes: ["customer.created"] },
  });
  if (created.status !== 201) throw new Error(JSON.stringify(created.body));
  return created.body.webhook.id;
}

async function identify(server: TestServer, externalUserId: string): Promise<void> {
  const identified = await rest(server, "POST", "/customers/identify", {
    key: keys.public,
    body: { externalUserId, name: externalUserId, environment: "test" },
  });
  if (identified.status !== 201) throw new Error(JSON.stringify(identified.body));
}

/** Resolves once each of `count` deliveries has failed twice and waits, released, for its third attempt. */
function waitingForThirdAttempt(server: TestServer, webhookId: string, count: number) {
  return eventually(
    `${count} deliveries waiting for their third attempt`,
    async () => {
      const deliveries = await deliveriesOf(server, webhookId);
      const waiting = deliveries.filter(
        (delivery) =>
          delivery.status === "pending" &&
          delivery.scheduleAttempts === 2 &&
          delivery.leaseOwner === null,
      );
      return waiting.length === count ? waiting : undefined;
    },
    { timeoutMs: 20_000, intervalMs: 50 },
  );
}

/** The customer whose customer.created event a delivery carries, read from the store. */
async function customerOf(server: TestServer, delivery: DeliveryDoc): Promise<string> {
  const event = await findEvent(server.app.store.system, delivery.eventId);
  return JSON.parse(event?.payload ?? "{}").data.externalUserId;
}

/**
 * Once each of the customers' deliveries has recorded its third attempt
 * (the one after the outage): the deliveries, in the order of
 * `externalUserIds`.
 */
async function thirdAttemptsRecorded(
  server: TestServer,
  webhookId: string,
  externalUserIds: readonly string[],
): Promise<DeliveryDoc[]> {
  return eventually("every third attempt recorded", async () => {
    const byCustomer = new Map<string, DeliveryDoc>();
    for (const delivery of await deliveriesOf(server, webhookId)) {
      byCustomer.set(await customerOf(server, delivery), delivery);
    }
    const deliveries = externalUserIds.map((id) => byCustomer.get(id));
    const recorded = deliveries.every((delivery) => delivery?.scheduleAttempts === 3);
    return recorded ? (deliveries as DeliveryDoc[]) : undefined;
  });
}

/**
 * When each delivery's third attempt was sent. The order they were sent in
 * is asserted, not the order they arrived in: a few are in flight at once,
 * so on a busy machine one that needed a new connection may land a moment
 * after the next.
 */
const thirdSentAt = (deliveries: readonly DeliveryDoc[]) =>
  deliveries.map((delivery) => delivery.attempts[2]?.attemptedAt.getTime() ?? Number.NaN);

/** Within how long of the first success every waiting event must have arrived. */
const catchUpBoundMs = 3_000;

test("back after answering 503 for 6 s, an endpoint gets its waiting events within seconds, oldest first", async (t) => {
  let up = false;
  const recorder = createRecorder(() => (up ? 204 : 503));
  const port = await recorder.listen();
  // The default schedule: the third attempt is 5 min after the second.
  const server = await startServer({ env: { WEBHOOK_ALLOW_PRIVATE: "true" } });
  try {
    const webhookId = await subscribe(server, `http://127.0.0.1:${port}/hooks`);
    const outage = ["outage-1", "outage-2", "outage-3", "outage-4"];
    for (const externalUserId of outage) await identify(server, externalUserId);
    // Failed at once, then again 5 s later.
    const waiting = await waitingForThirdAttempt(server, webhookId, outage.length);
    const fourMinutesOn = Date.now() + 4 * 60_000;
    t.true(waiting.every((delivery) => (delivery.nextAttemptAt?.getTime() ?? 0) > fourMinutesOn));

    up = true;
    const backAt = performance.now();
    // The first event after the receiver is back: its success starts the catch-up.
    await identify(server, "back");
    await eventually("every event delivered", () =>
      [...outage, "back"].every((id) => recorder.firstSuccessOf(id)),
    );

    const firstSuccess = Math.min(
      ...recorder.arrivals.filter((arrival) => arrival.status < 300).map((arrival) => arrival.at),
    );
    const caughtUp = outage.map((id) => recorder.firstSuccessOf(id)?.at ?? Number.NaN);
    const lastMs = Math.max(...caughtUp) - firstSuccess;
    t.log(
      `outage events delivered ${Math.round(lastMs)} ms after the first success (${Math.round(Math.max(...caughtUp) - backAt)} ms after the receiver was back)`,
    );
    t.true(lastMs <= catchUpBoundMs, `caught up ${lastMs} ms after the first success`);
    const deliveries = await thirdAttemptsRecorded(server, webhookId, outage);
    const sent = thirdSentAt(deliveries);
    t.deepEqual(
      [...sent].sort((a, b) => a - b),
      sent,
      "sent in the order their events happened",
    );
    for (const delivery of deliveries) {
      t.like(delivery, { status: "succeeded", scheduleAttempts: 3, nextAttemptAt: null });
      t.deepEqual(
        delivery.attempts.map((attempt) => attempt.statusCode),
        [503, 503, 204],
      );
    }
  } finally {
    await server.stop();
    await recorder.close();
  }
});

test("an endpoint refusing connections is caught up once it listens; one that fails again keeps to its schedule", async (t) => {
  const refusing = new Set(["refused-3", "refused-later"]);
  const recorder = createRecorder((externalUserId) => (refusing.has(externalUserId) ? 400 : 204));
  // A free port, left closed: connections are refused until the receiver listens on it.
  const port = await recorder.listen();
  await recorder.close();
  const server = await startServer({
    env: { WEBHOOK_ALLOW_PRIVATE: "true", WEBHOOK_RETRY_SCHEDULE: "0s,1s,5m,30m" },
  });
  try {
    const webhookId = await subscribe(server, `http://127.0.0.1:${port}/hooks`);
    const outage = ["refused-1", "refused-2", "refused-3", "refused-4", "refused-5"];
    for (const externalUserId of outage) await identify(server, externalUserId);
    const waiting = await waitingForThirdAttempt(server, webhookId, outage.length);
    t.regex(waiting[0]?.attempts[0]?.error ?? "", /refused the connection \(ECONNREFUSED\)/);

    await recorder.listen(port);
    await identify(server, "back");
    const delivered = outage.filter((id) => id !== "refused-3");
    await eventually(
      "every event answered",
      () =>
        [...delivered, "back"].every((id) => recorder.firstSuccessOf(id)) &&
        recorder.arrivals.some((arrival) => arrival.externalUserId === "refused-3"),
    );
    const firstSuccess = Math.min(
      ...recorder.arrivals.filter((arrival) => arrival.status < 300).map((arrival) => arrival.at),
    );
    const arrived = outage.map(
      (id) => recorder.arrivals.find((arrival) => arrival.externalUserId === id)?.at ?? Number.NaN,
    );
    const lastMs = Math.max(...arrived) - firstSuccess;
    t.log(`outage events delivered ${Math.round(lastMs)} ms after the first success`);
    t.true(lastMs <= catchUpBoundMs, `caught up ${lastMs} ms after the first success`);
    const deliveries = await thirdAttemptsRecorded(server, webhookId, outage);
    const sent = thirdSentAt(deliveries);
    t.deepEqual(
      [...sent].sort((a, b) => a - b),
      sent,
      "sent in the order their events happened",
    );

    // Refused again: its third attempt counted, its fourth 30 min on, as scheduled.
    const refused = deliveries[outage.indexOf("refused-3")];
    if (!refused) throw new Error("no delivery for refused-3");
    t.is(refused.status, "pending");
    t.deepEqual(
      refused.attempts.map((attempt) => attempt.statusCode),
      [null, null, 400],
    );
    const nextAttemptAt = refused.nextAttemptAt?.getTime() ?? 0;
    t.true(nextAttemptAt > Date.now() + 25 * 60_000, "due about 30 min on");

    // Another refused event waits for its 5 min step, then the endpoint
    // answers again: that catch-up brings the new one forward (sent a third
    // time at once), but not refused-3 a second time.
    await identify(server, "refused-later");
    await waitingForThirdAttempt(server, webhookId, 1);
    await identify(server, "again");
    await eventually("refused-later brought forward", () => {
      const sent = recorder.arrivals.filter(
        (arrival) => arrival.externalUserId === "refused-later",
      );
      return sent.length === 3;
    });
    // The step wrote every due time it gave before the first of them was sent.
    const after = (await deliveriesOf(server, webhookId)).find(
      (delivery) => delivery._id === refused._id,
    );
    t.is(after?.nextAttemptAt?.getTime(), nextAttemptAt);
    t.is(
      recorder.arrivals.filter((arrival) => arrival.externalUserId === "refused-3").length,
      1,
      "sent once since the endpoint came back",
    );
  } finally {
    await server.stop();
    await recorder.close().catch(() => {});
  }
});
