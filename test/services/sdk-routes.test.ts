import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import test from "ava";
import { CampaignsService } from "../../gen/referral/v1/campaigns_pb.js";
import { startReceiver } from "../helpers/receiver.js";
import { deliveriesOf, waitForRelay } from "../helpers/relay.js";
import { type Json, keys, rest, useServer } from "../helpers/server.js";
import { clockPasses } from "../helpers/wait.js";

/**
 * The routes the Flock mobile SDKs call, with requests shaped as the SDKs
 * send them: the raw public key in `Authorization` and `Content-Type:
 * application/json` on every request, bodiless POSTs and GETs included.
 */

// The webhook test delivers to a receiver on loopback.
const server = useServer({ env: { WEBHOOK_ALLOW_PRIVATE: "true" } });

/** A request as an SDK sends it: no body, the JSON content type all the same. */
function sdk(
  method: "GET" | "POST",
  path: string,
  options: { key?: string; origin?: string } = {},
): Promise<{ status: number; body: Json; headers: Headers }> {
  return rest(server, method, path, {
    key: options.key ?? keys.public,
    headers: {
      "content-type": "application/json",
      ...(options.origin ? { origin: options.origin } : {}),
    },
  });
}

const admin = (method: string, path: string, body?: unknown) =>
  rest(server, method, path, { key: keys.admin, body });

/** A new application with its keys; its campaigns are the test's own. */
async function newApplication(name: string): Promise<{ id: string; publicKey: string }> {
  const created = await admin("POST", "/admin/applications", { name });
  if (created.status !== 201) throw new Error(`create app: ${created.status}`);
  return { id: created.body.application.id, publicKey: created.body.publicKey };
}

async function newCampaign(applicationId: string, campaign: Json): Promise<Json> {
  const created = await admin("POST", `/admin/applications/${applicationId}/campaigns`, campaign);
  if (created.status !== 201) throw new Error(`create campaign: ${JSON.stringify(created.body)}`);
  return created.body;
}

/** The demo campaigns as GET /campaigns lists them, by environment. */
async function demoCampaigns(): Promise<Record<string, Json>> {
  const listed = await sdk("GET", "/campaigns");
  return Object.fromEntries(listed.body.map((c: Json) => [c.environment, c]));
}

test.serial(
  "GET /campaigns/live: the live campaign, production without an environment",
  async (t) => {
    const demo = await demoCampaigns();
    const bare = await sdk("GET", "/campaigns/live");
    t.is(bare.status, 200);
    t.deepEqual(bare.body, demo.production, "the same JSON as an item of GET /campaigns");
    const production = await sdk("GET", "/campaigns/live?environment=production");
    t.deepEqual(production.body, demo.production);
    const inTest = await sdk("GET", "/campaigns/live?environment=test");
    t.deepEqual(inTest.body, demo.test);
    t.is(
      (await sdk("GET", "/campaigns/live", { key: keys.secret })).status,
      200,
      "secret keys too",
    );

    const refused = await sdk("GET", "/campaigns/live?environment=staging");
    t.is(refused.status, 400);
    t.regex(refused.body.message, /^environment must be one of: production, test/);
    t.is((await sdk("GET", "/campaigns/live", { key: "pk_unknown" })).status, 401);
  },
);

test.serial(
  "GET /campaigns/live: the default campaign when live, else the newest live one; none is 404",
  async (t) => {
    const app = await newApplication("Live choice");
    const live = () => sdk("GET", "/campaigns/live", { key: app.publicKey });

    const none = await live();
    t.is(none.status, 404);
    t.deepEqual(none.body, {
      code: "not_found",
      message: "live campaign in production not found",
      details: [],
    });

    await newCampaign(app.id, { name: "Draft", environment: "production", isDefault: true });
    t.is((await live()).status, 404, "a default campaign that is not live is not the live one");
    const older = await newCampaign(app.id, {
      name: "Older",
      environment: "production",
      isLive: true,
    });
    const newer = await newCampaign(app.id, {
      name: "Newer",
      environment: "production",
      isLive: true,
    });
    await newCampaign(app.id, { name: "Test only", environment: "test", isLive: true });
    t.is((await live()).body.id, newer.id, "the newest live campaign");

    await admin("PATCH", `/admin/campaigns/${older.id}?updateMask=isDefault`, { isDefault: true });
    t.is((await live()).body.id, older.id, "the live default campaign wins");
    t.is(
      (await sdk("GET", "/campaigns/live?environment=test", { key: app.publicKey })).body.name,
      "Test only",
    );
  },
);

