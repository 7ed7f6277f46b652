import { rmSync } from "node:fs";
import test from "ava";
import { MongoClient } from "mongodb";
import { loadConfig } from "../../src/config.js";
import type { Collections } from "../../src/store/collection.js";
import type { DeliveryDoc, DeliveryStatusName, EventDoc } from "../../src/store/documents.js";
import { removeExpired } from "../../src/store/retention.js";
import { openStore, queryPlansOf } from "../../src/store/store.js";
import {
  dropDatabase,
  engineNames,
  freshDatabaseName,
  mongodbUri,
  storeTest,
} from "../helpers/engines.js";
import { startReceiver } from "../helpers/receiver.js";
import { deliveriesIn } from "../helpers/relay.js";
import { type Json, keys, rest, startServer, type TestServer } from "../helpers/server.js";
import { eventually } from "../helpers/wait.js";

/**
 * Retention: events and finished deliveries older than EVENT_RETENTION go
 * (the embedded engine's sweep; MongoDB's TTL indexes), recent ones and
 * deliveries still pending stay, whatever their age.
 */

const day = 86_400_000;
const now = new Date("2026-03-01T00:00:00.000Z");
const daysBefore = (days: number, from = now) => new Date(from.getTime() - days * day);
const daysAfter = (days: number, from: Date) => new Date(from.getTime() + days * day);

function event(id: string, createdAt: Date): EventDoc {
  return {
    _id: id,
    organizationId: "org_1",
    applicationId: "app_1",
    environment: "production",
    type: "customer.created",
    payload: "{}",
    createdAt,
  };
}

function delivery(
  id: string,
  createdAt: Date,
  status: DeliveryStatusName,
  nextAttemptAt: Date | null,
  owner: { applicationId: string; organizationId: string; webhookId: string } = {
    organizationId: "org_1",
    applicationId: "app_1",
    webhookId: "wh_1",
  },
): DeliveryDoc {
  return {
    _id: id,
    ...owner,
    eventId: `evt_${id}`,
    eventType: "customer.created",
    status,
    attempts: [],
    scheduleAttempts: 0,
    nextAttemptAt,
    leaseUntil: new Date(0),
    leaseOwner: null,
    createdAt,
    updatedAt: createdAt,
  };
}

async function idsIn(collection: Collections["events"] | Collections["deliveries"]) {
  const docs = await (collection as Collections["events"]).find({}).toArray();
  return docs.map((doc) => doc._id).sort();
}

for (const engine of engineNames) {
  storeTest(
    engine,
    "removeExpired removes old events and finished deliveries in batches, never a pending one",
    async (t, store) => {
      const db = store.system;
      for (const age of [31, 32, 33, 34, 35])
        await db.events.insertOne(event(`evt_old_${age}`, daysBefore(age)));
      // Exactly as old as the retention: not older, so kept.
      await db.events.insertOne(event("evt_edge", daysBefore(30)));
      await db.events.insertOne(event("evt_new", daysBefore(1)));
      await db.deliveries.insertMany([
        delivery("whd_succeeded_old", daysBefore(31), "succeeded", null),
        delivery("whd_failed_old", daysBefore(40), "failed", null),
        delivery("whd_skipped_old", daysBefore(31), "skipped", null),
        delivery("whd_due_old", daysBefore(31), "pending", daysBefore(1)),
        delivery("whd_retrying_old", daysBefore(45), "pending", new Date(now.getTime() + day)),
        delivery("whd_succeeded_new", daysBefore(1), "succeeded", null),
      ]);

      const removed = await removeExpired(db, now, 30 * day, { batchSize: 2 });

      t.deepEqual(removed, { events: 5, deliveries: 3 });
      t.deepEqual(await idsIn(db.events), ["evt_edge", "evt_new"]);
      t.deepEqual(await idsIn(db.deliveries), [
        "whd_due_old",
        "whd_retrying_old",
        "whd_succeeded_new",
      ]);
      // The endpoint's delivery total (kept by the embedded engine) follows.
      t.is(await db.deliveries.countDocuments({ applicationId: "app_1", webhookId: "wh_1" }), 3);
      t.deepEqual(await removeExpired(db, now, 30 * day), { events: 0, deliveries: 0 });

      if (engine === "embedded") {
        // Every retention query, the batch bounds included, walks the createdAt index.
        const retentionPlans = queryPlansOf(store).filter(
          (plan) =>
            (plan.collection === "events" || plan.collection === "deliveries") &&
            "createdAt" in plan.filter,
        );
        t.true(retentionPlans.length >= 4, `${retentionPlans.length} retention queries`);
        for (const plan of retentionPlans) {
          t.false(
            plan.plan.some((step) => /^SCAN /.test(step)),
            `${plan.sql} -> ${plan.plan.join("; ")}`,
          );
          t.true(
            plan.plan.some((step) => step.includes(`INDEX ${plan.collection}_createdAt_1 `)),
            `${plan.sql} -> ${plan.plan.join("; ")}`,
          );
        }
      }
    },
  );
}

