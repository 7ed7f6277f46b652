import test from "ava";
import { userHashOf } from "../../src/domain/identity.js";
import { type Protocol, protocols } from "../helpers/callers.js";
import { engineNames } from "../helpers/engines.js";
import { asUsersRunIt, type Json, keys, rest, startServer, useServer } from "../helpers/server.js";
import { tenantCalls } from "../helpers/tenant-calls.js";

/**
 * Identity verification (issue 41, docs/trust.md): what a public key, which
 * anyone has, may do to customers it cannot prove it is, on REST, gRPC and
 * Connect. The service's clock can be moved, to end a rotation's period.
 */

let clockOffsetMs = 0;
const server = useServer({ clock: () => new Date(Date.now() + clockOffsetMs) });

const { admin, send, okBody } = tenantCalls(server);

/** A fresh application: its keys, and its identity secret once made. */
interface App {
  id: string;
  secretKey: string;
  publicKey: string;
  identitySecret: string;
}

async function newApplication(name: string, withSecret = true): Promise<App> {
  const created = await admin("POST", "/admin/applications", { name });
  const app: App = {
    id: created.application.id,
    secretKey: created.secretKey,
    publicKey: created.publicKey,
    identitySecret: "",
  };
  await admin("POST", `/admin/applications/${app.id}/campaigns`, {
    name: "Trust",
    environment: "production",
    isLive: true,
    isDefault: true,
  });
  if (withSecret) {
    const rotated = await admin("POST", `/admin/applications/${app.id}/identity-secret`, {});
    app.identitySecret = rotated.identitySecret;
  }
  return app;
}

/** The stored customer, as the secret key reads it. */
async function stored(app: App, protocol: Protocol, id: string): Promise<Json> {
  return okBody(protocol, "GetCustomer", { id }, app.secretKey);
}

const victim = (externalUserId: string) => ({
  externalUserId,
  name: "Victoria",
  email: "victoria@example.com",
  customProperties: { phone: "+15550100", plan: "gold" },
});

