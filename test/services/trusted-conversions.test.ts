import test from "ava";
import { userHashOf } from "../../src/domain/identity.js";
import { type Protocol, protocols } from "../helpers/callers.js";
import { payout } from "../helpers/rewards.js";
import { type Json, keys, rest, useServer } from "../helpers/server.js";
import { tenantCalls } from "../helpers/tenant-calls.js";

/**
 * Conversions trusted by their source (issue 41, docs/trust.md): a
 * campaign's `publicCheckpoints` says what a reward-trigger checkpoint that
 * only a public key vouches for does — `hold` (the default: it converts,
 * and its grants wait for the backend's confirmation or a reviewer),
 * `convert`, `ignore`. On REST, gRPC and Connect, with the service's clock
 * ours, so holds end when a test says.
 */

let elapsedMs = 0;
const day = 24 * 60 * 60 * 1000;
const server = useServer({
  clock: () => new Date(Date.now() + elapsedMs),
  env: { REFERRAL_VELOCITY_LIMIT: "100000" },
});

const { admin, send, okBody } = tenantCalls(server);

/** A fresh application with a live campaign converting on "purchase", and an identity secret. */
interface App {
  id: string;
  secretKey: string;
  publicKey: string;
  identitySecret: string;
  campaign: Json;
}

let apps = 0;
async function newApplication(campaign: Json = {}): Promise<App> {
  const created = await admin("POST", "/admin/applications", { name: `conversions ${++apps}` });
  const id = created.application.id;
  const made = await admin("POST", `/admin/applications/${id}/campaigns`, {
    name: "Conversions",
    environment: "production",
    isLive: true,
    isDefault: true,
    proposedRewardTrigger: "purchase",
    rewards: [payout({ payoutAmount: 20 })],
    ...campaign,
  });
  const rotated = await admin("POST", `/admin/applications/${id}/identity-secret`, {});
  return {
    id,
    secretKey: created.secretKey,
    publicKey: created.publicKey,
    identitySecret: rotated.identitySecret,
    campaign: made,
  };
}

/**
 * What an app does with its public key alone: a referrer, a referee who
 * uses the referrer's code, and the referee's purchase. Returns the ids.
 */
async function publicConversion(
  protocol: Protocol,
  app: App,
  name: string,
  referrerCode?: string,
): Promise<{ referrerId: string; refereeId: string; referralId: string; code: string }> {
  const code =
    referrerCode ??
    (
      await okBody(
        protocol,
        "IdentifyCustomer",
        { externalUserId: `${name}-referrer`, name: "Referrer" },
        app.publicKey,
      )
    ).referralCode;
  const referee = await okBody(
    protocol,
    "IdentifyCustomer",
    { externalUserId: `${name}-referee`, name: "Referee" },
    app.publicKey,
  );
  const created = await okBody(
    protocol,
    "CreateReferral",
    { referralCode: code, refereeExternalUserId: `${name}-referee`, environment: "production" },
    app.publicKey,
  );
  await okBody(protocol, "IngestCheckpoint", purchase(`${name}-referee`), app.publicKey);
  return {
    referrerId: created.referrerId,
    refereeId: referee.id,
    referralId: created.id,
    code,
  };
}

const purchase = (externalUserId: string, userHash?: string): Json => ({
  name: "purchase",
  externalUserId,
  environment: "production",
  ...(userHash ? { userHash } : {}),
});

async function grantsOf(protocol: Protocol, app: App, referralId: string): Promise<Json[]> {
  return (await okBody(protocol, "ListRewardGrants", { referralId }, app.secretKey)).data;
}

async function referralOf(protocol: Protocol, app: App, referralId: string): Promise<Json> {
  const listed = await okBody(protocol, "ListReferrals", {}, app.secretKey);
  return listed.data.find((referral: Json) => referral.id === referralId);
}

test.serial("a campaign holds public checkpoints unless told otherwise, and says so", async (t) => {
  const app = await newApplication();
  t.is(app.campaign.publicCheckpoints, "hold");
  const converting = await admin(
    "PATCH",
    `/admin/campaigns/${app.campaign.id}?updateMask=publicCheckpoints`,
    { publicCheckpoints: "convert" },
  );
  t.is(converting.publicCheckpoints, "convert");
  const refused = await rest(
    server,
    "PATCH",
    `/admin/campaigns/${app.campaign.id}?updateMask=publicCheckpoints`,
    { key: keys.admin, body: { publicCheckpoints: "trust" } },
  );
  t.is(refused.status, 400);
  t.regex(refused.body.message, /publicCheckpoints/);
  const demo = await rest(server, "GET", "/campaigns", { key: keys.secret });
  t.true(demo.body.length > 0);
  for (const campaign of demo.body) t.is(campaign.publicCheckpoints, "hold", campaign.name);
});

