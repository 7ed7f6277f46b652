import test from "ava";
import { type Receiver, startReceiver } from "../helpers/receiver.js";
import { type Json, keys, rest, useServer } from "../helpers/server.js";
import { eventually } from "../helpers/wait.js";

/**
 * ExportCustomer: one document with everything the service holds about a
 * customer, other customers by id only, paged alike across its lists.
 */

const server = useServer({ env: { WEBHOOK_ALLOW_PRIVATE: "true" } });
let receiver: Receiver;
test.before(async () => {
  receiver = await startReceiver();
});
test.after.always(() => receiver?.close());

const secret = (method: string, path: string, body?: unknown) =>
  rest(server, method, path, { key: keys.secret, body });
const identify = async (externalUserId: string) =>
  (
    await secret("POST", "/customers/identify", {
      externalUserId,
      name: externalUserId,
      environment: "test",
    })
  ).body;

test.serial(
  "a customer's export holds its record, both sides of its referrals, checkpoints, grants and events",
  async (t) => {
    await secret("POST", "/webhooks", { url: `${receiver.url}/export`, environment: "test" });
    const ada = await identify("export-ada");
    const referrer = await identify("export-referrer");
    const friend = await identify("export-friend");
    const referredAda = await secret("POST", "/referrals", {
      referralCode: referrer.referralCode,
      refereeId: ada.id,
      environment: "test",
    });
    const adaReferred = await secret("POST", "/referrals", {
      referralCode: ada.referralCode,
      refereeId: friend.id,
      environment: "test",
    });
    await secret("POST", "/checkpoints/ingest", {
      name: "signup",
      externalUserId: "export-ada",
      environment: "test",
    });
    const grant = await secret("POST", "/reward-grants", {
      customerId: ada.id,
      value: { type: "payout", method: "custom", currency: "usd", amount: 3 },
      reason: "thanks",
    });
    t.is(grant.status, 201);
    // The export holds the stored events: the relay stores each after its
    // delivery's first attempt, so both are waited for, not a count of deliveries.
    const before = Date.now();
    const exported = await eventually("ada's two events stored", async () => {
      const answer = await secret("GET", `/customers/${ada.id}/export`);
      return answer.status !== 200 || answer.body.events.length >= 2 ? answer : undefined;
    });
    t.is(exported.status, 200);
    const body = exported.body as Json;
    t.true(Date.parse(body.exportedAt) >= before - 1000);
    t.like(body.customer, { id: ada.id, externalUserId: "export-ada" });
    t.deepEqual(
      body.referralsAsReferee.map((r: Json) => r.id),
      [referredAda.body.id],
    );
    t.deepEqual(
      body.referralsAsReferrer.map((r: Json) => r.id),
      [adaReferred.body.id],
    );
    t.is(body.referralsAsReferrer[0].refereeId, friend.id, "the other customer by id");
    t.false(JSON.stringify(body).includes("export-friend"), "nothing else of the other customer");
    t.deepEqual(
      body.checkpoints.map((c: Json) => c.name),
      ["signup"],
    );
    t.deepEqual(
      body.rewardGrants.map((g: Json) => g.id),
      [grant.body.id],
    );
    t.deepEqual(body.events.map((e: Json) => e.type).sort(), [
      "checkpoint.ingested",
      "customer.created",
    ]);
    t.is(body.events.find((e: Json) => e.type === "customer.created").payload.data.id, ada.id);
    t.like(body, { limit: 100, offset: 0, hasMore: false });

    // Paged alike: one item of each list per page.
    const first = (await secret("GET", `/customers/${ada.id}/export?limit=1`)).body;
    t.is(first.events.length, 1);
    t.true(first.hasMore);
    const second = (await secret("GET", `/customers/${ada.id}/export?limit=1&offset=1`)).body;
    t.is(second.events.length, 1);
    t.is(second.checkpoints.length, 0);
    t.false(second.hasMore);
    t.not(second.events[0].id, first.events[0].id);
  },
);

test.serial(
  "an erased customer's export is its tombstone and what stays linked to it",
  async (t) => {
    const leaving = await identify("export-leaving");
    await secret("POST", "/checkpoints/ingest", {
      name: "signup",
      externalUserId: "export-leaving",
      environment: "test",
    });
    await secret("DELETE", `/customers/${leaving.id}`);
    const body = (await secret("GET", `/customers/${leaving.id}/export`)).body;
    t.like(body.customer, { id: leaving.id, externalUserId: "", name: "" });
    t.truthy(body.customer.deletedAt);
    t.is(body.checkpoints[0].externalUserId, "");
    t.false(JSON.stringify(body).includes("export-leaving"));
    t.is((await secret("GET", "/customers/cus_missing/export")).status, 404);
    t.is(
      (await rest(server, "GET", `/customers/${leaving.id}/export`, { key: keys.public })).status,
      403,
    );
  },
);
