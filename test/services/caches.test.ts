import test from "ava";
import { type Json, keys, rest, useServer } from "../helpers/server.js";

/**
 * What is served from memory (authenticated keys, an application's
 * campaigns) is forgotten on every write path through this process: a
 * revoked key and an operator's campaign change take effect on the very next
 * call, not after the cache's lifetime.
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
