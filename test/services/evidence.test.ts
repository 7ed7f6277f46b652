import test from "ava";
import { ruleCatalogue } from "../../src/domain/fraud-rules.js";
import { type Protocol, protocols } from "../helpers/callers.js";
import { type Json, keys, rest, useServer } from "../helpers/server.js";
import { tenantCalls } from "../helpers/tenant-calls.js";

/**
 * The fraud evidence kept with every referral (issue 42, docs/fraud.md):
 * gathered when it is created or re-attributed, network facts only as
 * keyed hashes (a public key's from its connection, a secret key's from the
 * context its backend passed), shown to secret keys only, erased with its
 * customers, and none at all for an application that turns it off — on
 * REST, gRPC and Connect.
 */

const server = useServer({ env: { REFERRAL_VELOCITY_LIMIT: "100000" } });

const { admin, send, okBody } = tenantCalls(server);

interface App {
  id: string;
  secretKey: string;
  publicKey: string;
}

/** A policy of every rule of the catalogue, noting only: every count is gathered, nothing flags. */
const everyRuleNoting = {
  rules: Object.keys(ruleCatalogue).map((type) => ({ type, action: "note" })),
};

let apps = 0;
/** An application whose default campaign runs `fraudPolicy` (every rule, noting, unless given; null for none of its own). */
async function newApplication(fraudPolicy: Json | null = everyRuleNoting): Promise<App> {
  const created = await admin("POST", "/admin/applications", { name: `evidence ${++apps}` });
  const id = created.application.id;
  await admin("POST", `/admin/applications/${id}/campaigns`, {
    name: "Evidence",
    environment: "production",
    isLive: true,
    isDefault: true,
    proposedRewardTrigger: "purchase",
    ...(fraudPolicy ? { fraudPolicy } : {}),
  });
  return { id, secretKey: created.secretKey, publicKey: created.publicKey };
}

async function evidenceOf(protocol: Protocol, app: App, referralId: string): Promise<Json> {
  const listed = await okBody(protocol, "ListReferrals", {}, app.secretKey);
  return listed.data.find((referral: Json) => referral.id === referralId).evidence;
}

const identify = (protocol: Protocol, app: App, request: Json, key = app.secretKey) =>
  okBody(protocol, "IdentifyCustomer", { name: "Someone", ...request }, key);