test.serial(
  "POST /campaigns/{id}/ping: bodiless, records lastPingAt and lastPingOrigin",
  async (t) => {
    const { production } = await demoCampaigns();
    const before = Date.now();
    const pinged = await sdk("POST", `/campaigns/${production.id}/ping`, {
      origin: "https://shop.example.com",
    });
    t.is(pinged.status, 200);
    t.deepEqual(pinged.body, { id: production.id });

    const afterPing = (await demoCampaigns()).production;
    t.is(afterPing.lastPingOrigin, "https://shop.example.com");
    const pingedAt = Date.parse(afterPing.lastPingAt);
    t.true(pingedAt >= before - 5 && pingedAt <= Date.now(), afterPing.lastPingAt);
    t.is(afterPing.updatedAt, production.updatedAt, "a ping changes no setting");
    t.deepEqual(
      { ...afterPing, lastPingAt: null, lastPingOrigin: null },
      { ...production, lastPingAt: null, lastPingOrigin: null },
      "nothing else moves",
    );

    // A native app sends no Origin: the origin is null again.
    t.is((await sdk("POST", `/campaigns/${production.id}/ping`)).status, 200);
    const native = (await demoCampaigns()).production;
    t.is(native.lastPingOrigin, null);
    t.true(Date.parse(native.lastPingAt) >= pingedAt);
    t.deepEqual(
      (await sdk("GET", "/campaigns/live")).body,
      native,
      "the live campaign shows it too",
    );

    // The same with a body of {} or no content type at all, and with a secret key.
    for (const options of [
      { key: keys.public, body: {} },
      { key: keys.public },
      { key: keys.secret, body: {} },
    ]) {
      t.is((await rest(server, "POST", `/campaigns/${production.id}/ping`, options)).status, 200);
    }
  },
);

test.serial(
  "POST /campaigns/{id}/ping: an unknown campaign or another application's is 404",
  async (t) => {
    const missing = await sdk("POST", "/campaigns/cmp_missing/ping");
    t.is(missing.status, 404);
    t.deepEqual(missing.body, {
      code: "not_found",
      message: "campaign cmp_missing not found",
      details: [],
    });

    const other = await newApplication("Ping other");
    const theirs = await newCampaign(other.id, {
      name: "Theirs",
      environment: "production",
      isLive: true,
    });
    const crossed = await sdk("POST", `/campaigns/${theirs.id}/ping`, {
      origin: "https://evil.example",
    });
    t.is(crossed.status, 404);
    t.is(crossed.body.message, `campaign ${theirs.id} not found`);
    const [unchanged] = (await sdk("GET", "/campaigns", { key: other.publicKey })).body;
    t.is(unchanged.lastPingAt, null, "another application's ping changes nothing");
    t.is(unchanged.lastPingOrigin, null);
    t.is((await sdk("POST", `/campaigns/${theirs.id}/ping`, { key: other.publicKey })).status, 200);

    const huge = await sdk("POST", `/campaigns/${theirs.id}/ping`, {
      key: other.publicKey,
      origin: `https://${"a".repeat(2100)}.example`,
    });
    t.is(huge.status, 400);
    t.is(huge.body.message, "Origin must be at most 2048 characters");

    const invalid = await rest(server, "POST", "/campaigns/cmp_missing/ping", {
      key: keys.public,
      rawBody: "{",
    });
    t.is(invalid.status, 400, "a body that is not JSON stays refused");
    t.is(invalid.body.code, "invalid_argument");
  },
);

test.serial("POST /campaigns/{id}/ping over Connect records the Origin header too", async (t) => {
  const { production } = await demoCampaigns();
  const client = createClient(
    CampaignsService,
    createConnectTransport({
      baseUrl: server.baseUrl,
      httpVersion: "1.1",
      interceptors: [
        (next) => (request) => {
          request.header.set("authorization", keys.public);
          request.header.set("origin", "https://web.example.com");
          return next(request);
        },
      ],
    }),
  );
  t.is((await client.pingCampaign({ id: production.id })).id, production.id);
  t.is((await demoCampaigns()).production.lastPingOrigin, "https://web.example.com");
});

test.serial("a ping raises no webhook event", async (t) => {
  const receiver = await startReceiver();
  try {
    const webhook = await rest(server, "POST", "/webhooks", {
      key: keys.secret,
      // Plain http is for test endpoints: the test campaign is pinged.
      body: { url: `${receiver.url}/all`, environment: "test" },
    });
    t.is(webhook.status, 201);
    const campaign = (await demoCampaigns()).test;
    t.is((await sdk("POST", `/campaigns/${campaign.id}/ping`)).status, 200);
    // An identify afterwards raises customer.created: once it is relayed, the
    // endpoint's deliveries are all it will get for both calls.
    const customer = await sdk("POST", "/customers/identify");
    t.is(customer.status, 400, "the SDK's bodiless identify is read as {}");
    const identified = await rest(server, "POST", "/customers/identify", {
      key: keys.public,
      body: { externalUserId: "ping-watcher", name: "Watcher", environment: "test" },
    });
    await waitForRelay(server, "customers", identified.body.id);
    const types = (await deliveriesOf(server, webhook.body.webhook.id)).map((d) => d.eventType);
    t.deepEqual(types, ["customer.created"]);
  } finally {
    await receiver.close();
  }
});

