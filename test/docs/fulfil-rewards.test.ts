import test from "ava";
import { startFulfilment } from "../../examples/fulfil-rewards.js";
import { reservedPort } from "../helpers/ports.js";
import { asUsersRunIt, type Json, keys, rest, useServer } from "../helpers/server.js";

/**
 * The fulfilment loop of docs/rewards.md, run: the example receiver gets the
 * reward events of a conversion, pays the approved payout and records it,
 * and leaves the discount alone.
 */
const server = useServer({ ...asUsersRunIt, env: { WEBHOOK_ALLOW_PRIVATE: "true" } });

test("the example receiver pays approved payouts and records each payment", async (t) => {
  const port = await reservedPort();
  const call = (method: string, path: string, body?: unknown, key = keys.secret) =>
    rest(server, method, path, { key, body });
  const endpoint = await call("POST", "/webhooks", {
    url: `http://127.0.0.1:${port}/`,
    environment: "test",
    eventTypes: ["reward_grant.created", "reward_grant.approved"],
  });
  const paid: Json[] = [];
  const receiver = startFulfilment({
    serviceUrl: server.baseUrl,
    secretKey: keys.secret,
    webhookSecret: endpoint.body.secret,
    port,
    pay: async (grant) => {
      paid.push(grant);
      return `paid-${grant.id}`;
    },
  });
  try {
    const identify = async (name: string) =>
      (
        await call(
          "POST",
          "/customers/identify",
          { externalUserId: name, name, environment: "test" },
          keys.public,
        )
      ).body;
    const referrer = await identify("loop-referrer");
    const referee = await identify("loop-referee");
    await call(
      "POST",
      "/referrals",
      { referralCode: referrer.referralCode, refereeId: referee.id, environment: "test" },
      keys.public,
    );
    await call(
      "POST",
      "/checkpoints/ingest",
      { name: "purchase", externalUserId: "loop-referee", environment: "test" },
      keys.secret,
    );
    const deadline = Date.now() + 10_000;
    let grant: Json;
    for (;;) {
      grant = (await call("GET", `/reward-grants?customerId=${referrer.id}`)).body.data[0];
      if (grant?.status === "fulfilled" || Date.now() > deadline) break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    t.like(grant, { status: "fulfilled", fulfillment: { reference: `paid-${grant.id}` } });
    t.deepEqual(
      paid.map((payment) => payment.id),
      [grant.id],
      "paid once; the referee's discount is not a payout",
    );
    const discount = (await call("GET", `/reward-grants?customerId=${referee.id}`)).body.data[0];
    t.is(discount.status, "approved");
  } finally {
    await new Promise((resolve) => receiver.close(resolve));
  }
});
