import test from "ava";
import { findEvent } from "../../src/store/events.js";
import { type Receiver, startReceiver } from "../helpers/receiver.js";
import { waitForRelay } from "../helpers/relay.js";
import { dataDirHolds, type Json, keys, rest, useServer } from "../helpers/server.js";
import { eventually } from "../helpers/wait.js";

/**
 * EraseCustomer: the personal data goes from the customer's record, its
 * checkpoints and the stored event payloads (its own and its referees'),
 * and from the database's files; the tombstone stays, the code is retired,
 * and an identify afterwards is someone new.
 */

const server = useServer({ env: { WEBHOOK_ALLOW_PRIVATE: "true" } });
let receiver: Receiver;
test.before(async () => {
  receiver = await startReceiver();
});
test.after.always(() => receiver?.close());

const secret = (method: string, path: string, body?: unknown) =>
  rest(server, method, path, { key: keys.secret, body });

// Strings found nowhere else, so a byte search means what it says.
const personal = {
  name: "Quirinus Zabriskie",
  email: "quirinus.zabriskie@example.org",
  externalUserId: "ext-quirinus-7f3a",
  property: "zabriskie-private-note",
};

const onDisk = (text: string) => dataDirHolds(server, text);

test.serial(
  "an erased customer is gone from every record and file; its tombstone, links and counts stay",
  async (t) => {
    const hook = await secret("POST", "/webhooks", {
      url: `${receiver.url}/erasure`,
      environment: "test",
    });
    t.is(hook.status, 201);
    const identified = await secret("POST", "/customers/identify", {
      externalUserId: personal.externalUserId,
      name: personal.name,
      email: personal.email,
      customProperties: { note: personal.property },
      environment: "test",
    });
    const customer = identified.body;
    const referee = (
      await secret("POST", "/customers/identify", {
        externalUserId: "erasure-referee",
        name: "Rea",
        environment: "test",
      })
    ).body;
    const referral = await secret("POST", "/referrals", {
      referralCode: customer.referralCode,
      refereeId: referee.id,
      environment: "test",
    });
    t.is(referral.status, 201);
    // The referee's next identify carries the referrer in its event's referredBy.
    await secret("POST", "/customers/identify", {
      externalUserId: "erasure-referee",
      name: "Rea B",
      environment: "test",
    });
    await secret("POST", "/checkpoints/ingest", {
      name: "signup",
      externalUserId: personal.externalUserId,
      environment: "test",
    });
    await receiver.waitFor(
      () => receiver.received.filter((r) => r.path === "/erasure").length >= 5,
    );
    // The relay stores an event after its delivery's first attempt: each
    // delivered event is waited for in the store, for the erasure to find it there.
    const store = server.app.store.system;
    await eventually("every delivered event stored", async () => {
      const ids = receiver.received
        .filter((r) => r.path === "/erasure")
        .map((r) => String(r.headers["webhook-id"]));
      return (await store.events.countDocuments({ _id: { $in: ids } })) === ids.length;
    });
    for (const text of Object.values(personal)) t.true(onDisk(text), `${text} is on disk before`);

    const erased = await secret("DELETE", `/customers/${customer.id}`);
    t.is(erased.status, 200);
    t.like(erased.body, {
      id: customer.id,
      externalUserId: "",
      name: "",
      email: null,
      customProperties: {},
      referralCode: customer.referralCode,
      visitedReferralsCount: 1,
      environment: "test",
    });
    t.truthy(erased.body.deletedAt);
    for (const text of Object.values(personal)) t.false(onDisk(text), `${text} is gone from disk`);

    t.deepEqual(
      (await secret("DELETE", `/customers/${customer.id}`)).body,
      erased.body,
      "again: the same tombstone",
    );
    t.deepEqual((await secret("GET", `/customers/${customer.id}`)).body, erased.body);
    const listed = await secret("GET", "/customers?limit=100&environment=test");
    t.false(
      listed.body.data.some((c: Json) => c.id === customer.id),
      "left out of the list",
    );
    const tombstones = await secret("GET", "/customers?deleted=true");
    t.deepEqual(
      tombstones.body.data.map((c: Json) => c.id),
      [customer.id],
    );

    // The other side sees the erased customer by id only.
    const refereeView = (await secret("GET", `/customers/${referee.id}`)).body;
    t.deepEqual(refereeView.referredBy, {
      id: customer.id,
      externalUserId: "",
      email: null,
      name: "",
    });
    const referrals = await secret("GET", `/referrals?referrerId=${customer.id}`);
    t.is(referrals.body.data[0].id, referral.body.id, "the referral keeps its link");

    // Stored events no longer hold the data; the erasure's own holds the id and time only.
    const events = await store.events.find({}).toArray();
    for (const event of events) {
      const payload = (await findEvent(store, event._id))?.payload ?? "";
      for (const text of Object.values(personal))
        t.false(payload.includes(text), `${event.type}: ${text}`);
    }
    const erasure = await eventually("the customer.erased event", () =>
      receiver.received.find(
        (r) => r.path === "/erasure" && JSON.parse(r.body).type === "customer.erased",
      ),
    );
    t.deepEqual(JSON.parse(erasure.body).data, {
      id: customer.id,
      deletedAt: erased.body.deletedAt,
    });

    // The code is retired; the same external id is someone new.
    const reuse = await secret("POST", "/referrals", {
      referralCode: customer.referralCode,
      refereeExternalUserId: "after-erasure",
      environment: "test",
    });
    t.is(reuse.status, 404);
    const again = await secret("POST", "/customers/identify", {
      externalUserId: personal.externalUserId,
      name: "Someone new",
      environment: "test",
    });
    t.is(again.status, 201);
    t.not(again.body.id, customer.id);
    t.not(again.body.referralCode, customer.referralCode);
    t.is(again.body.visitedReferralsCount, 0);
    t.is(again.body.referredBy, null);
  },
);