test.serial(
  "GET /campaign-checkpoints: the reward trigger and the placements of the demo campaign",
  async (t) => {
    const { production } = await demoCampaigns();
    const listed = await sdk("GET", `/campaign-checkpoints?campaignId=${production.id}`);
    t.is(listed.status, 200);
    t.deepEqual(Object.keys(listed.body), ["data"]);
    const [reward, placement, ...rest] = listed.body.data;
    t.deepEqual(rest, []);
    t.deepEqual(Object.keys(reward), [
      "id",
      "campaignId",
      "checkpointName",
      "trigger",
      "placementId",
      "createdAt",
      "updatedAt",
    ]);
    t.like(reward, {
      campaignId: production.id,
      checkpointName: "purchase",
      trigger: "reward",
      placementId: null,
    });
    t.like(placement, {
      campaignId: production.id,
      checkpointName: "onboarding_complete",
      trigger: "placement",
      placementId: "home_banner",
    });
    for (const checkpoint of listed.body.data) {
      t.regex(checkpoint.id, /^ccp_/);
      t.regex(checkpoint.createdAt, /^\d{4}-\d\d-\d\dT.*Z$/);
    }
    t.is(
      (await sdk("GET", `/campaign-checkpoints?campaign_id=${production.id}`, { key: keys.secret }))
        .body.data.length,
      2,
      "snake_case and secret keys too",
    );
  },
);

test.serial(
  "GET /campaign-checkpoints: campaignId is required; unknown and other applications' are 404",
  async (t) => {
    const missing = await sdk("GET", "/campaign-checkpoints");
    t.is(missing.status, 400);
    t.deepEqual(missing.body, {
      code: "invalid_argument",
      message: "campaignId is required",
      details: [{ field: "campaignId", description: "is required" }],
    });
    const unknown = await sdk("GET", "/campaign-checkpoints?campaignId=cmp_missing");
    t.is(unknown.status, 404);
    t.is(unknown.body.message, "campaign cmp_missing not found");

    const other = await newApplication("Checkpoints other");
    const theirs = await newCampaign(other.id, {
      name: "Theirs",
      environment: "production",
      proposedRewardTrigger: "signup",
    });
    const crossed = await sdk("GET", `/campaign-checkpoints?campaignId=${theirs.id}`);
    t.is(crossed.status, 404);
    t.is(crossed.body.message, `campaign ${theirs.id} not found`);
    const own = await sdk("GET", `/campaign-checkpoints?campaignId=${theirs.id}`, {
      key: other.publicKey,
    });
    t.deepEqual(
      own.body.data.map((c: Json) => [c.trigger, c.checkpointName]),
      [["reward", "signup"]],
    );

    await admin("DELETE", `/admin/campaigns/${theirs.id}`);
    const deleted = await sdk("GET", `/campaign-checkpoints?campaignId=${theirs.id}`, {
      key: other.publicKey,
    });
    t.is(deleted.status, 404, "a deleted campaign has none");
  },
);

test.serial("the reward checkpoint follows the trigger through admin updates", async (t) => {
  const app = await newApplication("Trigger steps");
  const campaign = await newCampaign(app.id, {
    name: "Steps",
    environment: "production",
    proposedRewardTrigger: "signup",
  });
  const checkpoints = async (): Promise<Json[]> =>
    (await sdk("GET", `/campaign-checkpoints?campaignId=${campaign.id}`, { key: app.publicKey }))
      .body.data;
  const update = (mask: string, body: Json) =>
    admin("PATCH", `/admin/campaigns/${campaign.id}?updateMask=${mask}`, body);

  const [first] = await checkpoints();
  t.like(first, { trigger: "reward", checkpointName: "signup" });
  t.is(first.createdAt, campaign.createdAt);

  await update("name", { name: "Renamed" });
  t.deepEqual(await checkpoints(), [first], "another field changes nothing");

  // The manual trigger wins over the proposed one: same checkpoint, renamed
  // (once the clock has moved on, so its updatedAt can move).
  await clockPasses(first.updatedAt);
  t.is((await update("manualRewardTrigger", { manualRewardTrigger: "purchase" })).status, 200);
  const [renamed] = await checkpoints();
  t.like(renamed, { id: first.id, createdAt: first.createdAt, checkpointName: "purchase" });
  t.true(renamed.updatedAt > first.updatedAt, "updatedAt moves with the name");

  await update("manualRewardTrigger", { manualRewardTrigger: null });
  t.like((await checkpoints())[0], { id: first.id, checkpointName: "signup" });

  await update("proposedRewardTrigger", { proposedRewardTrigger: null });
  t.deepEqual(await checkpoints(), [], "no trigger, no reward checkpoint");

  await update("proposedRewardTrigger", { proposedRewardTrigger: "order" });
  const [again] = await checkpoints();
  t.like(again, { trigger: "reward", checkpointName: "order" });
  t.not(again.id, first.id, "a trigger set anew is a new checkpoint");
});