for (const protocol of protocols) {
  test.serial(
    `${protocol}: self-made referees' public purchases earn no payable reward: their grants wait for the backend`,
    async (t) => {
      const app = await newApplication();
      const first = await publicConversion(protocol, app, "self-1");
      await publicConversion(protocol, app, "self-2", first.code);
      await publicConversion(protocol, app, "self-3", first.code);

      const referral = await referralOf(protocol, app, first.referralId);
      t.is(referral.status, "accepted", "the referral converts: the funnel counts it");
      const [grant] = await grantsOf(protocol, app, first.referralId);
      t.like(grant, { status: "pending", statusReason: "unverified_conversion" });
      t.like(grant.statusHistory[0], { toStatus: "pending", reason: "unverified_conversion" });

      const balance = await okBody(
        protocol,
        "GetCustomerRewardBalance",
        { customerId: first.referrerId },
        app.secretKey,
      );
      const usd = balance.balances.find((entry: Json) => entry.currency === "usd");
      t.is(usd.approved.amount, 0, "nothing to pay");
      t.like(usd.pending, { amount: 60, count: 3 });

      // No hold on the reward, yet the sweep approves none of them, however late.
      elapsedMs += 400 * day;
      try {
        await server.app.sweepRewards();
      } finally {
        elapsedMs -= 400 * day;
      }
      t.is((await grantsOf(protocol, app, first.referralId))[0].status, "pending");
    },
  );

  test.serial(
    `${protocol}: the backend's purchase confirms a held conversion: its grants are approved, once`,
    async (t) => {
      const app = await newApplication();
      const ids = await publicConversion(protocol, app, "confirmed");
      await okBody(protocol, "IngestCheckpoint", purchase("confirmed-referee"), app.secretKey);
      const [grant] = await grantsOf(protocol, app, ids.referralId);
      t.like(grant, { status: "approved", statusReason: null });
      t.is(grant.statusHistory.length, 2);
      t.like(grant.statusHistory[1], {
        fromStatus: "pending",
        toStatus: "approved",
        cause: "confirmed",
      });
      t.regex(grant.statusHistory[1].actorId, /^chk_/);
      // Confirmed once: the next purchase changes nothing.
      await okBody(protocol, "IngestCheckpoint", purchase("confirmed-referee"), app.secretKey);
      t.is((await grantsOf(protocol, app, ids.referralId))[0].statusHistory.length, 2);
      t.is((await referralOf(protocol, app, ids.referralId)).status, "accepted");
    },
  );

  test.serial(
    `${protocol}: a purchase with the referee's valid userHash converts and confirms like the backend's`,
    async (t) => {
      const app = await newApplication();
      const held = await publicConversion(protocol, app, "hashed");
      const hash = userHashOf(app.identitySecret, "hashed-referee");
      await okBody(protocol, "IngestCheckpoint", purchase("hashed-referee", hash), app.publicKey);
      t.is((await grantsOf(protocol, app, held.referralId))[0].status, "approved", "confirmed");

      // A verified purchase converts at once, nothing held.
      await okBody(
        protocol,
        "IdentifyCustomer",
        { externalUserId: "direct-referee", name: "Direct" },
        app.publicKey,
      );
      const created = await okBody(
        protocol,
        "CreateReferral",
        { referralCode: held.code, refereeExternalUserId: "direct-referee" },
        app.publicKey,
      );
      const directHash = userHashOf(app.identitySecret, "direct-referee");
      await okBody(
        protocol,
        "IngestCheckpoint",
        purchase("direct-referee", directHash),
        app.publicKey,
      );
      const [grant] = await grantsOf(protocol, app, created.id);
      t.like(grant, { status: "approved", statusReason: null });
      t.is(grant.statusHistory.length, 1);
    },
  );

  test.serial(
    `${protocol}: a reviewer may approve or reject a held grant; the backend's later purchase then changes nothing`,
    async (t) => {
      const app = await newApplication();
      const approvedOne = await publicConversion(protocol, app, "reviewed-a");
      const rejectedOne = await publicConversion(protocol, app, "reviewed-b");
      const [toApprove] = await grantsOf(protocol, app, approvedOne.referralId);
      const [toReject] = await grantsOf(protocol, app, rejectedOne.referralId);
      const approved = await okBody(
        protocol,
        "UpdateRewardGrantStatus",
        { id: toApprove.id, status: "approved", reason: "checked the order" },
        app.secretKey,
      );
      t.like(approved, { status: "approved", statusReason: "checked the order" });
      const rejected = await okBody(
        protocol,
        "UpdateRewardGrantStatus",
        { id: toReject.id, status: "rejected", reason: "no such order" },
        app.secretKey,
      );
      t.is(rejected.status, "rejected");
      for (const name of ["reviewed-a-referee", "reviewed-b-referee"]) {
        await okBody(protocol, "IngestCheckpoint", purchase(name), app.secretKey);
      }
      t.like((await grantsOf(protocol, app, approvedOne.referralId))[0], {
        status: "approved",
        statusReason: "checked the order",
      });
      t.is((await grantsOf(protocol, app, rejectedOne.referralId))[0].status, "rejected");
    },
  );

  test.serial(
    `${protocol}: confirmed during its hold, a grant is approved by the sweep when the hold ends`,
    async (t) => {
      const app = await newApplication({ rewards: [payout({ holdPeriod: "7d" })] });
      const ids = await publicConversion(protocol, app, "holding");
      await okBody(protocol, "IngestCheckpoint", purchase("holding-referee"), app.secretKey);
      const [grant] = await grantsOf(protocol, app, ids.referralId);
      t.like(grant, { status: "pending", statusReason: null });
      t.like(grant.statusHistory[1], { fromStatus: "pending", toStatus: "pending" });
      elapsedMs += 7 * day;
      try {
        await server.app.sweepRewards();
      } finally {
        elapsedMs -= 7 * day;
      }
      const [after] = await grantsOf(protocol, app, ids.referralId);
      t.like(after, { status: "approved" });
      t.like(after.statusHistory[2], { cause: "hold_ended" });
    },
  );

  test.serial(
    `${protocol}: publicCheckpoints convert approves public conversions as before; ignore converts nothing`,
    async (t) => {
      const converting = await newApplication({ publicCheckpoints: "convert" });
      const converted = await publicConversion(protocol, converting, "convert");
      t.like((await grantsOf(protocol, converting, converted.referralId))[0], {
        status: "approved",
        statusReason: null,
      });

      const ignoring = await newApplication({ publicCheckpoints: "ignore" });
      const ignored = await publicConversion(protocol, ignoring, "ignore");
      t.is((await referralOf(protocol, ignoring, ignored.referralId)).status, "pending");
      t.deepEqual(await grantsOf(protocol, ignoring, ignored.referralId), []);
      // The backend's purchase converts it.
      await okBody(protocol, "IngestCheckpoint", purchase("ignore-referee"), ignoring.secretKey);
      t.is((await referralOf(protocol, ignoring, ignored.referralId)).status, "accepted");
      t.is((await grantsOf(protocol, ignoring, ignored.referralId))[0].status, "approved");
    },
  );
}

