import test from "ava";
import { withErasedScrubbed } from "../../src/store/erasure.js";
import { findEvent, storeEvent } from "../../src/store/events.js";
import { erasureMarkOf, forgetFreedOf } from "../../src/store/store.js";
import { dataDirHolds, keys, rest, useServer } from "../helpers/server.js";

/**
 * The relay reads a customer, builds its event, and stores it; an erasure
 * between the read and the store rewrote the events stored before it, not
 * this one. The relay then scrubs it itself (see `withErasedScrubbed`), and
 * the files keep no copy of what the scrub overwrote.
 */

const server = useServer();

const onDisk = (text: string) => dataDirHolds(server, text);

test("an event stored after its customer's erasure, from a read made before, is scrubbed", async (t) => {
  const personal = { name: "Perpetua Vantongeren", email: "perpetua.v@example.org" };
  const identify = (externalUserId: string, body: Record<string, unknown>) =>
    rest(server, "POST", "/customers/identify", {
      key: keys.secret,
      body: { externalUserId, ...body },
    });
  const referrer = (await identify("race-referrer", { ...personal, environment: "test" })).body;
  const referee = (await identify("race-referee", { name: "Rae", environment: "test" })).body;
  const referred = await rest(server, "POST", "/referrals", {
    key: keys.secret,
    body: { referralCode: referrer.referralCode, refereeId: referee.id, environment: "test" },
  });
  t.is(referred.status, 201);
  // What the relay built from the reads it made before the erasure.
  const refereeView = (await rest(server, "GET", `/customers/${referee.id}`, { key: keys.secret }))
    .body;
  const at = new Date();
  const built = (id: string, data: unknown, customerId: string, referredById?: string) => ({
    _id: id,
    organizationId: referrer.organizationId,
    applicationId: referrer.applicationId,
    environment: "test" as const,
    type: "customer.updated" as const,
    payload: JSON.stringify({ type: "customer.updated", timestamp: at.toISOString(), data }),
    createdAt: at,
    customerId,
    ...(referredById ? { referredById } : {}),
  });
  const own = built(`evt_race_own_${Date.now()}`, referrer, referrer.id);
  const refereeEvent = built(`evt_race_ref_${Date.now()}`, refereeView, referee.id, referrer.id);
  t.true(refereeEvent.payload.includes(personal.email), "the referee's event shows its referrer");

  t.is(
    (await rest(server, "DELETE", `/customers/${referrer.id}`, { key: keys.secret })).status,
    200,
  );

  const db = server.app.store.system;
  const forgetFreed = forgetFreedOf(server.app.store);
  for (const event of [own, refereeEvent]) {
    const unscrubbed = await storeEvent(db, event);
    // The payload as the row holds it (packed), before the scrub overwrites it.
    const packed = (await db.events.findOne({ _id: event._id }))?.payload ?? "";
    t.true(onDisk(packed), `${event._id}: its unscrubbed payload is on disk`);
    const stored = await withErasedScrubbed(db, unscrubbed, null, forgetFreed);
    const kept = (await findEvent(db, event._id))?.payload ?? "";
    for (const text of Object.values(personal)) {
      t.false(stored.payload.includes(text), `${event._id} as handed on: ${text}`);
      t.false(kept.includes(text), `${event._id} as stored: ${text}`);
    }
    // Nor is any earlier image left in the write-ahead log.
    t.false(onDisk(packed), `${event._id}: its unscrubbed payload is gone from disk`);
  }
  const untouched = built(`evt_race_live_${Date.now()}`, refereeView, referee.id);
  t.is(
    (await withErasedScrubbed(db, await storeEvent(db, untouched))).payload,
    untouched.payload,
    "a live customer's event is left as it is",
  );
});

test("an event found unerased is read for again once a customer is erased, and only then", async (t) => {
  const identify = (externalUserId: string) =>
    rest(server, "POST", "/customers/identify", {
      key: keys.secret,
      body: { externalUserId, name: "Oona Marsh", email: `${externalUserId}@example.org` },
    });
  const customer = (await identify("mark-customer")).body;
  const store = server.app.store;
  const db = store.system;
  const mark = erasureMarkOf(store);
  if (!mark) return t.fail("the embedded writer keeps an erasure mark");
  const at = new Date();
  const event = {
    _id: `evt_mark_${Date.now()}`,
    organizationId: customer.organizationId,
    applicationId: customer.applicationId,
    environment: customer.environment,
    type: "customer.updated" as const,
    payload: JSON.stringify({
      type: "customer.updated",
      timestamp: at.toISOString(),
      data: customer,
    }),
    createdAt: at,
    customerId: customer.id,
  };
  t.is(await withErasedScrubbed(db, event, mark), event, "found unerased, handed on as it is");

  const before = mark();
  await identify("mark-other");
  t.is(mark(), before, "a write that erases nobody leaves the mark");

  t.is(
    (await rest(server, "DELETE", `/customers/${customer.id}`, { key: keys.secret })).status,
    200,
  );
  t.not(mark(), before, "an erasure moves it");
  const sent = await withErasedScrubbed(db, event, mark);
  t.false(sent.payload.includes("Oona Marsh"), "read again, and scrubbed");
  t.false(sent.payload.includes("mark-customer@example.org"));
});
