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

/** The event the sample is the payload of, as far as packing reads it. */
const sampleEvent = {
  type: "customer.created",
  createdAt: new Date("2026-11-26T00:00:00.000Z"),
  organizationId: "org_1",
  applicationId: "app_1",
  customerId: "cus_0mwwshst38dce7ec85f4f3c0c",
};

test("a payload is stored deflated against its type's dictionary and its event's ids, a quarter of its size, and read back exactly", async (t) => {
  const packed = packPayload(sample, sampleEvent);
  t.true(packed.startsWith("d2:"));
  t.true(packed.length < sample.length / 3.5, `${packed.length} of ${sample.length}`);
  t.is(unpackPayload(packed, sampleEvent), sample);
  // The event's own ids are what the second version adds: without them in
  // the payload, it packs as the first did.
  const { customerId: _, ...withoutCustomer } = sampleEvent;
  t.true(packPayload(sample, withoutCustomer).length > packed.length + 30);
  const unicode = JSON.stringify({
    type: "customer.updated",
    data: { name: "Zoé 🦊 李", email: null, referredBy: null, referredById: null },
  });
  const updated = { ...sampleEvent, type: "customer.updated" };
  t.is(unpackPayload(packPayload(unicode, updated), updated), unicode);
  // A type the dictionaries were made before reads back too.
  const erased = { ...sampleEvent, type: "customer.erased" };
  t.is(unpackPayload(packPayload(sample, erased), erased), sample);
});

test("what versions 1 and 2 stored reads back forever: the dictionaries are frozen", async (t) => {
  // Packed when each version was made; a changed dictionary would not read them.
  const storedV1 =
    "d1:qyYlmgwNdY3M8EdTcmlxvEFueXlxRnGJsUVKcqp5arKFaZpJmnGyQTK2OCw1RMSiUmJKokNqRWJuQU6qXnJ+rhI8Sh1TEodGrJqHRPmau0RaosYuJJVjDz6kOMenjHBKyC9KjwcFJnpySCwoAItjSRNKBTmJeUpWSgVF+Uro6QMkmFKaDEpVSrW1AA==";
  t.is(unpackPayload(storedV1, sampleEvent), sample);
  const storedV2 =
    "d2:qyYllrHoR49lvM7BlgRKDRGJQCkxJdEhtSIxtyAnVS85P1cJniIcUxKHRqIwD4nyNXeJtERNHEq4gl8JJcngU0Y4IYEjG0tqAsc/9iSlVJCTmKdkpVRQlK+EnrxAgimlyaBEqVRbCwA=";
  t.is(unpackPayload(storedV2, sampleEvent), sample);
});

test("a payload stored before packing, or too small to shrink, is plain JSON and read as it is", async (t) => {
  t.is(unpackPayload(sample, sampleEvent), sample);
  t.is(packPayload("{}", sampleEvent), "{}");
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
    t.true(raw?.payload.startsWith("d2:"), "stored packed");
    t.is((await findEvent(db, "evt_packed"))?.payload, sample);
    // Relayed again (a crash before the outbox was cleared): the stored one, unpacked.
    t.is((await storeEvent(db, { ...event, payload: "{}" })).payload, sample);
  });
}
