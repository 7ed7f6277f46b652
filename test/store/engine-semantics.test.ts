import test, { type ExecutionContext } from "ava";
import type { Document } from "mongodb";
import { isDuplicateKeyError } from "../../src/store/errors.js";
import type { Store } from "../../src/store/store.js";
import { storeTest as declareStoreTest, engineNames, openTestStore } from "../helpers/engines.js";

/**
 * Where the embedded engine could answer differently from MongoDB: null
 * against missing fields, projections, every update operator on both the
 * update and the upsert path, duplicate keys, sort ties and kept totals.
 * Each case runs on the embedded engine always and on MongoDB when
 * MONGODB_URI is set, with the same expectations.
 */

const base = {
  organizationId: "org_1",
  applicationId: "app_1",
  environment: "production" as const,
  email: null,
  emailNormalized: null,
  emailCanonical: null,
  name: "n",
  customProperties: {},
  deletedAt: null,
};
const t0 = new Date("2026-01-02T03:04:05.000Z");

function customer(id: string, fields: Document = {}) {
  return {
    _id: id,
    ...base,
    externalUserId: id,
    referralCode: `CODE_${id}`,
    createdAt: t0,
    updatedAt: t0,
    ...fields,
  };
}

/** Ids of a find, sorted, so engines' natural orders do not matter. */
async function idsOf(store: Store, filter: Document): Promise<string[]> {
  const docs = await store.system.customers.find(filter).toArray();
  return docs.map((doc) => doc._id).sort();
}

