import type { DescMethod } from "@bufbuild/protobuf";
import test, { type ExecutionContext } from "ava";
import { Access } from "../../gen/referral/v1/options_pb.js";
import { enumWords, methodAccess } from "../../src/contract/options.js";
import { fromPlain } from "../../src/contract/plain-codec.js";
import { userHashOf } from "../../src/domain/identity.js";
import { httpRouteOf } from "../../src/transport/rest/http-rules.js";
import {
  call,
  callJson,
  callMessage,
  type Outcome,
  type WireProtocol,
  wireProtocols,
} from "../helpers/callers.js";
import { contractServices } from "../helpers/contract.js";
import { type Receiver, startReceiver } from "../helpers/receiver.js";
import { type Json, keys, useServer } from "../helpers/server.js";

/**
 * Parity of the five protocols on one port, on both HTTP versions: every
 * RPC, for every outcome it can produce, gives the same code, message and
 * data over REST, gRPC, Connect JSON, Connect binary and gRPC-Web, each of
 * them but gRPC over HTTP/1.1 and over HTTP/2. Then what only one family can
 * send: unknown fields and enum words on the JSON protocols, unknown enum
 * numbers on the binary ones, each refused alike and changing nothing.
 * `parity.test.ts` runs it in cleartext (HTTP/2 with prior knowledge),
 * `parity-tls.test.ts` over TLS (HTTP/2 by ALPN).
 */