for (const protocol of protocols) {
  test(`${protocol}: a public key's referral keeps its connection's network as hashes, and is answered without evidence`, async (t) => {
    const app = await newApplication();
    const referrer = await identify(protocol, app, {
      externalUserId: "ada",
      name: "Ada Lovelace",
      email: "ada@example.com",
    });
    await identify(
      protocol,
      app,
      { externalUserId: "grace", name: "Ada Lovelac", email: "throwaway@mailinator.com" },
      app.publicKey,
    );
    const created = await okBody(
      protocol,
      "CreateReferral",
      {
        referralCode: referrer.referralCode,
        refereeExternalUserId: "grace",
        context: { deviceId: "device-7" },
      },
      app.publicKey,
    );
    t.is(created.evidence ?? null, null, "a public key reads no evidence");
    const evidence = await evidenceOf(protocol, app, created.id);
    t.like(evidence, {
      version: 1,
      referrerEmail: { canonical: "ada@example.com", domain: "example.com", disposable: false },
      refereeEmail: { domain: "mailinator.com", disposable: true, masked: false },
      referrerFlagged: 0,
      referrerRejected: 0,
      referrerReferralsLastHour: 0,
      networkReferralsLastDay: 0,
      refereeNetwork: { source: "connection", deviceId: "device-7" },
    });
    t.regex(evidence.disposableListVersion, /^disposable-email-domains-js@/);
    t.true(evidence.nameSimilarity > 0.9);
    t.regex(evidence.refereeNetwork.addressHash, /^[0-9a-f]{32}$/);
    t.false(JSON.stringify(evidence).includes("127.0.0.1"), "no address is kept");
    t.is(
      evidence.referrerNetwork,
      null,
      "the referrer was identified by the backend without context",
    );
  });

  test(`${protocol}: the backend passes the end user's context; networks, velocity and history are counted`, async (t) => {
    const app = await newApplication();
    const context = (ip: string) => ({
      ip,
      userAgent:
        "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Mobile/15E148 Safari/604.1",
      deviceId: "iphone-1",
    });
    const referrer = await identify(protocol, app, {
      externalUserId: "referrer",
      context: context("203.0.113.10"),
    });
    const referrals: Json[] = [];
    for (const [index, ip] of ["203.0.113.20", "203.0.113.21", "198.51.100.5"].entries()) {
      await identify(protocol, app, { externalUserId: `friend-${index}` });
      referrals.push(
        await okBody(
          protocol,
          "CreateReferral",
          {
            referralCode: referrer.referralCode,
            refereeExternalUserId: `friend-${index}`,
            context: context(ip),
          },
          app.secretKey,
        ),
      );
    }
    await okBody(
      protocol,
      "UpdateReferralStatus",
      { id: referrals[0]?.id, status: "rejected", reason: "test" },
      app.secretKey,
    );
    const [first, second, third] = await Promise.all(
      referrals.map((referral) => evidenceOf(protocol, app, referral.id)),
    );
    t.like(first.refereeNetwork, { source: "backend", userAgentFamily: "Safari on iOS" });
    t.is(first.referrerNetwork.networkHash, first.refereeNetwork.networkHash, "one /24");
    t.not(first.referrerNetwork.addressHash, first.refereeNetwork.addressHash);
    t.is(second.refereeNetwork.networkHash, first.refereeNetwork.networkHash);
    t.not(third.refereeNetwork.networkHash, first.refereeNetwork.networkHash);
    t.like(second, { networkReferralsLastDay: 1, referrerReferralsLastHour: 1 });
    t.like(third, {
      networkReferralsLastDay: 0,
      referrerReferralsLastHour: 2,
      referrerReferralsLastDay: 2,
    });

    // Re-attributed, a referral gathers its evidence again: the rejection is the referrer's history now.
    const other = await identify(protocol, app, { externalUserId: "other-referrer" });
    const moved = await okBody(
      protocol,
      "CreateReferral",
      { referralCode: other.referralCode, refereeExternalUserId: "friend-2" },
      app.secretKey,
    );
    t.is(moved.id, referrals[2]?.id);
    const after = await evidenceOf(protocol, app, moved.id);
    t.like(after, { referrerReferralsLastHour: 0, referrerRejected: 0 });
    t.is(
      after.refereeNetwork.networkHash,
      third.refereeNetwork.networkHash,
      "kept from its first attribution",
    );
    const again = await identify(protocol, app, { externalUserId: "friend-3" });
    const fourth = await okBody(
      protocol,
      "CreateReferral",
      { referralCode: referrer.referralCode, refereeExternalUserId: "friend-3" },
      app.secretKey,
    );
    t.is(again.id, fourth.refereeId);
    t.like(await evidenceOf(protocol, app, fourth.id), {
      referrerRejected: 1,
      refereeNetwork: null,
    });
  });

  test(`${protocol}: a public key may send a device id only; a secret key's address must parse`, async (t) => {
    const app = await newApplication();
    const referrer = await identify(protocol, app, { externalUserId: "ref" });
    await identify(protocol, app, { externalUserId: "friend" });
    for (const context of [{ ip: "203.0.113.1" }, { userAgent: "curl/8" }]) {
      const refused = await send(
        protocol,
        "CreateReferral",
        { referralCode: referrer.referralCode, refereeExternalUserId: "friend", context },
        app.publicKey,
      );
      t.like(refused, { ok: false, code: "permission_denied" });
      t.regex(
        refused.ok ? "" : refused.message,
        /^context\.(ip|userAgent) is the backend's to send/,
      );
      const identified = await send(
        protocol,
        "IdentifyCustomer",
        { externalUserId: "newcomer", name: "New", context },
        app.publicKey,
      );
      t.like(identified, { ok: false, code: "permission_denied" });
    }
    const wrong = await send(
      protocol,
      "CreateReferral",
      {
        referralCode: referrer.referralCode,
        refereeExternalUserId: "friend",
        context: { ip: "300.1.2.3" },
      },
      app.secretKey,
    );
    t.like(wrong, { ok: false, code: "invalid_argument" });
    t.regex(wrong.ok ? "" : wrong.message, /^context\.ip must be an IPv4 or IPv6 address/);
    const listed = await okBody(protocol, "ListReferrals", {}, app.secretKey);
    t.is(listed.data.length, 0, "a refused call changes nothing");
  });
}

test("an application that turns network facts off keeps none, and says so", async (t) => {
  const app = await newApplication();
  const set = await admin("PATCH", `/admin/applications/${app.id}?updateMask=networkFacts`, {
    networkFacts: "off",
  });
  t.is(set.networkFacts, "off");
  const referrer = await identify("rest", app, {
    externalUserId: "quiet-ref",
    context: { ip: "203.0.113.9" },
  });
  await identify("rest", app, { externalUserId: "quiet-friend" }, app.publicKey);
  const created = await okBody(
    "rest",
    "CreateReferral",
    { referralCode: referrer.referralCode, refereeExternalUserId: "quiet-friend" },
    app.publicKey,
  );
  t.like(await evidenceOf("rest", app, created.id), {
    refereeNetwork: null,
    referrerNetwork: null,
    networkReferralsLastDay: null,
  });
  const listed = await admin("GET", "/admin/applications");
  t.is(listed.find((a: Json) => a.id === app.id).networkFacts, "off");
  t.false(JSON.stringify(listed).includes("networkKey"), "the key is never shown");
  const wrong = await rest(
    server,
    "PATCH",
    `/admin/applications/${app.id}?updateMask=networkFacts`,
    {
      key: keys.admin,
      body: { networkFacts: "sometimes" },
    },
  );
  t.is(wrong.status, 400);
});