test.serial(
  "erasing a customer that does not exist is not_found; a public key may not erase",
  async (t) => {
    t.is((await secret("DELETE", "/customers/cus_missing")).status, 404);
    const customer = (
      await secret("POST", "/customers/identify", { externalUserId: "erasure-public", name: "Pub" })
    ).body;
    const refused = await rest(server, "DELETE", `/customers/${customer.id}`, { key: keys.public });
    t.is(refused.status, 403);
    t.is((await secret("GET", `/customers/${customer.id}`)).body.name, "Pub");
  },
);

test.serial(
  "an identify kept for replay under an idempotency key is forgotten with the customer",
  async (t) => {
    const body = { externalUserId: "erasure-idempotent", name: "Ida Private", environment: "test" };
    const headers = { "idempotency-key": "identify-before-erasure" };
    const first = await rest(server, "POST", "/customers/identify", {
      key: keys.secret,
      body,
      headers,
    });
    const replayed = await rest(server, "POST", "/customers/identify", {
      key: keys.secret,
      body,
      headers,
    });
    t.is(replayed.headers.get("idempotent-replayed"), "true", "kept before the erasure");
    await secret("DELETE", `/customers/${first.body.id}`);
    const retried = await rest(server, "POST", "/customers/identify", {
      key: keys.secret,
      body,
      headers,
    });
    t.is(
      retried.headers.get("idempotent-replayed"),
      null,
      "no longer replayed: it held the erased data",
    );
    t.not(retried.body.id, first.body.id, "the retry is someone new");
  },
);