for (const protocol of protocols) {
  test.serial(
    `${protocol}: a public key cannot change an existing customer's name, email or custom properties`,
    async (t) => {
      const app = await newApplication(`trust overwrite ${protocol}`);
      const original = await okBody(protocol, "IdentifyCustomer", victim("victim"), app.secretKey);
      const attempts: Array<[string, Json]> = [
        ["name", { externalUserId: "victim", name: "Mallory" }],
        ["email", { externalUserId: "victim", name: "Victoria", email: "mallory@example.com" }],
        [
          "customProperties",
          { externalUserId: "victim", name: "Victoria", customProperties: { phone: "+15550199" } },
        ],
      ];
      for (const [field, request] of attempts) {
        const outcome = await send(protocol, "IdentifyCustomer", request, app.publicKey);
        t.like(outcome, { ok: false, code: "permission_denied" }, field);
        t.regex(outcome.ok ? "" : outcome.message, new RegExp(`^userHash .*${field}`), field);
      }
      const after = await stored(app, protocol, original.id);
      t.is(after.name, "Victoria");
      t.is(after.email, "victoria@example.com");
      t.deepEqual(after.customProperties, { phone: "+15550100", plan: "gold" });
    },
  );

  test.serial(
    `${protocol}: a public key's answer about an existing customer holds no stored email or custom properties`,
    async (t) => {
      const app = await newApplication(`trust leak ${protocol}`);
      const original = await okBody(protocol, "IdentifyCustomer", victim("victim"), app.secretKey);
      const answer = await okBody(
        protocol,
        "IdentifyCustomer",
        { externalUserId: "victim", name: "Victoria" },
        app.publicKey,
      );
      t.is(answer.id, original.id);
      t.is(answer.referralCode, original.referralCode);
      t.is(answer.visitedReferralsCount, 0);
      t.falsy(answer.email);
      t.falsy(answer.customProperties && Object.keys(answer.customProperties).length);
      t.false(JSON.stringify(answer).includes("victoria@example.com"));
      t.false(JSON.stringify(answer).includes("+15550100"));
    },
  );

  test.serial(`${protocol}: referredBy, to a public key, is the referrer's id only`, async (t) => {
    const app = await newApplication(`trust referredBy ${protocol}`);
    const referrer = await okBody(protocol, "IdentifyCustomer", victim("referrer"), app.secretKey);
    // The referee signs up from the app, with the public key alone.
    const referee = await okBody(
      protocol,
      "IdentifyCustomer",
      { externalUserId: "referee", name: "Rita", email: "rita@example.com" },
      app.publicKey,
    );
    t.is(referee.email, "rita@example.com", "a new customer's answer holds what the caller sent");
    await okBody(
      protocol,
      "CreateReferral",
      { referralCode: referrer.referralCode, refereeExternalUserId: "referee" },
      app.publicKey,
    );
    await okBody(
      protocol,
      "IngestCheckpoint",
      { name: "signup", externalUserId: "referee", environment: "production" },
      app.publicKey,
    );
    const again = await okBody(
      protocol,
      "IdentifyCustomer",
      { externalUserId: "referee", name: "Rita" },
      app.publicKey,
    );
    t.is(again.referredById, referrer.id);
    t.is(again.referredBy.id, referrer.id);
    t.falsy(again.referredBy.email);
    t.falsy(again.referredBy.name);
    t.falsy(again.referredBy.externalUserId);
    t.false(JSON.stringify(again).includes("victoria@example.com"));
    t.falsy(again.email, "its own stored email is not read back either");
    // The secret key still reads everything.
    const full = await stored(app, protocol, again.id);
    t.is(full.referredBy.email, "victoria@example.com");
    t.is(full.referredBy.externalUserId, "referrer");
  });

  test.serial(
    `${protocol}: a wrong userHash is unauthenticated on identify, referral and checkpoint; a malformed one is invalid_argument`,
    async (t) => {
      const app = await newApplication(`trust wrong ${protocol}`);
      const withoutSecret = await newApplication(`trust no secret ${protocol}`, false);
      const referrer = await okBody(
        protocol,
        "IdentifyCustomer",
        victim("referrer"),
        app.secretKey,
      );
      await okBody(
        protocol,
        "IdentifyCustomer",
        { externalUserId: "u1", name: "U" },
        app.secretKey,
      );
      const wrong = userHashOf("not the secret", "u1");
      const signedForAnother = userHashOf(app.identitySecret, "someone-else");
      const calls: Array<[string, (userHash: string) => Json]> = [
        ["IdentifyCustomer", (userHash) => ({ externalUserId: "u1", name: "Mallory", userHash })],
        [
          "CreateReferral",
          (userHash) => ({
            referralCode: referrer.referralCode,
            refereeExternalUserId: "u1",
            userHash,
          }),
        ],
        [
          "IngestCheckpoint",
          (userHash) => ({
            name: "purchase",
            externalUserId: "u1",
            environment: "production",
            userHash,
          }),
        ],
      ];
      for (const [name, request] of calls) {
        for (const userHash of [wrong, signedForAnother, wrong.toUpperCase()]) {
          const outcome = await send(protocol, name, request(userHash), app.publicKey);
          t.like(outcome, { ok: false, code: "unauthenticated" }, name);
          t.regex(outcome.ok ? "" : outcome.message, /^userHash /, name);
        }
        const malformed = await send(protocol, name, request("abc123"), app.publicKey);
        t.like(malformed, { ok: false, code: "invalid_argument" }, name);
        t.regex(malformed.ok ? "" : malformed.message, /^userHash must be 64 hexadecimal/, name);
        const noSecret = await send(
          protocol,
          "IdentifyCustomer",
          { externalUserId: "u1", name: "U", userHash: wrong },
          withoutSecret.publicKey,
        );
        t.like(noSecret, { ok: false, code: "unauthenticated" }, "no identity secret set");
      }
      const customers = await okBody(protocol, "ListCustomers", {}, app.secretKey);
      t.is(
        customers.data.find((c: Json) => c.externalUserId === "u1").name,
        "U",
        "nothing changed",
      );
      const referrals = await okBody(protocol, "ListReferrals", {}, app.secretKey);
      t.is(referrals.total, 0, "no referral made");
    },
  );

  test.serial(
    `${protocol}: a valid userHash lets a public key act fully for that customer`,
    async (t) => {
      const app = await newApplication(`trust valid ${protocol}`);
      const original = await okBody(protocol, "IdentifyCustomer", victim("victim"), app.secretKey);
      const userHash = userHashOf(app.identitySecret, "victim");
      const answer = await okBody(
        protocol,
        "IdentifyCustomer",
        {
          externalUserId: "victim",
          name: "Victoria B.",
          email: "vb@example.com",
          customProperties: { plan: "platinum" },
          userHash,
        },
        app.publicKey,
      );
      t.is(answer.id, original.id);
      t.is(answer.name, "Victoria B.");
      t.is(answer.email, "vb@example.com", "the full answer");
      t.deepEqual(answer.customProperties, { phone: "+15550100", plan: "platinum" });
      t.is((await stored(app, protocol, original.id)).email, "vb@example.com");
      await okBody(
        protocol,
        "IngestCheckpoint",
        { name: "purchase", externalUserId: "victim", environment: "production", userHash },
        app.publicKey,
      );
    },
  );

  test.serial(`${protocol}: secret keys act for any customer and ignore userHash`, async (t) => {
    const app = await newApplication(`trust secret ${protocol}`);
    const original = await okBody(protocol, "IdentifyCustomer", victim("victim"), app.secretKey);
    const changed = await okBody(
      protocol,
      "IdentifyCustomer",
      { externalUserId: "victim", name: "Renamed", email: "renamed@example.com" },
      app.secretKey,
    );
    t.is(changed.name, "Renamed");
    t.deepEqual(changed.customProperties, original.customProperties);
    const ignored = await okBody(
      protocol,
      "IdentifyCustomer",
      { externalUserId: "victim", name: "Again", userHash: userHashOf("wrong", "victim") },
      app.secretKey,
    );
    t.is(ignored.name, "Again");
  });
}

