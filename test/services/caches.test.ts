import { create } from "@bufbuild/protobuf";
import test from "ava";
import { CheckpointsService } from "../../gen/referral/v1/checkpoints_pb.js";
import { CustomersService } from "../../gen/referral/v1/customers_pb.js";
import { ReferralsService } from "../../gen/referral/v1/referrals_pb.js";
import { CustomerSchema } from "../../gen/referral/v1/resources_pb.js";
import { toJson } from "../../src/contract/plain-codec.js";
import { encodeOnce, isShared, share } from "../../src/contract/shared-messages.js";
import { call, type Outcome, protocols } from "../helpers/callers.js";
import { type Json, keys, rest, useServer } from "../helpers/server.js";

/**
 * What is served from memory (authenticated keys, an application's
 * campaigns, customers' views) is forgotten on every write path through
 * this process: a revoked key, an operator's campaign change and a new
 * referral take effect on the very next call, not after a cache's lifetime.
 */

const server = useServer();

async function newApplication(name: string): Promise<{ id: string; secretKey: string }> {
  const created = await rest(server, "POST", "/admin/applications", {
    key: keys.admin,
    body: { name },
  });
  return { id: created.body.application.id, secretKey: created.body.secretKey };
}

test("a revoked key is refused on the next call, though it was just used (and cached)", async (t) => {
  const application = await newApplication("Keys");
  const used = await rest(server, "GET", "/customers", { key: application.secretKey });
  t.is(used.status, 200);
  const listed = await rest(server, "GET", `/admin/applications/${application.id}/api-keys`, {
    key: keys.admin,
  });
  const secret = listed.body.find((key: Json) => key.kind === "secret");
  await rest(server, "POST", `/admin/api-keys/${secret.id}/revoke`, { key: keys.admin });
  const refused = await rest(server, "GET", "/customers", { key: application.secretKey });
  t.is(refused.status, 401);
});

test("campaign changes show on the next read of every path that reads campaigns", async (t) => {
  const application = await newApplication("Campaigns");
  const key = application.secretKey;
  const campaignsNow = async () =>
    (await rest(server, "GET", "/campaigns?environment=production", { key })).body as Json[];
  t.deepEqual(await campaignsNow(), [], "read (and cached) while empty");

  const created = await rest(server, "POST", `/admin/applications/${application.id}/campaigns`, {
    key: keys.admin,
    body: { name: "Spring", environment: "production", isLive: true, isDefault: true },
  });
  t.is(created.status, 201);
  t.deepEqual(
    (await campaignsNow()).map((campaign) => campaign.name),
    ["Spring"],
    "a created campaign is listed at once",
  );

  const renamed = await rest(
    server,
    "PATCH",
    `/admin/campaigns/${created.body.id}?updateMask=name&updateMask=isLive`,
    { key: keys.admin, body: { name: "Summer", isLive: false } },
  );
  t.is(renamed.status, 200);
  t.like((await campaignsNow())[0], { name: "Summer", isLive: false });

  // The referral path reads the default campaign from the same cache: a
  // campaign that stopped being live refuses referrals at once.
  for (const externalUserId of ["referrer", "referee"]) {
    await rest(server, "POST", "/customers/identify", {
      key,
      body: { externalUserId, name: externalUserId },
    });
  }
  const referrer = await rest(server, "GET", "/customers?externalUserId=referrer", { key });
  const refused = await rest(server, "POST", "/referrals", {
    key,
    body: {
      referralCode: referrer.body.data[0].referralCode,
      refereeExternalUserId: "referee",
    },
  });
  t.is(refused.status, 400, JSON.stringify(refused.body));

  const second = await rest(server, "POST", `/admin/applications/${application.id}/campaigns`, {
    key: keys.admin,
    body: { name: "Autumn", environment: "production", isLive: true, isDefault: true },
  });
  const listed = await campaignsNow();
  t.deepEqual(
    listed.map((campaign) => [campaign.name, campaign.isDefault]),
    [
      ["Autumn", true],
      ["Summer", false],
    ],
    "the new default cleared the old one's flag",
  );
  const accepted = await rest(server, "POST", "/referrals", {
    key,
    body: {
      referralCode: referrer.body.data[0].referralCode,
      refereeExternalUserId: "referee",
    },
  });
  t.is(accepted.status, 201);
  t.is(accepted.body.campaignId, second.body.id, "the referral went to the new default");

  await rest(server, "DELETE", `/admin/campaigns/${second.body.id}`, { key: keys.admin });
  t.deepEqual(
    (await campaignsNow()).map((campaign) => campaign.name),
    ["Summer"],
    "a deleted campaign leaves the list at once",
  );
});

