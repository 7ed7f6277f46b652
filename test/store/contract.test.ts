import type { ExecutionContext } from "ava";
import { newId } from "../../src/domain/ids.js";
import { upsertCustomer } from "../../src/store/customers.js";
import { claimDueDelivery, unleased } from "../../src/store/deliveries.js";
import { isDuplicateKeyError } from "../../src/store/errors.js";
import type { Store } from "../../src/store/store.js";
import { storeTest as declareStoreTest, engineNames } from "../helpers/engines.js";

/**
 * The storage contract: what the repositories rely on, run against the
 * embedded engine always and against MongoDB when MONGODB_URI is set
 * (each run in a fresh database that is dropped afterwards).
 */

const tenant = { organizationId: "org_1", applicationId: "app_1" };
const now = new Date("2026-01-02T03:04:05.000Z");

function customer(id: string, externalUserId: string, createdAt: Date) {
  return {
    _id: id,
    ...tenant,
    environment: "production" as const,
    externalUserId,
    email: null,
    emailNormalized: null,
    emailCanonical: null,
    name: externalUserId,
    referralCode: `CODE${id}`,
    customProperties: {},
    createdAt,
    updatedAt: createdAt,
    deletedAt: null,
  };
}

for (const engine of engineNames) {
  const storeTest = (title: string, body: (t: ExecutionContext, store: Store) => Promise<void>) =>
    declareStoreTest(engine, title, body);

  storeTest("insertOne, findOne, dates and nulls round-trip", async (t, store) => {
    await store.system.customers.insertOne(customer("c1", "u1", now));
    const found = await store.system.customers.findOne({ _id: "c1" });
    t.truthy(found);
    t.true(found?.createdAt instanceof Date);
    t.is(found?.createdAt.getTime(), now.getTime());
    t.is(found?.email, null);
    t.is(await store.system.customers.findOne({ _id: "missing" }), null);
  });

  storeTest("find sorts, skips, limits and projects; countDocuments counts", async (t, store) => {
    for (let i = 0; i < 5; i++) {
      await store.system.customers.insertOne(
        customer(`c${i}`, `u${i}`, new Date(now.getTime() + i * 1000)),
      );
    }
    const page = await store.system.customers
      .find({ applicationId: "app_1" }, { sort: { createdAt: -1, _id: -1 }, skip: 1, limit: 2 })
      .toArray();
    t.deepEqual(
      page.map((c) => c._id),
      ["c3", "c2"],
    );
    const projected = await store.system.customers
      .find({ _id: { $in: ["c1", "c4"] } }, { projection: { externalUserId: 1 } })
      .toArray();
    t.deepEqual(projected.map((c) => Object.keys(c).sort()).sort(), [
      ["_id", "externalUserId"],
      ["_id", "externalUserId"],
    ]);
    t.is(await store.system.customers.countDocuments({ _id: { $ne: "c0" } }), 4);
  });

  storeTest(
    "unique indexes raise a duplicate-key error the repositories recognise",
    async (t, store) => {
      await store.system.customers.insertOne(customer("c1", "same", now));
      const error = await t.throwsAsync(() =>
        store.system.customers.insertOne(customer("c2", "same", now)),
      );
      t.true(isDuplicateKeyError(error));
      t.is(await store.system.customers.countDocuments({}), 1);
    },
  );

  storeTest(
    "findOneAndUpdate upserts with $setOnInsert, dotted $set and $unset",
    async (t, store) => {
      const filter = {
        applicationId: "app_1",
        environment: "production" as const,
        externalUserId: "u",
      };
      const inserted = await store.system.customers.findOneAndUpdate(
        filter,
        {
          $set: { name: "First", updatedAt: now, "customProperties.plan": "pro" },
          $setOnInsert: { _id: "c1", createdAt: now, referralCode: "AAAA2222" },
        },
        { upsert: true, returnDocument: "after" },
      );
      t.like(inserted, { _id: "c1", name: "First", externalUserId: "u", referralCode: "AAAA2222" });
      t.deepEqual(inserted?.customProperties, { plan: "pro" });
      const updated = await store.system.customers.findOneAndUpdate(
        filter,
        {
          $set: { name: "Second", "customProperties.seats": 3 },
          $unset: { "customProperties.plan": "" },
          $setOnInsert: { _id: "c2", referralCode: "BBBB3333" },
        },
        { upsert: true, returnDocument: "after" },
      );
      t.like(updated, { _id: "c1", name: "Second", referralCode: "AAAA2222" });
      t.deepEqual(updated?.customProperties, { seats: 3 });
      t.is(
        await store.system.customers.findOneAndUpdate(
          { _id: "none" },
          { $set: { name: "x" } },
          { returnDocument: "after" },
        ),
        null,
      );
    },
  );

  storeTest("updateOne, updateMany and deleteOne report what they did", async (t, store) => {
    for (const id of ["c1", "c2", "c3"])
      await store.system.customers.insertOne(customer(id, id, now));
    const one = await store.system.customers.updateOne({ _id: "c1" }, { $set: { name: "one" } });
    t.is(one.matchedCount, 1);
    const many = await store.system.customers.updateMany(
      { _id: { $in: ["c2", "c3"] } },
      { $set: { name: "many" } },
    );
    t.is(many.modifiedCount, 2);
    t.is(await store.system.customers.countDocuments({ name: "many" }), 2);
    const deleted = await store.system.customers.deleteOne({ _id: "c3" });
    t.is(deleted.deletedCount, 1);
    t.is(await store.system.customers.countDocuments({}), 2);
  });

  storeTest(
    "100 concurrent identifies of one user leave one customer with one code",
    async (t, store) => {
      const results = await Promise.all(
        Array.from({ length: 100 }, () =>
          upsertCustomer(
            store.system,
            tenant,
            { environment: "production", externalUserId: "racer", name: "R" },
            { newId: newId("cus", now), at: now, outbox: [] },
          ),
        ),
      );
      t.is(new Set(results.map((r) => r._id)).size, 1);
      t.is(new Set(results.map((r) => r.referralCode)).size, 1);
      t.is(await store.system.customers.countDocuments({ externalUserId: "racer" }), 1);
    },
  );

  storeTest(
    "a referral code collision is retried with a new code, never surfaced",
    async (t, store) => {
      await store.system.customers.insertOne({
        ...customer("c1", "first", now),
        referralCode: "TAKEN234",
      });
      const drawn = ["TAKEN234", "TAKEN234", "FRESH234"];
      const created = await upsertCustomer(
        store.system,
        tenant,
        { environment: "production", externalUserId: "second", name: "S" },
        { newId: newId("cus", now), at: now, outbox: [] },
        () => drawn.shift() as string,
      );
      t.is(created.referralCode, "FRESH234");
      t.is(drawn.length, 0, "drew until a free code came up");
      t.is(await store.system.customers.countDocuments({ externalUserId: "second" }), 1);
    },
  );

  storeTest(
    "an identify that may write a profile only on creation creates one whole, and never overwrites one",
    async (t, store) => {
      const input = {
        environment: "production" as const,
        externalUserId: "guarded",
        name: "First",
        email: "first@example.com",
        customProperties: { plan: "pro" },
      };
      const write = { newId: newId("cus", now), at: now, outbox: [], profileOnCreateOnly: true };
      const created = await upsertCustomer(store.system, tenant, input, write);
      t.like(created, {
        name: "First",
        email: "first@example.com",
        customProperties: { plan: "pro" },
      });
      const later = await upsertCustomer(
        store.system,
        tenant,
        {
          ...input,
          name: "Mallory",
          email: "mallory@example.com",
          customProperties: { plan: null },
        },
        { ...write, newId: newId("cus", now) },
      );
      t.is(later._id, created._id);
      t.like(later, {
        name: "First",
        email: "first@example.com",
        customProperties: { plan: "pro" },
      });
    },
  );

  storeTest("two workers racing for due deliveries never claim the same one", async (t, store) => {
    const due = new Date(now.getTime() - 1000);
    for (let i = 0; i < 20; i++) {
      await store.system.deliveries.insertOne({
        _id: `whd_${i}`,
        ...tenant,
        webhookId: "whk_1",
        eventId: `evt_${i}`,
        eventType: "customer.created",
        status: "pending",
        attempts: [],
        scheduleAttempts: 0,
        nextAttemptAt: due,
        leaseUntil: unleased,
        leaseOwner: null,
        createdAt: due,
        updatedAt: due,
      });
    }
    const leaseUntil = new Date(now.getTime() + 60_000);
    const lease = { now, until: leaseUntil };
    const claims = await Promise.all(
      Array.from({ length: 60 }, (_, i) =>
        claimDueDelivery(store.system, now, i % 2 ? "worker_a" : "worker_b", lease),
      ),
    );
    const claimed = claims.filter((claim) => claim !== null).map((claim) => claim._id);
    t.is(claimed.length, 20);
    t.is(new Set(claimed).size, 20, "each delivery claimed once");
    t.is(await claimDueDelivery(store.system, now, "worker_c", lease), null, "leases hold");
    const later = new Date(leaseUntil.getTime() + 1);
    t.not(
      await claimDueDelivery(store.system, later, "worker_c", {
        now: later,
        until: new Date(later.getTime() + 60_000),
      }),
      null,
      "an expired lease is claimed again",
    );
  });

  storeTest("creating indexes again is harmless", async (t, store) => {
    const { ensureIndexes } = await import("../../src/store/indexes.js");
    await t.notThrowsAsync(() => ensureIndexes(store.system));
  });

  storeTest("an index no longer declared is dropped at start, once", async (t, store) => {
    const { ensureIndexes, retiredIndexes } = await import("../../src/store/indexes.js");
    const [retired] = retiredIndexes.referrals ?? [];
    if (!retired) {
      t.pass("nothing retired");
      return;
    }
    // As an earlier version made it.
    await store.system.referrals.createIndex({ referrerId: 1, attributedAt: -1 });
    await ensureIndexes(store.system);
    await t.throwsAsync(() => store.system.referrals.dropIndex(retired), undefined, "gone");
    await t.notThrowsAsync(() => ensureIndexes(store.system), "and a start without it is fine");
  });
}