export async function parityMatrix(options: { tls: boolean; workers?: number }): Promise<void> {
  // Webhooks deliver to a receiver on loopback.
  const server = useServer({
    env: { WEBHOOK_ALLOW_PRIVATE: "true" },
    tls: options.tls,
    ...(options.workers ? { workers: options.workers } : {}),
  });

  const methods = (await contractServices()).flatMap((service) => service.methods);
  const rpc = (name: string): DescMethod => {
    const method = methods.find((m) => m.name === name);
    if (!method) throw new Error(`no RPC ${name}`);
    return method;
  };

  type Request = Record<string, unknown>;
  /** A request, or one per protocol for a call that changes its own record. */
  type RequestOf = Request | ((protocol: WireProtocol) => Request);
  type ErrorCode = "invalid_argument" | "not_found" | "failed_precondition";
  type Expected = { ok: true } | { ok: false; code: string };

  /** The calls of one RPC: one that succeeds, and one per error it can produce. */
  interface Cases {
    readonly ok: RequestOf;
    /** Fields of the result that differ from call to call (fresh ids, timestamps, secrets). */
    readonly volatile?: readonly string[];
    readonly errors?: Partial<Record<ErrorCode, RequestOf>>;
  }

  /** What the cases refer to, made once the server runs. */
  const fixture = {
    referrerId: "",
    referralCode: "",
    otherReferralCode: "",
    acceptedReferralId: "",
    pendingReferralIds: {} as Record<WireProtocol, string>,
    fraudReviewIds: {} as Record<WireProtocol, string>,
    erasableCustomerIds: {} as Record<WireProtocol, string>,
    earnedGrantId: "",
    approvedGrantIds: {} as Record<WireProtocol, string>,
    webhookId: "",
    deletableWebhookIds: {} as Record<WireProtocol, string>,
    deliveryIds: {} as Record<WireProtocol, string>,
    applicationId: "",
    revocableKeyIds: {} as Record<WireProtocol, string>,
    campaignId: "",
    deletableCampaignIds: {} as Record<WireProtocol, string>,
    liveCampaignId: "",
    adaUserHash: "",
    referrerUserHash: "",
    identityApplicationId: "",
  };

  const created = ["id", "createdAt", "updatedAt"];
  const parityCampaign = { name: "Parity", environment: "test", isLive: false };
  const goodwill = { type: "payout", method: "custom", currency: "usd", amount: 5 };

  const cases: Record<string, Cases> = {
    IdentifyCustomer: {
      // Verified (docs/trust.md): every protocol after the first changes an
      // existing customer, and reads its email back.
      ok: () => ({
        externalUserId: "parity-ada",
        name: "Ada",
        email: "ada@example.com",
        customProperties: { plan: "pro" },
        userHash: fixture.adaUserHash,
      }),
      volatile: ["updatedAt"],
      errors: { invalid_argument: { externalUserId: "", name: "Ada" } },
    },
    GetCustomer: {
      ok: () => ({ id: fixture.referrerId }),
      errors: { invalid_argument: { id: " " }, not_found: { id: "cus_missing" } },
    },
    ListCustomers: { ok: { limit: 50 }, errors: { invalid_argument: { limit: 0 } } },
    ListShareLinks: {
      // A public key reads a customer's links with the backend's proof (docs/trust.md).
      ok: () => ({ id: fixture.referrerId, userHash: fixture.referrerUserHash }),
      errors: {
        invalid_argument: () => ({ id: fixture.referrerId, userHash: "not-a-hash" }),
        not_found: () => ({ id: "cus_missing", userHash: fixture.referrerUserHash }),
      },
    },
    ExportCustomer: {
      ok: () => ({ id: fixture.referrerId, limit: 5 }),
      volatile: ["exportedAt"],
      errors: {
        invalid_argument: () => ({ id: fixture.referrerId, limit: 0 }),
        not_found: { id: "cus_missing" },
      },
    },
    EraseCustomer: {
      ok: (protocol) => ({ id: fixture.erasableCustomerIds[protocol] }),
      volatile: ["id", "createdAt", "updatedAt", "deletedAt", "referralCode"],
      errors: { invalid_argument: { id: " " }, not_found: { id: "cus_missing" } },
    },
    CreateReferral: {
      ok: () => ({ referralCode: fixture.referralCode, refereeExternalUserId: "parity-referee" }),
      errors: {
        invalid_argument: { referralCode: "", refereeExternalUserId: "parity-referee" },
        not_found: { referralCode: "NOSUCH23", refereeExternalUserId: "parity-referee" },
        failed_precondition: () => ({
          referralCode: fixture.otherReferralCode,
          refereeExternalUserId: "parity-accepted",
        }),
      },
    },
    UpdateReferralStatus: {
      ok: (p) => ({ id: fixture.pendingReferralIds[p], status: "flagged", reason: "parity" }),
      // Each protocol's referral is gathered at its own time, after the others'.
      volatile: [...created, "refereeId", "changedAt", "evidence"],
      errors: {
        invalid_argument: { id: "ref_missing" },
        not_found: { id: "ref_missing", status: "accepted" },
        failed_precondition: () => ({ id: fixture.acceptedReferralId, status: "pending" }),
      },
    },
    ListReferrals: { ok: { limit: 50 }, errors: { invalid_argument: { limit: 0 } } },
    ListFraudReviews: { ok: { environment: "production" } },
    ResolveFraudReview: {
      ok: (p) => ({ id: fixture.fraudReviewIds[p], decision: "reject", reason: "parity" }),
      // Each protocol resolves its own self-referral's review.
      volatile: [...created, "refereeId", "referrerId", "changedAt", "evidence"],
      errors: {
        invalid_argument: { id: "frv_short", decision: "accept" },
        not_found: { id: "frv_AAAAAAAAAAAAAAAAAAAAAAAA", decision: "accept" },
      },
    },
    TestFraudPolicy: {
      ok: () => ({ campaignId: fixture.liveCampaignId, policy: { rules: [{ type: "velocity" }] } }),
      errors: {
        invalid_argument: () => ({
          campaignId: fixture.liveCampaignId,
          policy: { rules: [{ type: "velocity", action: "reject" }] },
        }),
        not_found: { campaignId: "cmp_missing", policy: {} },
      },
    },
    IngestCheckpoint: {
      ok: { name: "signup", externalUserId: "parity-referrer", environment: "production" },
      errors: {
        invalid_argument: {
          name: "",
          externalUserId: "parity-referrer",
          environment: "production",
        },
        not_found: { name: "signup", externalUserId: "nobody", environment: "production" },
      },
    },
    ListRewardGrants: { ok: { limit: 50 }, errors: { invalid_argument: { limit: 0 } } },
    GetRewardGrant: {
      ok: () => ({ id: fixture.earnedGrantId }),
      errors: { invalid_argument: { id: " " }, not_found: { id: "grt_missing" } },
    },
    CreateRewardGrant: {
      ok: () => ({ customerId: fixture.referrerId, value: goodwill, reason: "parity" }),
      volatile: [...created, "changedAt", "availableAt"],
      errors: {
        invalid_argument: () => ({ customerId: fixture.referrerId, reason: "parity" }),
        not_found: { customerId: "cus_missing", value: goodwill, reason: "parity" },
      },
    },
    UpdateRewardGrantStatus: {
      ok: (p) => ({
        id: fixture.approvedGrantIds[p],
        status: "fulfilled",
        fulfillment: { reference: "parity" },
      }),
      volatile: [...created, "changedAt", "availableAt", "fulfilledAt"],
      errors: {
        invalid_argument: { id: "grt_missing" },
        not_found: { id: "grt_missing", status: "approved" },
        failed_precondition: () => ({ id: fixture.earnedGrantId, status: "pending" }),
      },
    },
    GetCustomerRewardBalance: {
      ok: () => ({ customerId: fixture.referrerId }),
      errors: { invalid_argument: { customerId: " " }, not_found: { customerId: "cus_missing" } },
    },
    ListCampaigns: { ok: {} },
    GetLiveCampaign: { ok: { environment: "test" } },
    PingCampaign: {
      ok: () => ({ id: fixture.liveCampaignId }),
      errors: { invalid_argument: { id: " " }, not_found: { id: "cmp_missing" } },
    },
    ListCampaignCheckpoints: {
      ok: () => ({ campaignId: fixture.liveCampaignId }),
      errors: { invalid_argument: { campaignId: "" }, not_found: { campaignId: "cmp_missing" } },
    },
    ListWebhooks: { ok: {} },
    CreateWebhook: {
      ok: {
        url: "https://example.com/parity",
        description: "parity",
        eventTypes: ["referral.rejected"],
      },
      volatile: [...created, "secret"],
      errors: { invalid_argument: { url: "" } },
    },
    UpdateWebhook: {
      ok: () => ({ id: fixture.webhookId, description: "parity" }),
      volatile: ["updatedAt"],
      errors: {
        invalid_argument: { id: " ", description: "parity" },
        not_found: { id: "whk_missing", description: "parity" },
      },
    },
    DeleteWebhook: {
      ok: (p) => ({ id: fixture.deletableWebhookIds[p] }),
      volatile: created,
      errors: { invalid_argument: { id: " " }, not_found: { id: "whk_missing" } },
    },
    RotateWebhookSecret: {
      ok: () => ({ id: fixture.webhookId }),
      volatile: ["updatedAt", "secret"],
      errors: { invalid_argument: { id: " " }, not_found: { id: "whk_missing" } },
    },
    ListWebhookDeliveries: {
      ok: () => ({ id: fixture.webhookId }),
      errors: {
        invalid_argument: () => ({ id: fixture.webhookId, limit: 0 }),
        not_found: { id: "whk_missing" },
      },
    },
    // Its deliveries are sent at once and move the endpoint's health, which
    // ListWebhooks compares: it runs after the webhook reads (see the matrix).
    RedeliverWebhookEvent: {
      ok: (p) => ({ id: fixture.webhookId, deliveryId: fixture.deliveryIds[p] }),
      volatile: [...created, "eventId", "nextAttemptAt", "attemptedAt", "durationMs"],
      errors: {
        invalid_argument: () => ({ id: fixture.webhookId, deliveryId: " " }),
        not_found: () => ({ id: fixture.webhookId, deliveryId: "whd_missing" }),
      },
    },
    CreateApplication: {
      ok: { name: "Parity" },
      volatile: [...created, "organizationId", "secretKey", "publicKey"],
      errors: {
        invalid_argument: { name: "" },
        not_found: { name: "Parity", organizationId: "org_missing" },
      },
    },
    ListApplications: { ok: {} },
    RotateIdentitySecret: {
      ok: () => ({ applicationId: fixture.identityApplicationId }),
      volatile: ["identitySecret", "previousSecretExpiresAt"],
      errors: {
        invalid_argument: { applicationId: " " },
        not_found: { applicationId: "app_missing" },
      },
    },
    UpdateApplication: {
      ok: () => ({
        id: fixture.identityApplicationId,
        application: { identityVerification: "protect" },
        updateMask: ["identityVerification"],
      }),
      volatile: ["identitySecretCreatedAt"],
      errors: {
        invalid_argument: () => ({
          id: fixture.identityApplicationId,
          application: { name: "x" },
          updateMask: ["name"],
        }),
        not_found: {
          id: "app_missing",
          application: { identityVerification: "protect" },
          updateMask: ["identityVerification"],
        },
      },
    },
    CreateApiKey: {
      ok: () => ({ applicationId: fixture.applicationId, kind: "public", name: "parity" }),
      volatile: [...created, "key", "prefix"],
      errors: {
        invalid_argument: () => ({ applicationId: fixture.applicationId }),
        not_found: { applicationId: "app_missing", kind: "public" },
      },
    },
    ListApiKeys: {
      ok: () => ({ applicationId: fixture.applicationId }),
      errors: {
        invalid_argument: { applicationId: " " },
        not_found: { applicationId: "app_missing" },
      },
    },
    ListApplicationCampaigns: {
      // Production's: the demo campaign, which no case of the matrix changes.
      ok: () => ({ applicationId: fixture.applicationId, environment: "production" }),
      errors: {
        invalid_argument: { applicationId: " " },
        not_found: { applicationId: "app_missing" },
      },
    },
    RevokeApiKey: {
      ok: (p) => ({ id: fixture.revocableKeyIds[p] }),
      volatile: [...created, "prefix", "revokedAt"],
      errors: { invalid_argument: { id: " " }, not_found: { id: "key_missing" } },
    },
    CreateCampaign: {
      ok: () => ({ applicationId: fixture.applicationId, campaign: parityCampaign }),
      volatile: [...created, "campaignId"],
      errors: {
        invalid_argument: () => ({ applicationId: fixture.applicationId }),
        not_found: { applicationId: "app_missing", campaign: parityCampaign },
      },
    },
    UpdateCampaign: {
      ok: () => ({
        id: fixture.campaignId,
        campaign: { name: "Parity, renamed" },
        updateMask: ["name"],
      }),
      volatile: ["updatedAt"],
      errors: {
        invalid_argument: () => ({ id: fixture.campaignId }),
        not_found: { id: "cmp_missing", campaign: { name: "x" }, updateMask: ["name"] },
      },
    },
    SetCampaignCheckpoints: {
      // The same list each time: the first call makes the entry, the others keep it as it is.
      ok: () => ({
        id: fixture.campaignId,
        placements: [{ checkpointName: "parity", placementId: "parity_slot" }],
      }),
      errors: {
        invalid_argument: () => ({ id: fixture.campaignId, placements: [{ checkpointName: "x" }] }),
        not_found: { id: "cmp_missing", placements: [] },
      },
    },
    DeleteCampaign: {
      ok: (p) => ({ id: fixture.deletableCampaignIds[p] }),
      volatile: [...created, "campaignId", "deletedAt"],
      errors: { invalid_argument: { id: " " }, not_found: { id: "cmp_missing" } },
    },
    GetCampaignStats: {
      ok: () => ({ id: fixture.liveCampaignId, interval: "week", compare: "previous_period" }),
      errors: {
        invalid_argument: () => ({ id: fixture.liveCampaignId, timeZone: "Mars/Olympus" }),
        not_found: { id: "cmp_missing" },
      },
    },
    GetApplicationStats: {
      ok: { interval: "month", timeZone: "Asia/Kathmandu" },
      errors: { invalid_argument: { from: "2026-01-01T10:05:00Z" } },
    },
    ListTopReferrers: {
      ok: () => ({ id: fixture.liveCampaignId, limit: 5 }),
      errors: {
        invalid_argument: () => ({ id: fixture.liveCampaignId, limit: 101 }),
        not_found: { id: "cmp_missing" },
      },
    },
    GetPublicLeaderboard: {
      ok: () => ({ id: fixture.liveCampaignId }),
      errors: {
        invalid_argument: () => ({ id: fixture.liveCampaignId, limit: 0 }),
        not_found: () => ({ id: fixture.campaignId }),
      },
    },
    WatchCampaignStats: {
      ok: () => ({ id: fixture.liveCampaignId }),
      errors: {
        invalid_argument: () => ({ id: fixture.liveCampaignId, timeZone: "Mars/Olympus" }),
        not_found: { id: "cmp_missing" },
      },
    },
    ExportReferrals: {
      ok: { environment: "production" },
      errors: {
        invalid_argument: { from: "yesterday" },
        not_found: { campaignId: "cmp_missing" },
      },
    },
  };

  /** The credential each kind of RPC takes, and one of the wrong kind with the code it gets. */
  const credentials = {
    [Access.PUBLIC]: { own: keys.public },
    [Access.SECRET]: {
      own: keys.secret,
      wrong: { name: "a public key", key: keys.public, code: "permission_denied" },
    },
    [Access.ADMIN]: {
      own: keys.admin,
      wrong: { name: "a secret key", key: keys.secret, code: "unauthenticated" },
    },
  } as Record<Access, { own: string; wrong?: { name: string; key: string; code: string } }>;

  const requestOf = (request: RequestOf, protocol: WireProtocol): Request =>
    typeof request === "function" ? request(protocol) : request;

  /** The outcome with the values of volatile fields, at any depth, replaced by a marker. */
  function normalized(outcome: Outcome, volatile: readonly string[] = []): Outcome {
    const walk = (value: unknown): unknown => {
      if (Array.isArray(value)) return value.map(walk);
      if (value === null || typeof value !== "object") return value;
      return Object.fromEntries(
        Object.entries(value).map(([key, v]) => [
          key,
          volatile.includes(key) && v !== null ? "<volatile>" : walk(v),
        ]),
      );
    };
    return outcome.ok ? { ok: true, body: walk(outcome.body) } : outcome;
  }

  /** Asserts the outcomes agree with the first protocol's, which must be `expected`. */
  function assertSame(
    t: ExecutionContext,
    outcomes: Partial<Record<WireProtocol, Outcome>>,
    expected: Expected,
  ): void {
    const [[first, reference], ...others] = Object.entries(outcomes);
    t.like(reference, expected, `${first}: ${JSON.stringify(reference)}`);
    for (const [protocol, outcome] of others) {
      t.deepEqual(outcome, reference, `${protocol} differs from ${first}`);
    }
  }

  const ok = async (method: string, request: Request, key = keys.secret): Promise<Json> => {
    const outcome = await call(server, "rest", rpc(method), request, key);
    if (!outcome.ok) throw new Error(`${method}: ${outcome.code} ${outcome.message}`);
    return outcome.body;
  };

  /**
   * What a refused call must leave alone: customers, referrals, reward
   * grants, webhooks (deliveries move the health).
   */
  async function state(): Promise<unknown> {
    return {
      customers: await ok("ListCustomers", { limit: 100 }),
      referrals: await ok("ListReferrals", { limit: 100 }),
      rewardGrants: await ok("ListRewardGrants", { limit: 100 }),
      webhooks: (await ok("ListWebhooks", {})).map(({ health: _, ...webhook }: Json) => webhook),
    };
  }

  let receiver: Receiver | undefined;
  test.after.always(() => receiver?.close());

  test.serial.before(async () => {
    receiver = await startReceiver();
    const identify = (externalUserId: string, environment = "production") =>
      ok("IdentifyCustomer", { externalUserId, name: externalUserId, environment });
    const refer = (referralCode: string, refereeExternalUserId: string) =>
      ok("CreateReferral", { referralCode, refereeExternalUserId });

    const referrer = await identify("parity-referrer");
    fixture.referrerId = referrer.id;
    fixture.referralCode = referrer.referralCode;
    fixture.otherReferralCode = (await identify("parity-referrer-2")).referralCode;
    await identify("parity-referee");
    await identify("parity-accepted");
    const accepted = await refer(fixture.referralCode, "parity-accepted");
    await ok("UpdateReferralStatus", { id: accepted.id, status: "accepted" });
    fixture.acceptedReferralId = accepted.id;
    // The demo campaign's rewards: one grant to each party, approved at once.
    const earned = await ok("ListRewardGrants", { referralId: accepted.id });
    fixture.earnedGrantId = earned.data.find((grant: Json) => grant.party === "referrer").id;

    const webhook = await ok("CreateWebhook", {
      url: `${receiver.url}/parity`,
      environment: "test",
      eventTypes: ["customer.created"],
    });
    fixture.webhookId = webhook.webhook.id;
    const [application] = await ok("ListApplications", {}, keys.admin);
    fixture.applicationId = application.id;
    const { identitySecret } = await ok(
      "RotateIdentitySecret",
      { applicationId: application.id },
      keys.admin,
    );
    fixture.adaUserHash = userHashOf(identitySecret, "parity-ada");
    fixture.referrerUserHash = userHashOf(identitySecret, "parity-referrer");
    fixture.identityApplicationId = (
      await ok("CreateApplication", { name: "Parity identity" }, keys.admin)
    ).application.id;
    // Every rotation of the matrix then has a previous secret to keep.
    await ok("RotateIdentitySecret", { applicationId: fixture.identityApplicationId }, keys.admin);
    const campaign = () =>
      ok("CreateCampaign", { applicationId: application.id, campaign: parityCampaign }, keys.admin);
    fixture.campaignId = (await campaign()).id;
    fixture.liveCampaignId = (await ok("GetLiveCampaign", {}, keys.public)).id;
    await ok(
      "UpdateCampaign",
      {
        id: fixture.liveCampaignId,
        campaign: { leaderboard: { public: true } },
        updateMask: ["leaderboard"],
      },
      keys.admin,
    );

    for (const protocol of wireProtocols) {
      await identify(`parity-pending-${protocol}`);
      const pending = await refer(fixture.referralCode, `parity-pending-${protocol}`);
      fixture.pendingReferralIds[protocol] = pending.id;
      // A self-referral, flagged: a fraud review of its own to resolve.
      const self = await identify(`parity-self-${protocol}`);
      await refer(self.referralCode, `parity-self-${protocol}`);
      const { reviews } = await ok("ListFraudReviews", {});
      fixture.fraudReviewIds[protocol] = reviews.find(
        (review: Json) => review.referrerId === self.id,
      ).id;
      const deletable = await ok("CreateWebhook", {
        url: "https://example.com/parity-delete",
        environment: "test",
        eventTypes: ["checkpoint.ingested"],
      });
      fixture.deletableWebhookIds[protocol] = deletable.webhook.id;
      const key = await ok(
        "CreateApiKey",
        { applicationId: application.id, kind: "public", name: "parity-revoke" },
        keys.admin,
      );
      fixture.revocableKeyIds[protocol] = key.apiKey.id;
      fixture.deletableCampaignIds[protocol] = (await campaign()).id;
      fixture.approvedGrantIds[protocol] = (
        await ok("CreateRewardGrant", {
          customerId: referrer.id,
          value: goodwill,
          reason: "parity",
        })
      ).id;
      await identify(`parity-test-${protocol}`, "test");
      fixture.erasableCustomerIds[protocol] = (await identify(`parity-erase-${protocol}`)).id;
    }

    // The relay queues one delivery per test customer and sends it at once:
    // wait until all are recorded, so the webhook reads hold still.
    const { deliveries } = await settled(
      async () => ({
        deliveries: (await ok("ListWebhookDeliveries", { id: fixture.webhookId })).data,
        webhooks: await ok("ListWebhooks", {}),
      }),
      ({ deliveries }) =>
        deliveries.length === wireProtocols.length &&
        deliveries.every((delivery: Json) => delivery.status === "succeeded"),
    );
    wireProtocols.forEach((protocol, i) => {
      fixture.deliveryIds[protocol] = deliveries[i].id;
    });
  });

  /** Reads until `done` holds and two reads in a row agree. */
  async function settled<T>(read: () => Promise<T>, done: (value: T) => boolean): Promise<T> {
    const deadline = Date.now() + 5000;
    let previous: string | undefined;
    for (;;) {
      const value = await read();
      const text = JSON.stringify(value);
      if (done(value) && text === previous) return value;
      if (Date.now() > deadline) throw new Error(`never settled: ${text}`);
      previous = text;
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  }

  test("every public RPC has parity cases, and every case names an RPC", (t) => {
    const publicRpcs = methods.filter((m) => methodAccess(m) !== Access.ADMIN);
    t.true(publicRpcs.length > 0, "the contract's services were found");
    t.deepEqual(
      publicRpcs.filter((m) => !cases[m.name]).map((m) => m.name),
      [],
    );
    t.deepEqual(
      Object.keys(cases).filter((name) => !methods.some((m) => m.name === name)),
      [],
    );
  });

  const refused = (code: string): Expected => ({ ok: false, code });
  const situations: Record<ErrorCode, string> = {
    invalid_argument: "with an invalid request",
    not_found: "for a missing record",
    failed_precondition: "in a state that forbids it",
  };

  // The matrix: every RPC × every outcome it can produce × every protocol, in
  // the contract's order (so RedeliverWebhookEvent comes after the webhook reads).
  for (const method of methods) {
    const rpcCases = cases[method.name];
    if (!rpcCases) continue;
    const { own, wrong } = credentials[methodAccess(method)];
    const cells: Array<[string, RequestOf, string | undefined, Expected]> = [
      ["with its own key", rpcCases.ok, own, { ok: true }],
      ["without a key", rpcCases.ok, undefined, refused("unauthenticated")],
      ["with an unknown key", rpcCases.ok, "sk_unknown", refused("unauthenticated")],
    ];
    if (wrong) cells.push([`with ${wrong.name}`, rpcCases.ok, wrong.key, refused(wrong.code)]);
    for (const [code, request] of Object.entries(rpcCases.errors ?? {})) {
      cells.push([situations[code as ErrorCode], request, own, refused(code)]);
    }
    for (const [situation, request, key, expected] of cells) {
      const outcome = expected.ok ? "ok" : expected.code;
      test.serial(`${method.name} ${situation}: ${outcome}, alike on every protocol`, async (t) => {
        const outcomes: Partial<Record<WireProtocol, Outcome>> = {};
        for (const protocol of wireProtocols) {
          const result = await call(server, protocol, method, requestOf(request, protocol), key);
          outcomes[protocol] = normalized(result, rpcCases.volatile);
        }
        assertSame(t, outcomes, expected);
      });
    }
  }

  /** The singular enum fields a request of the RPC carries outside its path. */
  function enumFieldsOf(method: DescMethod) {
    const path = httpRouteOf(method)?.pathFields ?? [];
    return method.input.fields.filter((f) => f.fieldKind === "enum" && !path.includes(f));
  }

  /**
   * Calls with what only one family of protocols can send, from the RPC's
   * successful request: each must be INVALID_ARGUMENT naming `field`, the same
   * on each protocol of the family, and must change nothing.
   */
  function refusedAlike(
    title: string,
    method: DescMethod,
    field: string,
    calls: Partial<Record<WireProtocol, (request: Request) => Promise<Outcome>>>,
    messages?: Partial<Record<WireProtocol, string>>,
  ): void {
    test.serial(title, async (t) => {
      const request = requestOf((cases[method.name] as Cases).ok, "rest");
      const before = await state();
      const outcomes: Partial<Record<WireProtocol, Outcome>> = {};
      for (const [protocol, send] of Object.entries(calls)) {
        outcomes[protocol as WireProtocol] = await send(request);
      }
      if (messages) {
        // The same refusal in each protocol's own JSON dialect: the words it accepts.
        for (const [protocol, message] of Object.entries(messages)) {
          t.deepEqual(
            outcomes[protocol as WireProtocol],
            { ok: false, code: "invalid_argument", message },
            protocol,
          );
        }
      } else {
        assertSame(t, outcomes, { ok: false, code: "invalid_argument" });
      }
      for (const outcome of Object.values(outcomes)) {
        t.regex(outcome.ok ? "" : outcome.message, new RegExp(`^${field}\\b`), "names the field");
      }
      t.deepEqual(await state(), before, "changes nothing");
    });
  }

  for (const method of methods) {
    // A stream's request goes through the pipeline's one decoding step, as a
    // unary call's does (streaming.test.ts sends it malformed); the typed
    // clients these checks use call unary RPCs only.
    if (!cases[method.name] || method.methodKind === "server_streaming") continue;
    const key = credentials[methodAccess(method)].own;
    const json = (extra: Request) => ({
      rest: (request: Request) => callJson(server, "rest", method, request, extra, key),
      connect: (request: Request) => callJson(server, "connect", method, request, extra, key),
      "rest-h2": (request: Request) => callJson(server, "rest-h2", method, request, extra, key),
      "connect-h2": (request: Request) =>
        callJson(server, "connect-h2", method, request, extra, key),
    });
    // Only a body can carry an unknown field alike: REST reads GET requests from the query.
    if (httpRouteOf(method)?.body === "*") {
      const title = `${method.name} with an unknown field: refused alike by REST and Connect JSON`;
      refusedAlike(title, method, "bogus", json({ bogus: 1 }));
    }
    for (const field of enumFieldsOf(method)) {
      const word = `${method.name} with an unknown ${field.jsonName} word: refused by REST and Connect JSON, each in its words`;
      // A word no enum of the contract has.
      const values = field.enum?.values ?? [];
      const protoNames = values.filter((v) => v.number !== 0).map((v) => v.name);
      const restWords = field.enum ? enumWords(field.enum).words : [];
      const restRefusal = `${field.jsonName} must be one of: ${restWords.join(", ")}`;
      const connectRefusal = `${field.jsonName} must be one of: ${protoNames.join(", ")}`;
      refusedAlike(word, method, field.jsonName, json({ [field.jsonName]: "staging" }), {
        rest: restRefusal,
        connect: connectRefusal,
        "rest-h2": restRefusal,
        "connect-h2": connectRefusal,
      });
      const binary = (protocol: Exclude<WireProtocol, "rest" | "rest-h2">) => (request: Request) =>
        callMessage(
          server,
          protocol,
          method,
          { ...fromPlain(method.input, request), [field.localName]: 99 },
          key,
        );
      refusedAlike(
        `${method.name} with an unknown ${field.jsonName} number: refused alike by the binary protocols`,
        method,
        field.jsonName,
        {
          grpc: binary("grpc"),
          "connect-binary": binary("connect-binary"),
          "grpc-web": binary("grpc-web"),
          "connect-binary-h2": binary("connect-binary-h2"),
          "grpc-web-h2": binary("grpc-web-h2"),
        },
      );
    }
  }

  {
    // A misspelt field is refused with the field it most likely meant, alike on every JSON protocol.
    const method = rpc("IdentifyCustomer");
    const key = credentials[methodAccess(method)].own;
    const misspelt =
      (protocol: "rest" | "connect" | "rest-h2" | "connect-h2") => (request: Request) => {
        const { externalUserId, ...rest } = request;
        return callJson(server, protocol, method, rest, { externalUserID: externalUserId }, key);
      };
    const message = "externalUserID is not a known field; did you mean externalUserId?";
    refusedAlike(
      "IdentifyCustomer with a misspelt field: refused with the field it meant",
      method,
      "externalUserID",
      {
        rest: misspelt("rest"),
        connect: misspelt("connect"),
        "rest-h2": misspelt("rest-h2"),
        "connect-h2": misspelt("connect-h2"),
      },
      { rest: message, connect: message, "rest-h2": message, "connect-h2": message },
    );
  }
}