test.serial(
  "rotation: the previous secret verifies for 24 hours, then only the new one",
  async (t) => {
    const app = await newApplication("trust rotation");
    await okBody("rest", "IdentifyCustomer", victim("victim"), app.secretKey);
    const first = app.identitySecret;
    const rotated = await admin("POST", `/admin/applications/${app.id}/identity-secret`, {});
    t.not(rotated.identitySecret, first);
    const until = Date.parse(rotated.previousSecretExpiresAt) - Date.now();
    t.true(Math.abs(until - 24 * 3600_000) < 60_000, "previousSecretExpiresAt is in 24 hours");
    const identify = (protocol: Protocol, secret: string, name: string) =>
      send(
        protocol,
        "IdentifyCustomer",
        { externalUserId: "victim", name, userHash: userHashOf(secret, "victim") },
        app.publicKey,
      );
    for (const protocol of protocols) {
      t.like(await identify(protocol, first, `old ${protocol}`), { ok: true }, "the old secret");
      t.like(await identify(protocol, rotated.identitySecret, `new ${protocol}`), { ok: true });
    }
    clockOffsetMs = 24 * 3600_000 + 60_000;
    try {
      for (const protocol of protocols) {
        t.like(await identify(protocol, first, "late"), { ok: false, code: "unauthenticated" });
        t.like(await identify(protocol, rotated.identitySecret, `later ${protocol}`), { ok: true });
      }
    } finally {
      clockOffsetMs = 0;
    }
    // A second rotation keeps only the one before it.
    const third = await admin("POST", `/admin/applications/${app.id}/identity-secret`, {});
    t.like(await identify("grpc", first, "x"), { ok: false, code: "unauthenticated" });
    t.like(await identify("grpc", rotated.identitySecret, "second"), { ok: true });
    t.like(await identify("grpc", third.identitySecret, "third"), { ok: true });
    // The secret is shown once: never in the application's description.
    const listed = await admin("GET", "/admin/applications");
    const text = JSON.stringify(listed);
    t.false(text.includes(third.identitySecret));
    t.false(text.includes("Sealed"));
    const described = listed.find((a: Json) => a.id === app.id);
    t.is(described.identityVerification, "protect");
    t.truthy(described.identitySecretCreatedAt);
  },
);