for (const engine of engineNames) {
  const storeTest = (title: string, body: (t: ExecutionContext, store: Store) => Promise<void>) =>
    declareStoreTest(engine, title, body);

  storeTest(
    "{ field: null } matches null and missing; $ne and $exists tell them apart",
    async (t, store) => {
      await store.system.customers.insertOne(customer("has_null", { email: null }));
      const { email: _omitted, ...withoutEmail } = customer("missing");
      await store.system.customers.insertOne(withoutEmail as never);
      await store.system.customers.insertOne(customer("has_value", { email: "a@example.com" }));

      t.deepEqual(await idsOf(store, { email: null }), ["has_null", "missing"]);
      t.deepEqual(await idsOf(store, { email: { $ne: null } }), ["has_value"]);
      t.deepEqual(await idsOf(store, { email: { $exists: false } }), ["missing"]);
      t.deepEqual(await idsOf(store, { email: { $exists: true } }), ["has_null", "has_value"]);
      t.deepEqual(await idsOf(store, { email: { $ne: "a@example.com" } }), ["has_null", "missing"]);
      t.deepEqual(await idsOf(store, { email: { $in: [null, "a@example.com"] } }), [
        "has_null",
        "has_value",
        "missing",
      ]);
      t.deepEqual(await idsOf(store, { email: { $nin: [null] } }), ["has_value"]);
    },
  );

  storeTest(
    "projections keep the named fields, nested ones nested, and _id unless excluded",
    async (t, store) => {
      await store.system.customers.insertOne(
        customer("c1", { customProperties: { tier: "gold", seats: 3 }, name: "Pat" }),
      );
      const [nested] = await store.system.customers
        .find({ _id: "c1" }, { projection: { "customProperties.tier": 1, name: 1 } })
        .toArray();
      t.deepEqual(nested as Document, {
        _id: "c1",
        name: "Pat",
        customProperties: { tier: "gold" },
      });
      const [withoutId] = await store.system.customers
        .find({ _id: "c1" }, { projection: { _id: 0, name: 1 } })
        .toArray();
      t.deepEqual(withoutId as Document, { name: "Pat" });
      const found = await store.system.customers.findOne(
        { _id: "c1" },
        { projection: { missing: 1 } },
      );
      t.deepEqual(found as Document, { _id: "c1" });
      await store.system.customers.insertOne(customer("c2", { name: "Sam" }));
      const ids = await store.system.customers
        .find({ _id: { $in: ["c1", "c2", "c3"] } }, { projection: { _id: 1 }, sort: { _id: 1 } })
        .toArray();
      t.deepEqual(ids as Document[], [{ _id: "c1" }, { _id: "c2" }], "ids alone, in order");
    },
  );

  storeTest(
    "dates round-trip anywhere in a document and compare in time order",
    async (t, store) => {
      const later = new Date(t0.getTime() + 60_000);
      await store.system.customers.insertOne(
        customer("c1", {
          customProperties: {
            // Values that look like an engine's own date encoding stay data.
            $$date: 0,
            tagged: "\u0001D2026-01-01T00:00:00.000Z",
            list: [{ at: "2026-01-01T00:00:00.000Z" }],
          },
          outbox: [{ id: "e1", type: "customer.identified", occurredAt: later }],
        }),
      );
      await store.system.customers.insertOne(customer("c2", { createdAt: later }));
      const c1 = await store.system.customers.findOne({ _id: "c1" });
      t.true(c1?.createdAt instanceof Date);
      t.true(c1?.outbox?.[0]?.occurredAt instanceof Date);
      t.is(c1?.outbox?.[0]?.occurredAt.getTime(), later.getTime());
      t.deepEqual(c1?.customProperties, {
        $$date: 0,
        tagged: "\u0001D2026-01-01T00:00:00.000Z",
        list: [{ at: "2026-01-01T00:00:00.000Z" }],
      });
      if (engine === "embedded") {
        // A key named __proto__ stays data, never a prototype.
        const properties = JSON.parse('{"__proto__":{"polluted":true},"plain":1}');
        await store.system.customers.insertOne(customer("c3", { customProperties: properties }));
        const c3 = await store.system.customers.findOne({ _id: "c3" });
        t.deepEqual(Object.keys(c3?.customProperties ?? {}), ["__proto__", "plain"]);
        t.deepEqual(Object.getOwnPropertyDescriptor(c3?.customProperties, "__proto__")?.value, {
          polluted: true,
        });
        t.is(Object.getPrototypeOf(c3?.customProperties), Object.prototype);
        t.is(({} as Document).polluted, undefined);
        await store.system.customers.deleteOne({ _id: "c3" });
      }
      t.deepEqual(await idsOf(store, { createdAt: { $gte: later } }), ["c2"]);
      t.deepEqual(await idsOf(store, { createdAt: { $lt: later } }), ["c1"]);
      t.deepEqual(await idsOf(store, { createdAt: { $gte: t0, $lte: later } }), ["c1", "c2"]);
    },
  );

  storeTest("each update operator, on an existing document and on an upsert", async (t, store) => {
    const update = {
      $set: { name: "Set", "customProperties.plan": "pro" },
      $inc: { "health.consecutiveFailures": 2 },
      $push: { outbox: { $each: [{ id: "e1" }, { id: "e2" }] } },
      $setOnInsert: { createdAt: t0, referralCode: "UPSERTED" },
    };
    // The upsert path: the filter's equalities, the operators, $setOnInsert.
    const inserted = await store.system.customers.findOneAndUpdate(
      { applicationId: "app_1", environment: "production", externalUserId: "new" },
      { ...update, $setOnInsert: { ...update.$setOnInsert, _id: "c_new" } } as never,
      { upsert: true, returnDocument: "after" },
    );
    t.like(inserted as Document, {
      _id: "c_new",
      applicationId: "app_1",
      externalUserId: "new",
      name: "Set",
      referralCode: "UPSERTED",
      customProperties: { plan: "pro" },
      health: { consecutiveFailures: 2 },
    });
    t.deepEqual(inserted?.outbox, [{ id: "e1" }, { id: "e2" }] as never);

    // The update path: $setOnInsert is ignored, the rest applies again.
    const updated = await store.system.customers.findOneAndUpdate(
      { _id: "c_new" },
      {
        ...update,
        $unset: { "customProperties.plan": "" },
        $set: { name: "Again" },
      } as never,
      { upsert: true, returnDocument: "after" },
    );
    t.is(updated?.referralCode, "UPSERTED");
    t.is(updated?.name, "Again");
    t.deepEqual(updated?.customProperties, {});
    t.is((updated as Document).health.consecutiveFailures, 4);
    t.is(updated?.outbox?.length, 4);

    await store.system.customers.updateOne({ _id: "c_new" }, {
      $pull: { outbox: { id: { $in: ["e1"] } } },
    } as never);
    const pulled = await store.system.customers.findOne({ _id: "c_new" });
    t.deepEqual(pulled?.outbox, [{ id: "e2" }, { id: "e2" }] as never);

    const counted = await store.system.customers.updateOne(
      { applicationId: "app_1", environment: "production", externalUserId: "other" },
      { $set: { name: "Other" }, $setOnInsert: { _id: "c_other", referralCode: "OTHER" } },
      { upsert: true },
    );
    t.is(counted.upsertedCount, 1);
    t.is(counted.upsertedId as unknown, "c_other");
    t.is(counted.matchedCount, 0);
  });

  storeTest(
    "deleteMany removes every match in one call, and kept totals follow",
    async (t, store) => {
      const day = 86_400_000;
      for (const [i, id] of ["a", "b", "c", "d", "e"].entries()) {
        await store.system.customers.insertOne(
          customer(id, { createdAt: new Date(t0.getTime() + i * day), deletedAt: null }),
        );
      }
      const before = new Date(t0.getTime() + 3 * day);
      const removed = await store.system.customers.deleteMany({ createdAt: { $lt: before } });
      t.is(removed.deletedCount, 3);
      t.deepEqual(await idsOf(store, {}), ["d", "e"]);
      t.is(
        (await store.system.customers.deleteMany({ createdAt: { $lt: before } })).deletedCount,
        0,
      );
      const live = { applicationId: "app_1", deletedAt: null };
      t.is(await store.system.customers.countDocuments(live), 2);
      t.is((await store.system.customers.deleteMany({})).deletedCount, 2);
      t.deepEqual(await idsOf(store, {}), []);
      t.is(await store.system.customers.countDocuments(live), 0);
    },
  );

  storeTest("$size matches arrays of that length only", async (t, store) => {
    await store.system.customers.insertOne(customer("empty", { outbox: [] }));
    await store.system.customers.insertOne(customer("one", { outbox: [{ id: "e" }] }));
    await store.system.customers.insertOne(customer("none"));
    t.deepEqual(await idsOf(store, { outbox: { $size: 0 } }), ["empty"]);
    t.deepEqual(await idsOf(store, { outbox: { $size: 1 } }), ["one"]);
  });

  storeTest(
    "a side field's condition on one document by id answers as on a whole collection",
    async (t, store) => {
      await store.system.customers.insertOne(customer("empty", { outbox: [] }));
      await store.system.customers.insertOne(
        customer("one", { outbox: [{ id: "e" }], outboxPending: true }),
      );
      await store.system.customers.insertOne(customer("none"));
      const conditions: Document[] = [
        { outbox: { $size: 0 } },
        { outbox: { $size: 1 } },
        { outboxPending: true },
        { outboxPending: null },
        { outboxPending: { $ne: true } },
        { outboxPending: { $exists: false } },
        { outboxPending: { $exists: true } },
        { outboxPending: { $in: [null, true] } },
        { outboxPending: { $nin: [null] } },
      ];
      for (const condition of conditions) {
        const matching = await idsOf(store, condition);
        for (const id of ["empty", "one", "none"]) {
          const found = await store.system.customers.findOne({ _id: id, ...condition });
          t.is(found?._id ?? null, matching.includes(id) ? id : null, JSON.stringify(condition));
        }
      }
    },
  );

  storeTest(
    "an upsert or update that hits a unique index is the typed duplicate-key error, and changes nothing",
    async (t, store) => {
      await store.system.customers.insertOne(customer("c1", { referralCode: "SAMECODE" }));
      await store.system.customers.insertOne(customer("c2"));
      const racing = await t.throwsAsync(() =>
        store.system.customers.findOneAndUpdate(
          { applicationId: "app_1", environment: "production", externalUserId: "racer" },
          { $set: { name: "R" }, $setOnInsert: { _id: "c3", referralCode: "SAMECODE" } },
          { upsert: true, returnDocument: "after" },
        ),
      );
      t.true(isDuplicateKeyError(racing));
      t.is(await store.system.customers.findOne({ _id: "c3" }), null);

      const moved = await t.throwsAsync(() =>
        store.system.customers.updateOne({ _id: "c2" }, { $set: { referralCode: "SAMECODE" } }),
      );
      t.true(isDuplicateKeyError(moved));
      t.is((await store.system.customers.findOne({ _id: "c2" }))?.referralCode, "CODE_c2");

      const sameId = await t.throwsAsync(() => store.system.customers.insertOne(customer("c1")));
      t.true(isDuplicateKeyError(sameId));
    },
  );

  storeTest(
    "insertMany is ordered: a duplicate stops it and keeps the documents before it",
    async (t, store) => {
      await store.system.customers.insertOne(customer("taken"));
      const error = await t.throwsAsync(() =>
        store.system.customers.insertMany([customer("m1"), customer("taken"), customer("m3")]),
      );
      t.true(isDuplicateKeyError(error));
      t.deepEqual(await idsOf(store, {}), ["m1", "taken"]);
      const inserted = await store.system.customers.insertMany([customer("m4"), customer("m5")]);
      t.is(inserted.insertedCount, 2);
    },
  );

  storeTest(
    "sort ties are broken by the next key, in both directions, across pages",
    async (t, store) => {
      for (const id of ["a", "d", "b", "e", "c"])
        await store.system.customers.insertOne(customer(id));
      const page = async (direction: 1 | -1, skip: number) =>
        (
          await store.system.customers
            .find(
              { applicationId: "app_1" },
              { sort: { createdAt: direction, _id: direction }, skip, limit: 2 },
            )
            .toArray()
        ).map((doc) => doc._id);
      t.deepEqual(
        [...(await page(-1, 0)), ...(await page(-1, 2)), ...(await page(-1, 4))],
        ["e", "d", "c", "b", "a"],
      );
      t.deepEqual(
        [...(await page(1, 0)), ...(await page(1, 2)), ...(await page(1, 4))],
        ["a", "b", "c", "d", "e"],
      );
    },
  );

  storeTest(
    "list totals stay exact through inserts, moves between groups, soft and hard deletes",
    async (t, store) => {
      const referral = (id: string, fields: Document) => ({
        _id: id,
        organizationId: "org_1",
        applicationId: "app_1",
        environment: "production",
        campaignId: "cmp_1",
        referrerId: "cus_r",
        refereeId: `cus_${id}`,
        status: "pending",
        suspectedFrauds: [],
        statusHistory: [],
        attributedAt: t0,
        createdAt: t0,
        updatedAt: t0,
        deletedAt: null,
        ...fields,
      });
      for (let i = 0; i < 12; i++) {
        await store.system.referrals.insertOne(
          referral(`r${i}`, {
            environment: i % 3 === 0 ? "test" : "production",
            status: i % 4 === 0 ? "flagged" : "pending",
            campaignId: i % 2 ? "cmp_1" : "cmp_2",
          }) as never,
        );
      }
      await store.system.referrals.updateOne({ _id: "r1" }, { $set: { status: "accepted" } });
      await store.system.referrals.updateMany(
        { campaignId: "cmp_2", status: "flagged" },
        {
          $set: { status: "rejected" },
        },
      );
      await store.system.referrals.updateOne({ _id: "r5" }, { $set: { deletedAt: t0 } });
      await store.system.referrals.updateOne({ _id: "r7" }, { $set: { environment: "test" } });
      await store.system.referrals.deleteOne({ _id: "r9" });

      const filters: Document[] = [
        { applicationId: "app_1", deletedAt: null },
        { applicationId: "app_1", deletedAt: null, environment: "test" },
        { applicationId: "app_1", deletedAt: null, status: "pending" },
        { applicationId: "app_1", deletedAt: null, status: "rejected" },
        { applicationId: "app_1", deletedAt: null, environment: "production", status: "pending" },
        { applicationId: "app_1", deletedAt: null, campaignId: "cmp_1" },
        { applicationId: "app_1", deletedAt: null, campaignId: "cmp_2", status: "rejected" },
        { applicationId: "app_2", deletedAt: null },
      ];
      for (const filter of filters) {
        const recount = (await store.system.referrals.find(filter).toArray()).length;
        t.is(await store.system.referrals.countDocuments(filter), recount, JSON.stringify(filter));
      }
      t.is(
        await store.system.referrals.countDocuments({ applicationId: "app_1", deletedAt: null }),
        10,
      );
    },
  );

  storeTest(
    "kept sums stay exact through inserts, moves and deletes: grouped totals equal the documents'",
    async (t, store) => {
      const grants = store.system.rewardGrants;
      const grant = (id: string, fields: Document) => ({
        _id: id,
        organizationId: "org_1",
        applicationId: "app_1",
        environment: "production",
        customerId: "cus_a",
        kind: "earned",
        status: "approved",
        value: { currency: "usd" },
        amountMinor: 2000,
        createdAt: t0,
        updatedAt: t0,
        ...fields,
      });
      for (let i = 0; i < 12; i++) {
        await grants.insertOne(
          grant(`g${i}`, {
            customerId: i % 3 === 0 ? "cus_b" : "cus_a",
            status: i % 4 === 0 ? "pending" : "approved",
            value: { currency: i % 5 === 0 ? "eur" : "usd" },
            amountMinor: i % 6 === 0 ? null : 1000 + i,
            kind: i === 7 ? "clawback" : "earned",
          }) as never,
        );
      }
      await grants.updateOne({ _id: "g1" }, { $set: { status: "fulfilled" } });
      await grants.updateOne({ _id: "g2" }, { $set: { amountMinor: 1 } });
      await grants.updateOne({ _id: "g4" }, { $set: { customerId: "cus_b" } });
      await grants.updateMany({ status: "pending" }, { $set: { status: "voided" } });
      await grants.deleteOne({ _id: "g5" });

      const grouped = (customerId: string) =>
        grants
          .aggregate([
            { $match: { applicationId: "app_1", customerId } },
            {
              $group: {
                _id: { currency: "$value.currency", kind: "$kind", status: "$status" },
                count: { $sum: 1 },
                amountMinor: { $sum: "$amountMinor" },
              },
            },
          ])
          .toArray();
      for (const customerId of ["cus_a", "cus_b", "cus_none"]) {
        const expected = new Map<string, { count: number; amountMinor: number }>();
        for (const doc of await grants.find({ applicationId: "app_1", customerId }).toArray()) {
          const key = JSON.stringify([doc.value.currency, doc.kind, doc.status]);
          const total = expected.get(key) ?? { count: 0, amountMinor: 0 };
          total.count += 1;
          total.amountMinor += doc.amountMinor ?? 0;
          expected.set(key, total);
        }
        const actual = new Map(
          (await grouped(customerId)).map((group) => [
            JSON.stringify([group._id.currency, group._id.kind, group._id.status]),
            { count: group.count, amountMinor: group.amountMinor },
          ]),
        );
        t.deepEqual(
          [...actual].sort(([a], [b]) => a.localeCompare(b)),
          [...expected].sort(([a], [b]) => a.localeCompare(b)),
          customerId,
        );
      }
      // The same shape with no kept total behind it is grouped over the documents.
      const byStatus = await store.system.rewardGrants
        .aggregate([
          { $match: { applicationId: "app_1" } },
          { $group: { _id: { status: "$status" }, count: { $sum: 1 } } },
        ])
        .toArray();
      t.deepEqual(Object.fromEntries(byStatus.map((group) => [group._id.status, group.count])), {
        approved: 7,
        fulfilled: 1,
        voided: 3,
      });
    },
  );
}

test("the embedded engine refuses aggregations other than $match then $group", async (t) => {
  const { store, cleanup } = await openTestStore("embedded");
  try {
    const refused = async (pipeline: Document[]) =>
      (await t.throwsAsync(() => store.system.rewardGrants.aggregate(pipeline).toArray()))?.name;
    t.is(await refused([{ $group: { _id: { s: "$status" } } }]), "UnsupportedQueryError");
    t.is(
      await refused([{ $match: {} }, { $group: { _id: "$status", n: { $sum: 1 } } }]),
      "UnsupportedQueryError",
    );
    t.is(
      await refused([{ $match: {} }, { $group: { _id: { s: "$status" }, n: { $max: "$x" } } }]),
      "UnsupportedQueryError",
    );
    t.is(
      await refused([
        { $match: {} },
        { $group: { _id: { s: "$status" }, n: { $sum: 1 } } },
        { $sort: { n: 1 } },
      ]),
      "UnsupportedQueryError",
    );
  } finally {
    await cleanup();
  }
});