test.serial("racing confirmations and reviews move each held grant once each", async (t) => {
  const app = await newApplication();
  for (let round = 0; round < 6; round++) {
    const ids = await publicConversion("rest", app, `race-${round}`);
    const [grant] = await grantsOf("rest", app, ids.referralId);
    const confirm = () =>
      send("rest", "IngestCheckpoint", purchase(`race-${round}-referee`), app.secretKey);
    const review = () =>
      send(
        "rest",
        "UpdateRewardGrantStatus",
        { id: grant.id, status: "rejected", reason: "race" },
        app.secretKey,
      );
    const outcomes = await Promise.all([confirm(), confirm(), review()]);
    for (const outcome of outcomes) t.true(outcome.ok, JSON.stringify(outcome));
    const [after] = await grantsOf("rest", app, ids.referralId);
    const causes = after.statusHistory.map((change: Json) => change.cause);
    t.is(after.status, "rejected");
    t.is(causes.filter((cause: string) => cause === "review").length, 1);
    t.true(causes.filter((cause: string) => cause === "confirmed").length <= 1, causes.join());
    t.is(causes.length, causes.includes("confirmed") ? 3 : 2);
  }
});

test.serial("a reversal ends the wait: a later backend purchase confirms nothing", async (t) => {
  const app = await newApplication();
  const ids = await publicConversion("rest", app, "reversed");
  await okBody(
    "rest",
    "UpdateReferralStatus",
    { id: ids.referralId, status: "reversed", reason: "refund" },
    app.secretKey,
  );
  await okBody("rest", "IngestCheckpoint", purchase("reversed-referee"), app.secretKey);
  const [grant] = await grantsOf("rest", app, ids.referralId);
  t.is(grant.status, "voided");
  t.is(grant.statusHistory.length, 2);
});