for (const protocol of protocols) {
  test.serial(
    `${protocol}: required mode: every public-key call naming a customer needs a valid userHash`,
    async (t) => {
      const app = await newApplication(`trust required ${protocol}`);
      const referrer = await okBody(
        protocol,
        "IdentifyCustomer",
        victim("referrer"),
        app.secretKey,
      );
      const set = await okBody(
        protocol,
        "UpdateApplication",
        {
          id: app.id,
          application: { identityVerification: "required" },
          updateMask: ["identityVerification"],
        },
        keys.admin,
      );
      t.is(set.identityVerification, "required");
      const requests: Array<[string, Json]> = [
        ["IdentifyCustomer", { externalUserId: "newcomer", name: "New" }],
        [
          "IngestCheckpoint",
          { name: "purchase", externalUserId: "referrer", environment: "production" },
        ],
      ];
      for (const [name, request] of requests) {
        const outcome = await send(protocol, name, request, app.publicKey);
        t.like(outcome, { ok: false, code: "permission_denied" }, name);
        t.regex(outcome.ok ? "" : outcome.message, /^userHash is required/, name);
      }
      const newcomer = await okBody(
        protocol,
        "IdentifyCustomer",
        {
          externalUserId: "newcomer",
          name: "New",
          userHash: userHashOf(app.identitySecret, "newcomer"),
        },
        app.publicKey,
      );
      t.is(newcomer.name, "New");
      const referral = { referralCode: referrer.referralCode, refereeExternalUserId: "newcomer" };
      t.like(await send(protocol, "CreateReferral", referral, app.publicKey), {
        ok: false,
        code: "permission_denied",
      });
      t.like(
        await send(
          protocol,
          "CreateReferral",
          { ...referral, userHash: userHashOf(app.identitySecret, "newcomer") },
          app.publicKey,
        ),
        { ok: true },
      );
      // Secret keys need none.
      t.like(await send(protocol, "IngestCheckpoint", requests[1]?.[1], app.secretKey), {
        ok: true,
      });
      // Reads of campaigns name no customer.
      t.like(await send(protocol, "ListCampaigns", {}, app.publicKey), { ok: true });
    },
  );
}

test.serial("UpdateApplication changes identityVerification only", async (t) => {
  const app = await newApplication("trust update", false);
  const refused = await rest(server, "PATCH", `/admin/applications/${app.id}?updateMask=name`, {
    key: keys.admin,
    body: { name: "renamed" },
  });
  t.is(refused.status, 400);
  t.regex(refused.body.message, /^updateMask names "name": only identityVerification/);
  const noMode = await rest(
    server,
    "PATCH",
    `/admin/applications/${app.id}?updateMask=identityVerification`,
    { key: keys.admin, body: {} },
  );
  t.is(noMode.status, 400);
  t.regex(noMode.body.message, /^application\.identityVerification is required/);
  const set = await rest(
    server,
    "PATCH",
    `/admin/applications/${app.id}?updateMask=identityVerification`,
    { key: keys.admin, body: { identityVerification: "required" } },
  );
  t.is(set.status, 200);
  t.is(set.body.identityVerification, "required");
  t.is(set.body.name, `trust update`);
  const missing = await rest(server, "POST", "/admin/applications/app_missing/identity-secret", {
    key: keys.admin,
    body: {},
  });
  t.is(missing.status, 404);
  const publicKeyRefused = await rest(
    server,
    "POST",
    `/admin/applications/${app.id}/identity-secret`,
    {
      key: app.secretKey,
      body: {},
    },
  );
  t.is(publicKeyRefused.status, 401, "admin access only");
});

