import { randomBytes } from "node:crypto";
import type { ExecutionContext } from "ava";
import { createDispatcher } from "../../src/delivery/dispatcher.js";
import type { CatchUpPace } from "../../src/domain/webhook-delivery.js";
import { generateWebhookSecret } from "../../src/domain/webhook-secret.js";
import {
  bringForwardWaitingDeliveries,
  claimDueDelivery,
  findDeliveries,
  queueDelivery,
  recordAttempt,
  requeueDelivery,
  unleased,
} from "../../src/store/deliveries.js";
import type { DeliveryDoc, EventDoc, WebhookDoc } from "../../src/store/documents.js";
import { createSecretBox } from "../../src/store/secret-box.js";
import { queryPlansOf, type Store } from "../../src/store/store.js";
import { healthyWebhook } from "../../src/store/webhooks.js";
import { storeTest as declareStoreTest, engineNames } from "../helpers/engines.js";

/**
 * Bringing an endpoint's waiting deliveries forward once it answers again
 * (`bringForwardWaitingDeliveries`), on each engine: which deliveries, in
 * which order, at which pace, and that claims stay exclusive and attempts
 * counted.
 */

const tenant = { organizationId: "org_1", applicationId: "app_1" };
const now = new Date("2026-01-02T03:04:05.000Z");
const at = (ms: number) => new Date(now.getTime() + ms);
const minutes = 60_000;

/** Ten a second, 300 ms ahead: three slots per step, 100 ms apart. */
const pace: CatchUpPace = { perSecond: 10, aheadMs: 300 };

/** A delivery to `webhookId` that failed twice and waits five minutes for its third attempt. */
function waiting(id: string, createdAt: Date, fields: Partial<DeliveryDoc> = {}): DeliveryDoc {
  return {
    _id: id,
    ...tenant,
    webhookId: "whk_1",
    eventId: `evt_${id}`,
    eventType: "customer.created",
    status: "pending",
    attempts: [
      { attemptedAt: createdAt, statusCode: 503, durationMs: 1, error: "HTTP 503" },
      { attemptedAt: at(-1000), statusCode: 503, durationMs: 1, error: "HTTP 503" },
    ],
    scheduleAttempts: 2,
    nextAttemptAt: at(5 * minutes),
    leaseUntil: unleased,
    leaseOwner: null,
    createdAt,
    updatedAt: at(-1000),
    ...fields,
  };
}

async function dueTimes(store: Store): Promise<Record<string, number | null>> {
  const docs = await store.system.deliveries.find({}).toArray();
  return Object.fromEntries(
    docs
      .sort((a, b) => a._id.localeCompare(b._id))
      .map((doc) => [
        doc._id,
        doc.nextAttemptAt ? doc.nextAttemptAt.getTime() - now.getTime() : null,
      ]),
  );
}

const lease = (from: Date) => ({ now: from, until: new Date(from.getTime() + 60_000) });