test.serial(
  "an erased referrer is scrubbed from what others hold: a referee re-attributed since, its export, its redeliveries and its kept identify",
  async (t) => {
    const referrer = {
      name: "Octavia Vexmoor",
      email: "octavia.vexmoor@example.org",
      externalUserId: "ext-octavia-91c2",
    };
    const hook = await secret("POST", "/webhooks", {
      url: `${receiver.url}/reattributed`,
      environment: "test",
    });
    t.is(hook.status, 201);
    const identify = (body: Json, headers?: Record<string, string>) =>
      rest(server, "POST", "/customers/identify", {
        key: keys.secret,
        body: { environment: "test", ...body },
        ...(headers ? { headers } : {}),
      });
    const erasedLater = (await identify(referrer)).body;
    const other = (await identify({ externalUserId: "erasure-other-referrer", name: "Otto" })).body;
    const referee = (await identify({ externalUserId: "erasure-moved", name: "Mo" })).body;
    const referred = await secret("POST", "/referrals", {
      referralCode: erasedLater.referralCode,
      refereeId: referee.id,
      environment: "test",
    });
    t.is(referred.status, 201);
    // Kept for replay while the referee's referredBy is the referrer-to-be-erased.
    const keyed = { "idempotency-key": "identify-of-a-referee" };
    const kept = await identify({ externalUserId: "erasure-moved", name: "Mo" }, keyed);
    t.is(kept.body.referredBy.email, referrer.email);
    // The referee's event holds the referrer; then the referral moves to another.
    const moved = await secret("POST", "/referrals", {
      referralCode: other.referralCode,
      refereeId: referee.id,
      environment: "test",
    });
    t.is(moved.body.referrerId, other.id, "re-attributed");
    await identify({ externalUserId: "erasure-moved", name: "Mo B" });
    // Every event stored before the erasure (the relay stores one after its
    // deliveries' first attempts, so each of them is received by then).
    for (const id of [erasedLater.id, other.id, referee.id]) {
      await waitForRelay(server, "customers", id);
    }
    for (const id of new Set([referred.body.id, moved.body.id])) {
      await waitForRelay(server, "referrals", id);
    }
    await receiver.waitFor(() =>
      receiver.received.some((r) => r.path === "/reattributed" && r.body.includes(referrer.email)),
    );
    const sentWithData = new Set(
      receiver.received
        .filter((r) => r.path === "/reattributed" && r.body.includes(referrer.email))
        .map((r) => r.headers["webhook-id"]),
    );
    // A delivery is stored just after the receiver answered it.
    const holding = await eventually("the deliveries sent with the data stored", async () => {
      const deliveries = await secret(
        "GET",
        `/webhooks/${hook.body.webhook.id}/deliveries?limit=100`,
      );
      const found = deliveries.body.data.filter((delivery: Json) =>
        sentWithData.has(delivery.eventId),
      );
      return found.length === sentWithData.size ? found : undefined;
    });
    t.true(holding.length > 0, "a delivery sent the referrer's data before the erasure");

    t.is((await secret("DELETE", `/customers/${erasedLater.id}`)).status, 200);

    const store = server.app.store.system;
    for (const event of await store.events.find({}).toArray()) {
      const payload = (await findEvent(store, event._id))?.payload ?? "";
      for (const text of Object.values(referrer))
        t.false(payload.includes(text), `${event.type} ${event._id}: ${text}`);
    }
    const exported = await secret("GET", `/customers/${referee.id}/export`);
    t.is(exported.status, 200);
    for (const text of Object.values(referrer))
      t.false(JSON.stringify(exported.body).includes(text), `the referee's export: ${text}`);
    const replayed = await identify({ externalUserId: "erasure-moved", name: "Mo" }, keyed);
    for (const text of Object.values(referrer))
      t.false(JSON.stringify(replayed.body).includes(text), `the kept identify: ${text}`);
    const before = receiver.received.length;
    for (const delivery of holding) {
      const redelivered = await secret(
        "POST",
        `/webhooks/${hook.body.webhook.id}/deliveries/${delivery.id}/redeliver`,
      );
      t.is(redelivered.status, 200);
    }
    // Each redelivery itself: the erasure's own event is sent meanwhile, to both endpoints.
    await receiver.waitFor(() =>
      holding.every((delivery: Json) =>
        receiver.received
          .slice(before)
          .some((r) => r.path === "/reattributed" && r.headers["webhook-id"] === delivery.eventId),
      ),
    );
    for (const request of receiver.received.slice(before)) {
      for (const text of Object.values(referrer))
        t.false(request.body.includes(text), `a redelivery: ${text}`);
    }
    for (const text of Object.values(referrer)) t.false(onDisk(text), `${text} is gone from disk`);
  },
);