test.serial("wrong userHashes count as failed authentications of the address", async (t) => {
  const limited = await startServer({ env: { RATE_LIMIT_UNAUTHENTICATED: "3/1m" } });
  try {
    const created = await rest(limited, "POST", "/admin/applications", {
      key: keys.admin,
      body: { name: "limited" },
    });
    const { publicKey } = created.body;
    await rest(
      limited,
      "POST",
      `/admin/applications/${created.body.application.id}/identity-secret`,
      {
        key: keys.admin,
        body: {},
      },
    );
    const wrong = {
      externalUserId: "u",
      name: "U",
      userHash: userHashOf("guess", "u"),
    };
    // Other errors after authentication are not failed authentications.
    for (let i = 0; i < 4; i++) {
      const missing = await rest(limited, "POST", "/checkpoints/ingest", {
        key: publicKey,
        body: { name: "signup", externalUserId: "nobody", environment: "production" },
      });
      t.is(missing.status, 404);
    }
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) {
      const answer = await rest(limited, "POST", "/customers/identify", {
        key: publicKey,
        body: wrong,
      });
      statuses.push(answer.status);
    }
    t.deepEqual(statuses, [401, 401, 401, 429]);
    const valid = await rest(limited, "POST", "/customers/identify", {
      key: publicKey,
      body: { externalUserId: "u2", name: "U2" },
    });
    t.is(valid.status, 201, "a call without a wrong userHash is served from the address");
  } finally {
    await limited.stop();
  }
});

test.serial(
  "a secret key's outcome is never replayed to a public key under the same Idempotency-Key",
  async (t) => {
    const app = await newApplication("trust idempotency");
    const body = { externalUserId: "victim", name: "Victoria", email: "victoria@example.com" };
    const headers = { "idempotency-key": "signup-victim" };
    const first = await rest(server, "POST", "/customers/identify", {
      key: app.secretKey,
      body,
      headers,
    });
    t.is(first.status, 201);
    const replayed = await rest(server, "POST", "/customers/identify", {
      key: app.secretKey,
      body,
      headers,
    });
    t.is(replayed.headers.get("idempotent-replayed"), "true", "the secret key's retry is replayed");
    const publicRetry = await rest(server, "POST", "/customers/identify", {
      key: app.publicKey,
      body,
      headers,
    });
    t.is(publicRetry.status, 400);
    t.regex(publicRetry.body.message, /different request/);
    t.false(JSON.stringify(publicRetry.body).includes("victoria@example.com"));
  },
);

for (const engine of engineNames) {
  test.serial(
    `${engine}: the identity secret and mode are stored, rotated and read back by the engine`,
    async (t) => {
      const own = await startServer({ engine });
      try {
        const adminCall = async (method: string, path: string, body: unknown = {}) =>
          (await rest(own, method, path, { key: keys.admin, body })).body;
        const created = await adminCall("POST", "/admin/applications", { name: `trust ${engine}` });
        const appId = created.application.id;
        await adminCall("POST", `/admin/applications/${appId}/campaigns`, {
          name: "Trust",
          environment: "production",
          isLive: true,
          isDefault: true,
        });
        const first = (await adminCall("POST", `/admin/applications/${appId}/identity-secret`))
          .identitySecret;
        const second = (await adminCall("POST", `/admin/applications/${appId}/identity-secret`))
          .identitySecret;
        const identify = (body: Json, key = created.publicKey) =>
          rest(own, "POST", "/customers/identify", { key, body });
        t.is((await identify(victim("victim"), created.secretKey)).status, 201);
        t.is((await identify({ externalUserId: "victim", name: "Mallory" })).status, 403);
        for (const secret of [first, second]) {
          const signed = await identify({
            externalUserId: "victim",
            name: `Signed ${secret.slice(-4)}`,
            userHash: userHashOf(secret, "victim"),
          });
          t.is(signed.status, 201, "the current and the previous secret verify");
          t.is(signed.body.email, "victoria@example.com");
        }
        const required = await rest(
          own,
          "PATCH",
          `/admin/applications/${appId}?updateMask=identityVerification`,
          { key: keys.admin, body: { identityVerification: "required" } },
        );
        t.is(required.body.identityVerification, "required");
        t.is((await identify({ externalUserId: "newcomer", name: "New" })).status, 403);
      } finally {
        await own.stop();
      }
    },
  );
}

for (const protocol of ["rest", "grpc", "connect"] as const) {
  test(`${protocol}: a public key lists live campaigns only`, async (t) => {
    const app = await newApplication(`Drafts ${protocol}`, false);
    await admin("POST", `/admin/applications/${app.id}/campaigns`, {
      name: "Unannounced",
      environment: "production",
      isLive: false,
    });
    // REST answers the list itself (the spec's shape), the others the message.
    const names = (body: Json) =>
      ((Array.isArray(body) ? body : body.campaigns) as Json[]).map((campaign) => campaign.name);
    t.deepEqual(names(await okBody(protocol, "ListCampaigns", {}, app.publicKey)), ["Trust"]);
    t.deepEqual(
      names(await okBody(protocol, "ListCampaigns", { isLive: false }, app.publicKey)),
      [],
    );
    t.deepEqual(
      names(await okBody(protocol, "ListCampaigns", {}, app.secretKey)).sort(),
      ["Trust", "Unannounced"],
      "the secret key sees every campaign",
    );
  });
}