for (const engine of engineNames) {
  const storeTest = (title: string, body: (t: ExecutionContext, store: Store) => Promise<void>) =>
    declareStoreTest(engine, title, body);

  storeTest(
    "the waiting deliveries of the endpoint alone, oldest event first, at the pace",
    async (t, store) => {
      const deliveries = store.system.deliveries;
      // Inserted newest first, so that the order comes from their age, not
      // from storage; whd_b's event came first, though whd_a was queued first.
      await deliveries.insertOne(waiting("whd_c", at(-30_000), { eventId: "evt_3" }));
      await deliveries.insertOne(waiting("whd_b", at(-40_000), { eventId: "evt_1" }));
      await deliveries.insertOne(waiting("whd_a", at(-50_000), { eventId: "evt_2" }));
      await deliveries.insertOne(
        waiting("whd_other_endpoint", at(-60_000), { webhookId: "whk_2" }),
      );
      await deliveries.insertOne(
        waiting("whd_done", at(-60_000), { status: "succeeded", nextAttemptAt: null }),
      );
      await deliveries.insertOne(waiting("whd_due", at(-60_000), { nextAttemptAt: at(-10) }));
      await deliveries.insertOne(
        waiting("whd_leased", at(-60_000), {
          leaseUntil: lease(now).until,
          leaseOwner: "wkr_busy",
        }),
      );

      t.is(await bringForwardWaitingDeliveries(store.system, "whk_1", now, pace), 3);
      t.deepEqual(await dueTimes(store), {
        whd_a: 100,
        whd_b: 0,
        whd_c: 200,
        whd_done: null,
        whd_due: -10,
        whd_leased: 5 * minutes,
        whd_other_endpoint: 5 * minutes,
      });
      const broughtForward = await deliveries.findOne({ _id: "whd_b" });
      t.deepEqual(broughtForward?.broughtForwardTo, at(0), "marked with its slot");
      t.is(broughtForward?.scheduleAttempts, 2, "its attempts are untouched");

      t.is(
        await bringForwardWaitingDeliveries(store.system, "whk_1", now, pace),
        0,
        "a second step at once has nothing left to do",
      );
      t.deepEqual((await dueTimes(store)).whd_c, 200);
    },
  );

  storeTest(
    "claims stay exclusive and come in order; later steps continue after the last slot",
    async (t, store) => {
      const deliveries = store.system.deliveries;
      for (let i = 1; i <= 7; i++) {
        await deliveries.insertOne(waiting(`whd_${i}`, at(-100_000 + i * 1000)));
      }
      t.is(await bringForwardWaitingDeliveries(store.system, "whk_1", now, pace), 3);

      // Two workers race at each slot: one claim each time, oldest first.
      const claimed: string[] = [];
      for (const slot of [at(0), at(100)]) {
        const claims = await Promise.all(
          ["wkr_a", "wkr_b", "wkr_a", "wkr_b"].map((owner) =>
            claimDueDelivery(store.system, slot, owner, lease(slot)),
          ),
        );
        const won = claims.filter((claim) => claim !== null);
        t.is(won.length, 1, `one claim at +${slot.getTime() - now.getTime()} ms`);
        claimed.push(won[0]?._id ?? "");
      }
      t.deepEqual(claimed, ["whd_1", "whd_2"]);

      // At +150 ms, whd_3 still holds +200: the next two slots follow it.
      t.is(await bringForwardWaitingDeliveries(store.system, "whk_1", at(150), pace), 2);
      const times = await dueTimes(store);
      t.like(times, { whd_3: 200, whd_4: 300, whd_5: 400, whd_6: 5 * minutes, whd_7: 5 * minutes });
    },
  );

  storeTest(
    "one brought forward that fails again keeps to its schedule, counted, until redelivered",
    async (t, store) => {
      const deliveries = store.system.deliveries;
      await deliveries.insertOne(waiting("whd_refused", at(-20_000)));
      await bringForwardWaitingDeliveries(store.system, "whk_1", now, pace);
      const claimed = await claimDueDelivery(store.system, now, "wkr_a", lease(now));
      t.is(claimed?._id, "whd_refused");
      if (!claimed) return;
      // What the dispatcher records for a failed third attempt: the fourth on the schedule.
      await recordAttempt(store.system, claimed, "wkr_a", {
        attempt: { attemptedAt: at(5), statusCode: 400, durationMs: 1, error: "HTTP 400" },
        status: "pending",
        nextAttemptAt: at(30 * minutes),
      });
      const failed = await deliveries.findOne({ _id: "whd_refused" });
      t.is(failed?.scheduleAttempts, 3);
      t.is(failed?.attempts.length, 3);

      t.is(
        await bringForwardWaitingDeliveries(store.system, "whk_1", at(1000), pace),
        0,
        "the endpoint answering others again does not bring it forward a second time",
      );
      t.deepEqual(
        (await deliveries.findOne({ _id: "whd_refused" }))?.nextAttemptAt,
        at(30 * minutes),
      );

      if (!failed) return;
      const requeued = await requeueDelivery(store.system, tenant, failed, at(2000));
      t.like(requeued, { scheduleAttempts: 0, broughtForwardTo: null });
    },
  );

  storeTest("an attempt recorded during a step is not overwritten", async (t, store) => {
    const deliveries = store.system.deliveries;
    await deliveries.insertOne(waiting("whd_raced", at(-20_000)));
    // The step read the delivery at its old due time; meanwhile an attempt moved it.
    const { updateOne } = deliveries;
    let raced = false;
    const racing = Object.create(deliveries, {
      updateOne: {
        value: async (...args: Parameters<typeof updateOne>) => {
          if (!raced) {
            raced = true;
            await deliveries.updateOne(
              { _id: "whd_raced" },
              { $set: { nextAttemptAt: at(30 * minutes), scheduleAttempts: 3 } },
            );
          }
          return updateOne.apply(deliveries, args);
        },
      },
    });
    const db = Object.create(store.system, { deliveries: { value: racing } });
    t.is(await bringForwardWaitingDeliveries(db, "whk_1", now, pace), 0);
    t.deepEqual((await deliveries.findOne({ _id: "whd_raced" }))?.nextAttemptAt, at(30 * minutes));
  });

  storeTest(
    "the dispatcher: a success catches up, a relapse goes back to the schedule, and the endpoint is still disabled",
    async (t, store) => {
      const db = store.system;
      const secretBox = createSecretBox(randomBytes(32));
      let clock = now;
      let up = false;
      const sent: string[] = [];
      const dispatcher = createDispatcher({
        store,
        clock: () => clock,
        config: {
          secretKey: undefined,
          allowPrivate: true,
          retrySchedule: [0, 1000, 5 * minutes, 30 * minutes],
          timeoutMs: 1000,
          disableAfterMs: minutes,
          concurrency: 1,
        },
        secretBox,
        send: async (request) => {
          sent.push(request.headers["webhook-id"] ?? "");
          return up
            ? { statusCode: 204, durationMs: 1, error: null }
            : { statusCode: 503, durationMs: 1, error: "HTTP 503" };
        },
        log: (error) => {
          throw error;
        },
      });
      const webhook: WebhookDoc = {
        _id: "whk_1",
        ...tenant,
        url: "http://127.0.0.1:9/hooks",
        description: null,
        eventTypes: [],
        enabled: true,
        environment: null,
        secretSealed: secretBox.seal(generateWebhookSecret()),
        previousSecretSealed: null,
        previousSecretExpiresAt: null,
        health: healthyWebhook(),
        createdAt: now,
        updatedAt: now,
        deletedAt: null,
      };
      await db.webhooks.insertOne(webhook);
      const queue = async (n: number) => {
        const event: EventDoc = {
          _id: `evt_${n}`,
          ...tenant,
          environment: "test",
          type: "customer.created",
          payload: JSON.stringify({ type: "customer.created", data: { n } }),
          createdAt: clock,
        };
        await db.events.insertOne(event);
        await queueDelivery(db, event, webhook, clock);
      };
      /** Attempts every delivery due at `ms` after the start; how many. */
      const deliverAt = async (ms: number) => {
        clock = at(ms);
        let attempted = 0;
        while (await dispatcher.deliverOne()) attempted++;
        return attempted;
      };
      const delivery = async (n: number) => {
        const found = await db.deliveries.findOne({ eventId: `evt_${n}` });
        if (!found) throw new Error(`no delivery of evt_${n}`);
        return found;
      };

      for (const n of [1, 2, 3, 4]) await queue(n);
      t.is(await deliverAt(0), 4);
      t.is(await deliverAt(1200), 4, "the second attempts, about 1 s on");
      t.is(await deliverAt(2000), 0, "the third waits 5 min");

      up = true;
      await queue(5);
      t.is(await deliverAt(2000), 2, "evt_5, then evt_1 at once");
      t.deepEqual(sent.slice(-2), ["evt_5", "evt_1"]);
      t.like(await delivery(1), { status: "succeeded", scheduleAttempts: 3 });

      // Down again before the others' turns (20 ms apart).
      up = false;
      for (const [ms, n] of [
        [2020, 2],
        [2040, 3],
        [2060, 4],
      ] as const) {
        t.is(await deliverAt(ms), 1, `evt_${n} at +${ms} ms`);
        t.is(sent.at(-1), `evt_${n}`);
        const failed = await delivery(n);
        t.like(failed, { status: "pending", scheduleAttempts: 3 }, "its third attempt counted");
        const wait = (failed.nextAttemptAt?.getTime() ?? 0) - at(ms).getTime();
        t.true(wait >= 27 * minutes && wait <= 33 * minutes, `the 30 min step: ${wait} ms`);
      }
      t.is(await deliverAt(3000), 0, "nothing brought forward without a success");

      // Still failing a minute after the relapse began: disabled, as before.
      await queue(6);
      t.is(await deliverAt(2020 + minutes), 1);
      const disabled = await db.webhooks.findOne({ _id: "whk_1" });
      t.false(disabled?.enabled);
      t.deepEqual(disabled?.health.failingSince, at(2020));
      t.is(await deliverAt(40 * minutes), 4, "the waiting deliveries, skipped");
      t.is(sent.length, 14, "none of them sent");
      t.like(await delivery(2), { status: "skipped", scheduleAttempts: 3 });
    },
  );

  if (engine === "embedded") {
    storeTest("the step's query is served by the endpoint's index", async (t, store) => {
      await store.system.deliveries.insertOne(waiting("whd_1", at(-20_000)));
      await bringForwardWaitingDeliveries(store.system, "whk_1", now, pace);
      const [query] = queryPlansOf(store).filter(
        (plan) => plan.collection === "deliveries" && "$or" in plan.filter,
      );
      t.truthy(query, "the step's query was run");
      t.deepEqual(
        query?.plan.filter((step) => /^SCAN /.test(step)),
        [],
        query?.plan.join("; "),
      );
      t.true(
        query?.plan.some((step) => step.includes("deliveries_pending_webhookId_1_createdAt")),
        query?.plan.join("; "),
      );
    });

    storeTest(
      "an endpoint's failed deliveries are listed from the index of failed ones, not by walking its succeeded ones",
      async (t, store) => {
        await store.system.deliveries.insertOne(
          waiting("whd_f", at(-20_000), { status: "failed", nextAttemptAt: null }),
        );
        await store.system.deliveries.insertOne(
          waiting("whd_s", at(-10_000), { status: "succeeded", nextAttemptAt: null }),
        );
        const page = { limit: 10, offset: 0 };
        const failed = await findDeliveries(store.system, tenant, "whk_1", "failed", page);
        t.deepEqual(
          failed.docs.map((doc) => doc._id),
          ["whd_f"],
        );
        // One statement for every status: SQLite plans it again for each value bound.
        const succeeded = await findDeliveries(store.system, tenant, "whk_1", "succeeded", page);
        t.deepEqual(
          succeeded.docs.map((doc) => doc._id),
          ["whd_s"],
        );
        const again = await findDeliveries(store.system, tenant, "whk_1", "failed", page);
        t.deepEqual(
          again.docs.map((doc) => doc._id),
          ["whd_f"],
        );
        const [query] = queryPlansOf(store).filter(
          (plan) => plan.collection === "deliveries" && plan.filter.status === "failed",
        );
        t.true(
          query?.plan.some((step) =>
            step.includes("INDEX deliveries_failed_webhookId_1_createdAt"),
          ),
          query?.plan.join("; "),
        );
      },
    );
  }
}