/**
 * A customer's view (its fields and referral facts) is kept in memory once
 * read, with its encodings; every write that changes what it shows must
 * drop it. Each step reads first, so a stale view would be served.
 */
for (const protocol of protocols) {
  test(`${protocol}: a read customer shows every change on the next read`, async (t) => {
    const application = await newApplication(`Views ${protocol}`);
    const key = application.secretKey;
    await rest(server, "POST", `/admin/applications/${application.id}/campaigns`, {
      key: keys.admin,
      body: {
        name: "Views",
        environment: "production",
        isLive: true,
        isDefault: true,
        proposedRewardTrigger: "purchase",
      },
    });
    const ok = (outcome: Outcome): Json => {
      if (!outcome.ok) throw new Error(`${outcome.code}: ${outcome.message}`);
      return outcome.body;
    };
    const identify = async (externalUserId: string, fields: Json = {}) =>
      ok(
        await call(
          server,
          protocol,
          CustomersService.method.identifyCustomer,
          { externalUserId, name: externalUserId, ...fields },
          key,
        ),
      );
    const customer = async (id: string) =>
      ok(await call(server, protocol, CustomersService.method.getCustomer, { id }, key));
    const page = async () =>
      ok(await call(server, protocol, CustomersService.method.listCustomers, {}, key)).data;

    const referrer = await identify("referrer", { email: "referrer@example.com" });
    const referee = await identify("referee");
    // Read twice: the second read is served from the kept view.
    for (let read = 0; read < 2; read++) {
      t.like(await customer(referrer.id), { visitedReferralsCount: 0 });
      t.like(await customer(referee.id), { referredById: null, customProperties: {} });
      t.is((await page()).length, 2);
    }

    const referral = ok(
      await call(
        server,
        protocol,
        ReferralsService.method.createReferral,
        { referralCode: referrer.referralCode, refereeExternalUserId: "referee" },
        key,
      ),
    );
    t.like(await customer(referrer.id), { visitedReferralsCount: 1, convertedReferralsCount: 0 });
    t.like(await customer(referee.id), {
      referredById: referrer.id,
      referredByReferralId: referral.id,
      referredBy: { name: "referrer", email: "referrer@example.com" },
    });

    await identify("referrer", { name: "Renamed", email: "renamed@example.com" });
    t.like(await customer(referee.id), {
      referredBy: { name: "Renamed", email: "renamed@example.com" },
    });
    t.like(
      (await page()).find((listed: Json) => listed.id === referee.id),
      { referredBy: { name: "Renamed" } },
      "the list page shows it too",
    );

    ok(
      await call(
        server,
        protocol,
        CheckpointsService.method.ingestCheckpoint,
        { name: "purchase", externalUserId: "referee", environment: "production" },
        key,
      ),
    );
    t.like(await customer(referrer.id), { visitedReferralsCount: 1, convertedReferralsCount: 1 });

    await identify("referee", { customProperties: { plan: "pro" } });
    t.like(await customer(referee.id), { customProperties: { plan: "pro" } });
    t.like(
      (await page()).find((listed: Json) => listed.id === referee.id),
      {
        customProperties: { plan: "pro" },
      },
    );
  });
}

test("a kept view is one frozen message, encoded once per wire format", (t) => {
  const message = share(create(CustomerSchema, { id: "cus_1", name: "Ada" }));
  t.true(isShared(message));
  t.throws(
    () => {
      (message as { name: string }).name = "Eve";
    },
    { instanceOf: TypeError },
  );
  const format = {};
  let encodings = 0;
  const encode = () => {
    encodings += 1;
    return toJson(CustomerSchema, message);
  };
  t.is(encodeOnce(message, format, encode), encodeOnce(message, format, encode));
  t.is(encodings, 1);
  const fresh = create(CustomerSchema, { id: "cus_2" });
  encodeOnce(fresh, format, encode);
  encodeOnce(fresh, format, encode);
  t.is(encodings, 3, "a message that is not shared is encoded every time");
});
