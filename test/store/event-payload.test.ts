import test from "ava";
import { packPayload, unpackPayload } from "../../src/store/event-payload.js";
import { findEvent, storeEvent } from "../../src/store/events.js";
import { engineNames, storeTest } from "../helpers/engines.js";

const sample = JSON.stringify({
  type: "customer.created",
  timestamp: "2026-11-26T00:00:00.000Z",
  data: {
    id: "cus_0mwwshst38dce7ec85f4f3c0c",
    externalUserId: "u1",
    email: "ada@example.com",
    name: "Ada",
    referredBy: null,
    referredById: null,
    referredByReferralId: null,
    referredInCampaignId: null,
    visitedReferralsCount: 0,
    convertedReferralsCount: 0,
    referralCode: "7TZM7DY9",
    createdAt: "2026-11-26T00:00:00.000Z",
    updatedAt: "2026-11-26T00:00:00.000Z",
    deletedAt: null,
    organizationId: "org_1",
    applicationId: "app_1",
    customProperties: { plan: "pro" },
    environment: "production",
  },
});

test("a payload is stored deflated against the dictionary, a fraction of its size, and read back exactly", async (t) => {
  const packed = packPayload(sample, "customer.created");
  t.true(packed.startsWith("d1:"));
  t.true(packed.length < sample.length / 2.5, `${packed.length} of ${sample.length}`);
  t.is(unpackPayload(packed, "customer.created"), sample);
  const unicode = JSON.stringify({
    type: "customer.updated",
    data: { name: "Zoé 🦊 李", email: null, referredBy: null, referredById: null },
  });
  t.is(unpackPayload(packPayload(unicode, "customer.updated"), "customer.updated"), unicode);
  // A type the dictionaries were made before reads back too.
  t.is(unpackPayload(packPayload(sample, "customer.erased"), "customer.erased"), sample);
});

test("what version 1 stored reads back forever: the dictionary is frozen", async (t) => {
  // Packed when version 1 was made; a changed dictionary would not read it.
  const stored =
    "d1:qyYlmgwNdY3M8EdTcmlxvEFueXlxRnGJsUVKcqp5arKFaZpJmnGyQTK2OCw1RMSiUmJKokNqRWJuQU6qXnJ+rhI8Sh1TEodGrJqHRPmau0RaosYuJJVjDz6kOMenjHBKyC9KjwcFJnpySCwoAItjSRNKBTmJeUpWSgVF+Uro6QMkmFKaDEpVSrW1AA==";
  t.is(unpackPayload(stored, "customer.created"), sample);
});

test("a payload stored before packing, or too small to shrink, is plain JSON and read as it is", async (t) => {
  t.is(unpackPayload(sample, "customer.created"), sample);
  t.is(packPayload("{}", "customer.created"), "{}");
});

for (const engine of engineNames) {
  storeTest(engine, "events are stored packed and read back with their JSON", async (t, store) => {
    const db = store.system;
    const event = {
      _id: "evt_packed",
      organizationId: "org_1",
      applicationId: "app_1",
      environment: "production" as const,
      type: "customer.created" as const,
      payload: sample,
      createdAt: new Date("2026-11-26T00:00:00.000Z"),
    };
    t.is((await storeEvent(db, event)).payload, sample);
    const raw = await db.events.findOne({ _id: "evt_packed" });
    t.true(raw?.payload.startsWith("d1:"), "stored packed");
    t.is((await findEvent(db, "evt_packed"))?.payload, sample);
    // Relayed again (a crash before the outbox was cleared): the stored one, unpacked.
    t.is((await storeEvent(db, { ...event, payload: "{}" })).payload, sample);
  });
}