test("erasing a customer erases its email and network from the evidence of its referrals", async (t) => {
  const app = await newApplication();
  const referrer = await identify("rest", app, {
    externalUserId: "erased-ref",
    email: "ref@example.com",
    context: { ip: "203.0.113.30" },
  });
  const referee = await identify("rest", app, {
    externalUserId: "erased-friend",
    email: "friend@example.com",
  });
  const created = await okBody(
    "rest",
    "CreateReferral",
    {
      referralCode: referrer.referralCode,
      refereeExternalUserId: "erased-friend",
      context: { ip: "203.0.113.31" },
    },
    app.secretKey,
  );
  const before = await evidenceOf("rest", app, created.id);
  t.truthy(
    before.referrerEmail && before.refereeEmail && before.referrerNetwork && before.refereeNetwork,
  );
  await okBody("rest", "EraseCustomer", { id: referee.id }, app.secretKey);
  t.like(await evidenceOf("rest", app, created.id), {
    refereeEmail: null,
    refereeNetwork: null,
    referrerEmail: { canonical: "ref@example.com" },
  });
  await okBody("rest", "EraseCustomer", { id: referrer.id }, app.secretKey);
  const after = await evidenceOf("rest", app, created.id);
  t.like(after, { referrerEmail: null, referrerNetwork: null });
  t.false(JSON.stringify(after).includes("example.com"));
});

test("a customer's export shows its own email and network in the evidence, never the other party's", async (t) => {
  const app = await newApplication();
  const referrer = await identify("rest", app, {
    externalUserId: "export-ref",
    email: "export.ref@example.com",
    context: { ip: "203.0.113.40" },
  });
  const referee = await identify("rest", app, {
    externalUserId: "export-friend",
    email: "export.friend@example.com",
  });
  await okBody(
    "rest",
    "CreateReferral",
    {
      referralCode: referrer.referralCode,
      refereeExternalUserId: "export-friend",
      context: { ip: "198.51.100.41" },
    },
    app.secretKey,
  );
  const exported = async (id: string) =>
    (await rest(server, "GET", `/customers/${id}/export`, { key: app.secretKey })).body;
  const ofReferrer = (await exported(referrer.id)).referralsAsReferrer[0].evidence;
  t.like(ofReferrer, {
    referrerEmail: { canonical: "export.ref@example.com" },
    refereeEmail: null,
    refereeNetwork: null,
  });
  t.truthy(ofReferrer.referrerNetwork);
  const ofReferee = (await exported(referee.id)).referralsAsReferee[0].evidence;
  t.like(ofReferee, {
    refereeEmail: { canonical: "export.friend@example.com" },
    referrerEmail: null,
    referrerNetwork: null,
  });
  t.truthy(ofReferee.refereeNetwork);
  t.false(JSON.stringify(ofReferee).includes("export.ref"));
});

test.serial(
  "a count no rule of the policy reads is not gathered: null in the evidence",
  async (t) => {
    const app = await newApplication(null);
    const identify = (externalUserId: string, fields: Json = {}) =>
      okBody(
        "rest",
        "IdentifyCustomer",
        { externalUserId, name: externalUserId, ...fields },
        app.secretKey,
      );
    const referrer = await identify("counted-referrer", { context: { ip: "203.0.113.5" } });
    await identify("counted-friend", { email: "friend@example.com" });
    const created = await okBody(
      "rest",
      "CreateReferral",
      {
        referralCode: referrer.referralCode,
        refereeExternalUserId: "counted-friend",
        context: { ip: "198.51.100.1" },
      },
      app.secretKey,
    );
    // The default rules read the referrer's hour (velocity) and the mailbox
    // (duplicate_referee_email); nothing reads its history, the network's day
    // or its clicks.
    t.like(await evidenceOf("rest", app, created.id), {
      referrerReferralsLastHour: 0,
      referrerReferralsLastDay: 0,
      refereeMailboxReferred: false,
      referrerFlagged: null,
      referrerRejected: null,
      networkReferralsLastDay: null,
      networkClicksLastDay: null,
    });
  },
);