test("the service sweeps the embedded store by its clock: old events and deliveries go, recent and pending ones stay", async (t) => {
  const receiver = await startReceiver();
  const start = new Date("2026-03-01T00:00:00.000Z");
  let current = start;
  const clock = () => current;
  const env = { WEBHOOK_ALLOW_PRIVATE: "true", EVENT_RETENTION: "7d" };
  const first = await startServer({ clock, env });
  let firstStopped = false;
  let second: TestServer | undefined;
  try {
    // Through the API, at `start`: an endpoint, an event and its delivery.
    const created = await rest(first, "POST", "/webhooks", {
      key: keys.secret,
      body: { url: receiver.url, environment: "test" },
    });
    const webhook = created.body.webhook as Json;
    await rest(first, "POST", "/customers/identify", {
      key: keys.public,
      body: { externalUserId: "retained", name: "R", environment: "test" },
    });
    await receiver.waitFor((received) => received.length >= 1);
    const db = first.app.store.system;
    await eventually("the delivery recorded as succeeded", async () => {
      const [done] = await deliveriesIn(db, webhook.id as string);
      return done?.status === "succeeded";
    });
    const [oldEvent] = await db.events.find({}).toArray();
    t.truthy(oldEvent);
    const endpoint = await db.webhooks.findOne({ _id: webhook.id });
    const owner = {
      organizationId: endpoint?.organizationId ?? "",
      applicationId: endpoint?.applicationId ?? "",
      webhookId: webhook.id as string,
    };
    // A delivery as old, still waiting for a retry past the next clock; and
    // a recent event and finished delivery.
    await db.deliveries.insertOne(
      delivery("whd_retrying", start, "pending", daysAfter(20, start), owner),
    );
    await db.events.insertOne({
      ...event("evt_recent", daysAfter(5, start)),
      organizationId: owner.organizationId,
      applicationId: owner.applicationId,
    });
    await db.deliveries.insertOne(
      delivery("whd_recent", daysAfter(5, start), "succeeded", null, owner),
    );
    await first.stop({ keepData: true });
    firstStopped = true;

    // Eight days on, past the 7-day retention for what happened at `start`.
    current = daysAfter(8, start);
    second = await startServer({ dataDir: first.dataDir, clock, env });
    const after = second.app.store.system;
    // The sweep runs at start; it is done once both collections are down to size.
    await eventually("the start's sweep", async () => {
      const [events, deliveries] = [await idsIn(after.events), await idsIn(after.deliveries)];
      return events.length === 1 && deliveries.length === 2;
    }).catch(() => {}); // the assertions below say what is left
    t.deepEqual(await idsIn(after.events), ["evt_recent"]);
    t.deepEqual(await idsIn(after.deliveries), ["whd_recent", "whd_retrying"]);
    const listed = await rest(second, "GET", `/webhooks/${webhook.id}/deliveries`, {
      key: keys.secret,
    });
    t.is(listed.body.total, 2);
  } finally {
    if (!firstStopped) await first.stop();
    else if (second) await second.stop();
    else rmSync(first.dataDir, { recursive: true, force: true });
    await receiver.close();
  }
});

test("EVENT_RETENTION is a duration, 30 days unless set, longer than retries can take", (t) => {
  t.is(loadConfig({}).eventRetentionMs, 30 * day);
  t.is(loadConfig({ EVENT_RETENTION: "45d" }).eventRetentionMs, 45 * day);
  t.throws(() => loadConfig({ EVENT_RETENTION: "a month" }), { message: /^EVENT_RETENTION/ });
  t.throws(() => loadConfig({ EVENT_RETENTION: "2h" }), {
    message: /EVENT_RETENTION must be longer than a delivery's retries can take \(1822m/,
  });
  t.is(
    loadConfig({ EVENT_RETENTION: "2h", WEBHOOK_RETRY_SCHEDULE: "0s,1m" }).eventRetentionMs,
    2 * 3_600_000,
  );
});

if (engineNames.includes("mongodb")) {
  test("mongodb: TTL indexes expire events and finished deliveries after EVENT_RETENTION, changed on restart", async (t) => {
    const mongodbDb = freshDatabaseName("retention");
    const config = { mongodbUri: mongodbUri(), mongodbDb };
    const client = await MongoClient.connect(mongodbUri());
    const ttlIndexes = async () =>
      Object.fromEntries(
        await Promise.all(
          ["events", "deliveries"].map(async (name) => {
            const indexes = await client.db(mongodbDb).collection(name).indexes();
            const ttl = indexes.find((index) => index.expireAfterSeconds !== undefined);
            return [
              name,
              ttl && {
                key: ttl.key,
                expireAfterSeconds: ttl.expireAfterSeconds,
                partialFilterExpression: ttl.partialFilterExpression,
              },
            ];
          }),
        ),
      );
    try {
      const store = await openStore(config, { eventRetentionMs: 7 * day });
      await store.close();
      t.deepEqual(await ttlIndexes(), {
        events: {
          key: { createdAt: 1 },
          expireAfterSeconds: 7 * 86_400,
          partialFilterExpression: undefined,
        },
        deliveries: {
          key: { createdAt: 1 },
          expireAfterSeconds: 7 * 86_400,
          partialFilterExpression: { nextAttemptAt: { $type: "null" } },
        },
      });
      // A new EVENT_RETENTION changes the existing indexes instead of failing the start.
      const again = await openStore(config, { eventRetentionMs: 45 * day });
      await again.close();
      const changed = await ttlIndexes();
      t.is(changed.events?.expireAfterSeconds, 45 * 86_400);
      t.is(changed.deliveries?.expireAfterSeconds, 45 * 86_400);
    } finally {
      await client.close();
      await dropDatabase(mongodbDb);
    }
  });
}
