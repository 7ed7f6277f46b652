import { Code } from "@connectrpc/connect";
import test from "ava";
import { CustomersService } from "../../gen/referral/v1/customers_pb.js";
import { grpcCall, keys, rest, useServer } from "../helpers/server.js";

const server = useServer();
let other: { applicationId: string; secret: string; public: string };

test.serial.before(async () => {
  const created = await rest(server, "POST", "/admin/applications", {
    key: keys.admin,
    body: { name: "Other app" },
  });
  other = {
    applicationId: created.body.application.id,
    secret: created.body.secretKey,
    public: created.body.publicKey,
  };
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
    const bob = (await rest(server, "GET", "/customers?externalUserId=bob", { key: keys.secret }))
      .body.data[0];
    const demoCampaign = (await rest(server, "GET", "/campaigns", { key: keys.public })).body[0];
    // The other application gets a live default campaign and two customers of its own, so
    // each request below fails on the one foreign thing it names and on nothing else.
    const otherCampaign = await rest(
      server,
      "POST",
      `/admin/applications/${other.applicationId}/campaigns`,
      {
        key: keys.admin,
        body: { name: "Other", environment: "production", isLive: true, isDefault: true },
      },
    );
    t.is(otherCampaign.status, 201, JSON.stringify(otherCampaign.body));
    const identifyInOther = async (externalUserId: string) => {
      const identified = await rest(server, "POST", "/customers/identify", {
        key: other.public,
        body: { externalUserId, name: externalUserId },
      });
      t.is(identified.status, 201, JSON.stringify(identified.body));
      return identified.body;
    };
    const otherReferrer = await identifyInOther("other-referrer");
    const otherReferee = await identifyInOther("other-referee");

    const counts = async () => ({
      demo: {
        customers: (await rest(server, "GET", "/customers", { key: keys.secret })).body.total,
        referrals: (await rest(server, "GET", "/referrals", { key: keys.secret })).body.total,
      },
      other: {
        customers: (await rest(server, "GET", "/customers", { key: other.secret })).body.total,
        referrals: (await rest(server, "GET", "/referrals", { key: other.secret })).body.total,
      },
    });
    const before = await counts();
    t.deepEqual(before.other, { customers: 2, referrals: 0 });

    const refuse = async (body: Record<string, unknown>, message: string, what: string) => {
      const response = await rest(server, "POST", "/referrals", { key: other.public, body });
      t.is(response.status, 404, `${what}: ${JSON.stringify(response.body)}`);
      t.like(response.body, { code: "not_found", message }, what);
    };
    await refuse(
      {
        referralCode: alice.referralCode,
        refereeId: otherReferee.id,
        campaignId: otherCampaign.body.id,
      },
      `referral code ${alice.referralCode} not found`,
      "the demo application's referral code",
    );
    await refuse(
      { referralCode: otherReferrer.referralCode, refereeId: bob.id },
      `referee ${bob.id} not found`,
      "the demo application's customer as referee (by id)",
    );
    await refuse(
      { referralCode: otherReferrer.referralCode, refereeExternalUserId: "bob" },
      "referee with external user id bob not found",
      "the demo application's customer as referee (by external user id)",
    );
    await refuse(
      {
        referralCode: otherReferrer.referralCode,
        refereeId: otherReferee.id,
        campaignId: demoCampaign.id,
      },
      `campaign ${demoCampaign.id} not found`,
      "the demo application's campaign",
    );
    const checkpoint = await rest(server, "POST", "/checkpoints/ingest", {
      key: other.public,
      body: { name: "purchase", externalUserId: "alice", environment: "production" },
    });
    t.is(checkpoint.status, 404);
    t.is(checkpoint.body.message, "customer with external user id alice in production not found");

    t.deepEqual(await counts(), before, "nothing was created in either application");
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