test.serial(
  "placement checkpoints are set through the admin API, keeping ids by name",
  async (t) => {
    const app = await newApplication("Placements");
    const campaign = await newCampaign(app.id, {
      name: "Placed",
      environment: "production",
      manualRewardTrigger: "purchase",
      campaignPages: [{ path: "/invite", placementId: "home_banner" }],
    });
    const path = `/admin/campaigns/${campaign.id}/checkpoints`;
    const checkpoints = async (): Promise<Json[]> =>
      (await sdk("GET", `/campaign-checkpoints?campaignId=${campaign.id}`, { key: app.publicKey }))
        .body.data;
    const summary = (data: Json[]) => data.map((c) => [c.trigger, c.checkpointName, c.placementId]);

    const set = await admin("PUT", path, {
      placements: [
        { checkpointName: "onboarding_complete", placementId: "home_banner" },
        { checkpointName: "level_up", placementId: "sidebar" },
      ],
    });
    t.is(set.status, 200);
    const listed = await checkpoints();
    t.deepEqual(set.body.data, listed, "the answer is what the SDKs then read");
    t.deepEqual(summary(listed), [
      ["reward", "purchase", null],
      ["placement", "onboarding_complete", "home_banner"],
      ["placement", "level_up", "sidebar"],
    ]);
    const [, onboarding, levelUp] = listed;
    await clockPasses(levelUp.updatedAt);

    const reset = await admin("PUT", path, {
      placements: [
        { checkpointName: "level_up", placementId: "home_banner" },
        { checkpointName: "onboarding_complete", placementId: "home_banner" },
      ],
    });
    const [, movedLevelUp, keptOnboarding] = reset.body.data;
    t.deepEqual(keptOnboarding, onboarding, "an unchanged entry keeps everything");
    t.like(movedLevelUp, {
      id: levelUp.id,
      createdAt: levelUp.createdAt,
      placementId: "home_banner",
    });
    t.true(movedLevelUp.updatedAt > levelUp.updatedAt);

    const duplicate = await admin("PUT", path, {
      placements: [
        { checkpointName: "a", placementId: "x" },
        { checkpointName: "a", placementId: "y" },
      ],
    });
    t.is(duplicate.status, 400);
    t.is(duplicate.body.message, 'placements[1].checkpointName repeats "a"');
    const blank = await admin("PUT", path, { placements: [{ checkpointName: "a" }] });
    t.is(blank.body.message, "placements[0].placementId is required");
    t.deepEqual(await checkpoints(), reset.body.data, "a refused change changes nothing");
    t.is((await admin("PUT", "/admin/campaigns/cmp_missing/checkpoints", {})).status, 404);
    const byKey = await rest(server, "PUT", path, { key: keys.secret, body: {} });
    t.is(byKey.status, 401, "API keys cannot set checkpoints");

    t.is((await admin("PUT", path, { placements: [] })).status, 200);
    t.deepEqual(summary(await checkpoints()), [["reward", "purchase", null]]);
  },
);

test.serial(
  "a campaign stored before checkpoints existed gets a stable reward checkpoint",
  async (t) => {
    const app = await newApplication("Legacy");
    const campaign = await newCampaign(app.id, {
      name: "Old",
      environment: "production",
      proposedRewardTrigger: "purchase",
    });
    // As an older version stored it: no checkpoint fields (read before any API read caches it).
    await server.app.store.system.campaigns.updateOne(
      { _id: campaign.id },
      { $unset: { rewardCheckpoint: "", placementCheckpoints: "" } },
    );
    const read = async (): Promise<Json[]> =>
      (await sdk("GET", `/campaign-checkpoints?campaignId=${campaign.id}`, { key: app.publicKey }))
        .body.data;
    const [derived] = await read();
    t.like(derived, {
      id: campaign.id.replace(/^cmp_/, "ccp_"),
      checkpointName: "purchase",
      createdAt: campaign.createdAt,
      updatedAt: campaign.updatedAt,
    });
    t.deepEqual(await read(), [derived], "the same on every read");
    await admin("PATCH", `/admin/campaigns/${campaign.id}?updateMask=name`, { name: "Renamed" });
    t.deepEqual(await read(), [derived], "an update stores it as it was read");
    const stored = await server.app.store.system.campaigns.findOne({ _id: campaign.id });
    t.is((stored?.rewardCheckpoint as Json)?.id, derived.id);
  },
);
