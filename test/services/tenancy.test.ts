import { Code } from "@connectrpc/connect";
import test from "ava";
import { CustomersService } from "../../gen/referral/v1/customers_pb.js";
import { grpcCall, keys, rest, useServer } from "../helpers/server.js";

const server = useServer();
let other: { secret: string; public: string };

test.serial.before(async () => {
  const created = await rest(server, "POST", "/admin/applications", {
    key: keys.admin,
    body: { name: "Other app" },
  });
  other = { secret: created.body.secretKey, public: created.body.publicKey };
  // Data in the demo application, then the same external user in the other one.
  await rest(server, "POST", "/customers/identify", {
    key: keys.public,
    body: { externalUserId: "alice", name: "Alice" },
  });
  await rest(server, "POST", "/customers/identify", {
    key: keys.public,
    body: { externalUserId: "bob", name: "Bob" },
  });
  const alice = await rest(server, "GET", "/customers?externalUserId=alice", { key: keys.secret });
  await rest(server, "POST", "/referrals", {
    key: keys.public,
    body: { referralCode: alice.body.data[0].referralCode, refereeExternalUserId: "bob" },
  });
});

test.serial("another application sees none of the demo application's records", async (t) => {
  const customers = await rest(server, "GET", "/customers", { key: other.secret });
  t.deepEqual(customers.body, { total: 0, limit: 20, offset: 0, data: [] });
  const referrals = await rest(server, "GET", "/referrals", { key: other.secret });
  t.is(referrals.body.total, 0);
  const campaigns = await rest(server, "GET", "/campaigns", { key: other.public });
  t.deepEqual(campaigns.body, []);
  const webhooks = await rest(server, "GET", "/webhooks", { key: other.secret });
  t.deepEqual(webhooks.body, []);
});

test.serial("a record of another application is NOT_FOUND by id, on REST and gRPC", async (t) => {
  const alice = (await rest(server, "GET", "/customers?externalUserId=alice", { key: keys.secret }))
    .body.data[0];
  const viaRest = await rest(server, "GET", `/customers/${alice.id}`, { key: other.secret });
  t.is(viaRest.status, 404);
  const viaGrpc = await grpcCall(
    server,
    CustomersService.method.getCustomer,
    { id: alice.id },
    other.secret,
  );
  t.false(viaGrpc.ok);
  if (!viaGrpc.ok) t.is(viaGrpc.code, Code.NotFound);
});

test.serial(
  "another application cannot use a referral code, referee or campaign of the demo one",
  async (t) => {
    const alice = (
      await rest(server, "GET", "/customers?externalUserId=alice", { key: keys.secret })
    ).body.data[0];
    const campaign = (await rest(server, "GET", "/campaigns", { key: keys.public })).body[0];
    const withoutCampaign = await rest(server, "POST", "/referrals", {
      key: other.public,
      body: { referralCode: alice.referralCode, refereeId: alice.id },
    });
    t.is(withoutCampaign.status, 404, "the other application has no default campaign");
    const withCampaign = await rest(server, "POST", "/referrals", {
      key: other.public,
      body: { referralCode: alice.referralCode, refereeId: alice.id, campaignId: campaign.id },
    });
    t.is(withCampaign.status, 404);
    const checkpoint = await rest(server, "POST", "/checkpoints/ingest", {
      key: other.public,
      body: { name: "purchase", externalUserId: "alice", environment: "production" },
    });
    t.is(checkpoint.status, 404);
  },
);

test.serial("the same external user id in two applications is two customers", async (t) => {
  const mine = await rest(server, "POST", "/customers/identify", {
    key: other.public,
    body: { externalUserId: "alice", name: "Other Alice" },
  });
  t.is(mine.status, 201);
  const theirs = (
    await rest(server, "GET", "/customers?externalUserId=alice", { key: keys.secret })
  ).body.data[0];
  t.not(mine.body.id, theirs.id);
  t.is(theirs.name, "Alice");
});