for (const protocol of protocols) {
  test(`${protocol}: a public key cannot move a referral to another referrer without the referee's userHash`, async (t) => {
    const app = await newApplication(`Attribution ${protocol}`);
    const first = await okBody(protocol, "IdentifyCustomer", victim("first"), app.secretKey);
    const thief = await okBody(protocol, "IdentifyCustomer", victim("thief"), app.secretKey);
    const third = await okBody(protocol, "IdentifyCustomer", victim("third"), app.secretKey);
    await okBody(
      protocol,
      "IdentifyCustomer",
      { externalUserId: "newcomer", name: "Nell" },
      app.publicKey,
    );
    const refer = (code: string, key: string, extra: Json = {}) =>
      okBody(
        protocol,
        "CreateReferral",
        { referralCode: code, refereeExternalUserId: "newcomer", ...extra },
        key,
      );
    const created = await refer(first.referralCode, app.publicKey);
    t.is(created.referrerId, first.id, "a first referral from the app is made");
    const stolen = await refer(thief.referralCode, app.publicKey);
    t.is(stolen.referrerId, first.id, "another code, unverified: answered as it is");
    const [kept] = (
      await okBody(protocol, "ListReferrals", { refereeId: created.refereeId }, app.secretKey)
    ).data;
    t.is(kept.referrerId, first.id, "and left as it is");
    const moved = await refer(thief.referralCode, app.publicKey, {
      userHash: userHashOf(app.identitySecret, "newcomer"),
    });
    t.is(moved.referrerId, thief.id, "the referee's own verified call moves it");
    const byBackend = await refer(third.referralCode, app.secretKey);
    t.is(byBackend.referrerId, third.id, "a secret key moves it");
  });
}

test("with workers, a mode set or a secret rotated holds on every worker from the next call", async (t) => {
  const cluster = await startServer(asUsersRunIt);
  try {
    const adminCall = async (method: string, path: string, body?: unknown) => {
      const answer = await rest(cluster, method, path, { key: keys.admin, body });
      if (answer.status >= 300)
        throw new Error(`${method} ${path}: ${JSON.stringify(answer.body)}`);
      return answer.body;
    };
    const [application] = await adminCall("GET", "/admin/applications");
    const first = await adminCall(
      "POST",
      `/admin/applications/${application.id}/identity-secret`,
      {},
    );
    // Each call on a connection of its own: the workers share them.
    const identify = (body: Json) =>
      rest(cluster, "POST", "/customers/identify", {
        key: keys.public,
        body,
        headers: { connection: "close" },
      });
    const signed = (secret: string) => ({
      externalUserId: "cluster-user",
      name: "Cluster",
      userHash: userHashOf(secret, "cluster-user"),
    });
    const statuses = async (body: Json) =>
      (await Promise.all(Array.from({ length: 8 }, () => identify(body)))).map((r) => r.status);
    t.true((await statuses(signed(first.identitySecret))).every((status) => status < 300));

    await adminCall(
      "PATCH",
      `/admin/applications/${application.id}?updateMask=identityVerification`,
      { identityVerification: "required" },
    );
    t.deepEqual(
      await statuses({ externalUserId: "cluster-user", name: "Cluster" }),
      Array(8).fill(403),
    );

    // Rotated twice: the first secret no longer verifies anywhere.
    await adminCall("POST", `/admin/applications/${application.id}/identity-secret`, {});
    const third = await adminCall(
      "POST",
      `/admin/applications/${application.id}/identity-secret`,
      {},
    );
    t.deepEqual(await statuses(signed(first.identitySecret)), Array(8).fill(401));
    t.true((await statuses(signed(third.identitySecret))).every((status) => status < 300));
  } finally {
    await cluster.stop();
  }
});
