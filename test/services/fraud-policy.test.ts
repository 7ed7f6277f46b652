import test from "ava";
import { ruleCatalogue } from "../../src/domain/fraud-rules.js";
import { type Protocol, protocols } from "../helpers/callers.js";
import { payout } from "../helpers/rewards.js";
import { type Json, keys, useServer } from "../helpers/server.js";
import { callStream } from "../helpers/streams.js";
import { rpc, tenantCalls } from "../helpers/tenant-calls.js";

/**
 * A campaign's fraud policy (issue 42, docs/fraud.md): set by the admin
 * API, read by secret keys only; every action (note, flag, hold_reward,
 * reject), the allow and deny lists, shadow mode, the review queue and its
 * decisions, and a backtest whose counts are what enforcing the same
 * policy then does. On REST, gRPC and Connect, each with an application of
 * its own.
 */

let elapsedMs = 0;
const server = useServer({ clock: () => new Date(Date.now() + elapsedMs) });
const { admin, send, okBody } = tenantCalls(server);

interface App {
  id: string;
  secretKey: string;
  publicKey: string;
  campaignId: string;
}

let apps = 0;
async function newApplication(fraudPolicy?: Json): Promise<App> {
  const created = await admin("POST", "/admin/applications", { name: `fraud ${++apps}` });
  const id = created.application.id;
  const campaign = await admin("POST", `/admin/applications/${id}/campaigns`, {
    name: "Fraud",
    environment: "production",
    isLive: true,
    isDefault: true,
    proposedRewardTrigger: "purchase",
    rewards: [payout({ payoutAmount: 20 })],
    ...(fraudPolicy ? { fraudPolicy } : {}),
  });
  return {
    id,
    secretKey: created.secretKey,
    publicKey: created.publicKey,
    campaignId: campaign.id,
  };
}

/** The policy most tests run: one rule per action, and both lists. */
const everyAction: Json = {
  rules: [
    { type: "self_referral", action: "reject" },
    { type: "disposable_email", action: "flag" },
    { type: "same_network_as_referrer", action: "hold_reward" },
    { type: "similar_name", action: "note" },
  ],
  allow: { emails: ["vip@example.com"] },
  deny: { domains: ["fraud.example"] },
};

/** The backend's calls for one application on one protocol. */
function backend(protocol: Protocol, app: App) {
  const identify = (externalUserId: string, fields: Json = {}) =>
    okBody(
      protocol,
      "IdentifyCustomer",
      { externalUserId, name: externalUserId, ...fields },
      app.secretKey,
    );
  const refer = (code: string, referee: string, ip?: string) =>
    okBody(
      protocol,
      "CreateReferral",
      {
        referralCode: code,
        refereeExternalUserId: referee,
        ...(ip ? { context: { ip, userAgent: "Mozilla/5.0 Firefox/120.0" } } : {}),
      },
      app.secretKey,
    );
  const purchase = (externalUserId: string) =>
    okBody(
      protocol,
      "IngestCheckpoint",
      { name: "purchase", externalUserId, environment: "production" },
      app.secretKey,
    );
  const grantsOf = async (customerId: string) =>
    (await okBody(protocol, "ListRewardGrants", { customerId }, app.secretKey)).data as Json[];
  return { identify, refer, purchase, grantsOf };
}

for (const protocol of protocols) {
  test.serial(
    `${protocol}: the policy is set by the admin API, read by secret keys only, and a bad one is refused naming its field`,
    async (t) => {
      const app = await newApplication();
      const updated = await okBody(
        protocol,
        "UpdateCampaign",
        {
          id: app.campaignId,
          campaign: { fraudPolicy: { rules: [{ type: "velocity", params: { perHour: 5 } }] } },
          updateMask: ["fraud_policy"],
        },
        keys.admin,
      );
      // Completed with the rule's defaults, so the stored policy says everything it does.
      // REST answers the campaign itself (its response_body).
      t.like((updated.campaign ?? updated).fraudPolicy, {
        mode: "enforce",
        rules: [
          {
            type: "velocity",
            enabled: true,
            action: "flag",
            severity: "medium",
            params: { perHour: 5 },
          },
        ],
        review: { deadlineDays: 0, onLapse: "keep_flagged" },
      });
      // REST answers the list and the live campaign themselves (their response_body).
      const campaigns = async (key: string) => {
        const body = await okBody(protocol, "ListCampaigns", {}, key);
        return (body.campaigns ?? body) as Json[];
      };
      t.is((await campaigns(app.secretKey))[0]?.fraudPolicy.rules[0].type, "velocity");
      t.falsy((await campaigns(app.publicKey))[0]?.fraudPolicy, "a public key never sees it");
      const live = await okBody(protocol, "GetLiveCampaign", {}, app.publicKey);
      t.falsy((live.campaign ?? live).fraudPolicy);

      for (const [policy, field] of [
        [{ rules: [{ type: "velocity", action: "reject" }] }, "rules[0].action"],
        [{ rules: [{ type: "no_such_rule" }] }, "rules[0].type"],
        [{ rules: [{ type: "velocity", params: { perDay: 3 } }] }, "rules[0].params.perDay"],
        [{ rules: [{ type: "velocity", params: { perHour: 0 } }] }, "rules[0].params.perHour"],
        [{ deny: { networks: ["203.0.113.0/16"] } }, "deny.networks[0]"],
        [{ allow: { emails: ["not an email"] } }, "allow.emails[0]"],
        [{ review: { deadlineDays: 400 } }, "review.deadlineDays"],
      ] as const) {
        const refused = await send(
          protocol,
          "UpdateCampaign",
          { id: app.campaignId, campaign: { fraudPolicy: policy }, updateMask: ["fraud_policy"] },
          keys.admin,
        );
        t.false(refused.ok, JSON.stringify(policy));
        if (!refused.ok) {
          t.is(refused.code, "invalid_argument");
          t.true(
            refused.message.includes(`campaign.fraudPolicy.${field}`),
            `${refused.message} names ${field}`,
          );
        }
      }
      const [after] = await campaigns(app.secretKey);
      t.is(after?.fraudPolicy.rules[0].params.perHour, 5, "a refusal changed nothing");
    },
  );

  test.serial(
    `${protocol}: every rule of the catalogue fires, with the facts it read`,
    async (t) => {
      // Every rule noting, with thresholds one referral can reach.
      const params: Record<string, Json> = {
        existing_customer: { maxRefereeAgeSeconds: 1 },
        velocity: { perHour: 1 },
        network_velocity: { perDay: 1 },
        referrer_history: { minRejected: 1 },
      };
      const app = await newApplication({
        rules: Object.keys(ruleCatalogue).map((type) => ({
          type,
          action: "note",
          ...(params[type] ? { params: params[type] } : {}),
        })),
      });
      const { identify, refer } = backend(protocol, app);
      let n = 0;
      /** A referrer of its own, and a referee identified with `referee`, referred with `context`. */
      const scenario = async (referrerFields: Json, refereeFields: Json, context: Json = {}) => {
        const tag = `${protocol}-${++n}`;
        const referrer = await identify(`r-${tag}`, referrerFields);
        await identify(`e-${tag}`, refereeFields);
        const referral = await okBody(
          protocol,
          "CreateReferral",
          { referralCode: referrer.referralCode, refereeExternalUserId: `e-${tag}`, context },
          app.secretKey,
        );
        return { referrer, referral };
      };
      const verdictOf = (referral: Json, type: string) =>
        referral.suspectedFrauds.find((verdict: Json) => verdict.type === type);
      const fired = (referral: Json, type: string, evidence: Json) => {
        t.like(verdictOf(referral, type), { type, action: "note", ruleVersion: 1, evidence }, type);
      };

      const self = await identify(`self-${protocol}`);
      fired(await refer(self.referralCode, `self-${protocol}`), "self_referral", {
        sameCustomer: true,
      });
      {
        const referrer = await identify(`old-r-${protocol}`);
        await identify(`old-e-${protocol}`);
        elapsedMs += 2000;
        const referral = await refer(referrer.referralCode, `old-e-${protocol}`);
        t.true(verdictOf(referral, "existing_customer").evidence.refereeAgeSeconds >= 2);
      }
      {
        const { referrer } = await scenario({}, {});
        await identify(`v-${protocol}`);
        fired(await refer(referrer.referralCode, `v-${protocol}`), "velocity", {
          referrerReferralsLastHour: 1,
        });
      }
      {
        const first = await scenario({}, { email: `twin.${protocol}@gmail.com` });
        t.falsy(verdictOf(first.referral, "duplicate_referee_email"));
        const { referral } = await scenario({}, { email: `twin${protocol}+2@gmail.com` });
        fired(referral, "duplicate_referee_email", { refereeMailboxReferred: true });
      }
      fired(
        (await scenario({ email: "john.doe1@example.org" }, { email: "john.doe2@example.org" }))
          .referral,
        "similar_email",
        { emailLocalDistance: 1 },
      );
      fired(
        (await scenario({ name: "Ada Lovelace" }, { name: "Ada Lovelase" })).referral,
        "similar_name",
        { nameSimilarity: 0.909 },
      );
      fired((await scenario({}, { email: "tmp@mailinator.com" })).referral, "disposable_email", {
        domain: "mailinator.com",
      });
      fired(
        (await scenario({}, { email: "x1y2@privaterelay.appleid.com" })).referral,
        "masked_email",
        { domain: "privaterelay.appleid.com" },
      );
      fired(
        (await scenario({ context: { ip: "192.0.2.10" } }, {}, { ip: "192.0.2.11" })).referral,
        "same_network_as_referrer",
        { sameAddress: false },
      );
      {
        await scenario({}, {}, { ip: "198.18.0.1" });
        const { referral } = await scenario({}, {}, { ip: "198.18.0.2" });
        fired(referral, "network_velocity", { networkReferralsLastDay: 1 });
      }
      fired(
        (
          await scenario(
            { context: { ip: "192.0.2.20", deviceId: "tablet-1" } },
            {},
            { ip: "198.51.100.40", deviceId: "tablet-1" },
          )
        ).referral,
        "shared_device",
        { deviceId: "tablet-1" },
      );
      {
        const { referrer, referral } = await scenario({}, {});
        await okBody(
          protocol,
          "UpdateReferralStatus",
          { id: referral.id, status: "rejected", reason: "test" },
          app.secretKey,
        );
        await identify(`h-${protocol}`);
        fired(await refer(referrer.referralCode, `h-${protocol}`), "referrer_history", {
          referrerRejected: 1,
        });
      }
    },
  );

  test.serial(
    `${protocol}: every action — note, flag, hold_reward, reject — and the allow and deny lists`,
    async (t) => {
      const app = await newApplication(everyAction);
      const { identify, refer, purchase, grantsOf } = backend(protocol, app);
      const referrer = await identify("ada", {
        name: "Ada Lovelace",
        email: "ada@example.com",
        context: { ip: "203.0.113.5" },
      });
      const code = referrer.referralCode;

      await identify("ada2", { name: "Ada Lovelase", email: "lovelace@example.org" });
      const noted = await refer(code, "ada2", "198.51.100.1");
      t.is(noted.status, "pending");
      t.like(noted.suspectedFrauds, [{ type: "similar_name", action: "note", shadow: false }]);

      await identify("temp", { name: "Temp", email: "temp@mailinator.com" });
      const flagged = await refer(code, "temp", "198.51.100.2");
      t.is(flagged.status, "flagged");
      t.like(flagged.suspectedFrauds, [{ type: "disposable_email", action: "flag" }]);

      await identify("flatmate", { name: "Flatmate", email: "flatmate@example.net" });
      const held = await refer(code, "flatmate", "203.0.113.9");
      t.is(held.status, "pending", "a held reward converts");
      t.true(held.rewardsHeld);
      t.like(held.suspectedFrauds, [{ type: "same_network_as_referrer", action: "hold_reward" }]);

      const self = await refer(code, "ada", "203.0.113.5");
      t.is(self.status, "rejected");
      t.like(self.suspectedFrauds, [{ type: "self_referral", action: "reject" }]);

      await identify("mallory", { name: "Mallory", email: "m@mail.fraud.example" });
      const denied = await refer(code, "mallory", "198.51.100.3");
      t.is(denied.status, "rejected");
      t.like(denied.suspectedFrauds, [
        { type: "deny_list", action: "reject", evidence: { domain: "fraud.example" } },
      ]);

      // The allow list ends evaluation: a disposable-looking VIP is not flagged.
      await identify("vip", { name: "Ada Lovelace", email: "VIP@example.com" });
      const allowed = await refer(code, "vip", "203.0.113.5");
      t.is(allowed.status, "pending");
      t.is(allowed.suspectedFrauds.length, 1);
      t.like(allowed.suspectedFrauds, [{ type: "allow_list", action: "note" }]);
      t.false(allowed.rewardsHeld);

      // The held referral converts; its grant waits for the review.
      await purchase("flatmate");
      const [heldGrant] = await grantsOf(referrer.id);
      t.like(heldGrant, { status: "pending", statusReason: "fraud_review", referralId: held.id });

      // The queue: one group per referrer and rule.
      const queue = await okBody(protocol, "ListFraudReviews", {}, app.secretKey);
      const byRule = new Map<string, Json>(
        queue.reviews.map((review: Json) => [review.ruleType, review]),
      );
      t.deepEqual([...byRule.keys()].sort(), ["disposable_email", "same_network_as_referrer"]);
      t.like(byRule.get("disposable_email"), {
        referrerId: referrer.id,
        flagged: 1,
        held: 0,
        referralIds: [flagged.id],
        evidence: { disposable: 1, emailDomains: ["mailinator.com"] },
      });
      t.like(byRule.get("same_network_as_referrer"), {
        flagged: 0,
        held: 1,
        referralIds: [held.id],
        evidence: { sameNetworkAsReferrer: 1 },
      });

      // Accepting releases the held grant; rejecting rejects the flagged referral.
      const accepted = await okBody(
        protocol,
        "ResolveFraudReview",
        { id: byRule.get("same_network_as_referrer").id, decision: "accept", reason: "flatmates" },
        app.secretKey,
      );
      t.like(accepted, { decision: "accept", releasedGrants: 1, voidedGrants: 0 });
      t.like(accepted.referrals, [{ id: held.id, status: "accepted", rewardsHeld: false }]);
      const [released] = await grantsOf(referrer.id);
      t.like(released, { status: "approved", id: heldGrant.id });

      const rejected = await okBody(
        protocol,
        "ResolveFraudReview",
        { id: byRule.get("disposable_email").id, decision: "reject" },
        app.secretKey,
      );
      t.like(rejected.referrals, [{ id: flagged.id, status: "rejected" }]);
      t.like(rejected.referrals[0].statusHistory.at(-1), {
        cause: "review",
        reason: "fraud review rejected (disposable_email)",
      });
      const empty = await okBody(protocol, "ListFraudReviews", {}, app.secretKey);
      t.deepEqual(empty.reviews, []);
      const again = await send(
        protocol,
        "ResolveFraudReview",
        { id: byRule.get("disposable_email").id, decision: "accept" },
        app.secretKey,
      );
      t.like(again, { ok: false, code: "not_found" });
      const noDecision = await send(
        protocol,
        "ResolveFraudReview",
        { id: byRule.get("disposable_email").id },
        app.secretKey,
      );
      t.like(noDecision, { ok: false, code: "invalid_argument" });
      const byPublic = await send(protocol, "ListFraudReviews", {}, app.publicKey);
      t.like(byPublic, { ok: false, code: "permission_denied" });

      // The stats count each rule's verdicts by what they did.
      const stats = await okBody(
        protocol,
        "GetCampaignStats",
        { id: app.campaignId },
        app.secretKey,
      );
      const fraud = new Map<string, Json>(
        stats.report.totals.fraud.map((count: Json) => [count.rule, count]),
      );
      const counts = (rule: string) =>
        Object.fromEntries(
          Object.entries(fraud.get(rule) ?? {}).map(([name, n]) => [name, Number(n)]),
        );
      t.like(counts("disposable_email"), { flagged: 1, held: 0, rejected: 0, shadow: 0 });
      t.like(counts("deny_list"), { rejected: 1 });
      t.like(counts("self_referral"), { rejected: 1 });
      t.like(counts("allow_list"), { noted: 1 });
      t.true(counts("same_network_as_referrer").held >= 1);
    },
  );

  test.serial(
    `${protocol}: rejecting a held, converted referral reverses it and voids its held grant`,
    async (t) => {
      const app = await newApplication(everyAction);
      const { identify, refer, purchase, grantsOf } = backend(protocol, app);
      const referrer = await identify("bo", { context: { ip: "203.0.113.5" } });
      await identify("roommate");
      const held = await refer(referrer.referralCode, "roommate", "203.0.113.77");
      t.true(held.rewardsHeld);
      await purchase("roommate");
      const queue = await okBody(protocol, "ListFraudReviews", {}, app.secretKey);
      const rejected = await okBody(
        protocol,
        "ResolveFraudReview",
        { id: queue.reviews[0].id, decision: "reject", reason: "one household" },
        app.secretKey,
      );
      t.like(rejected, { releasedGrants: 0, voidedGrants: 1 });
      t.like(rejected.referrals, [{ id: held.id, status: "reversed" }]);
      const [grant] = await grantsOf(referrer.id);
      t.is(grant.status, "voided");
    },
  );

  test.serial(
    `${protocol}: shadow mode records what it would do and changes nothing`,
    async (t) => {
      const app = await newApplication({ ...everyAction, mode: "shadow" });
      const { identify, refer, purchase, grantsOf } = backend(protocol, app);
      const referrer = await identify("cy", { context: { ip: "203.0.113.5" } });
      const code = referrer.referralCode;
      await identify("temp", { email: "temp@mailinator.com" });
      const wouldFlag = await refer(code, "temp", "198.51.100.2");
      t.is(wouldFlag.status, "pending");
      t.like(wouldFlag.suspectedFrauds, [
        { type: "disposable_email", action: "flag", shadow: true },
      ]);
      t.is(wouldFlag.risk.level, "medium", "the risk says what the verdicts found");
      const self = await refer(code, "cy");
      t.is(self.status, "pending");
      t.like(self.suspectedFrauds, [{ type: "self_referral", action: "reject", shadow: true }]);
      await identify("flatmate");
      const wouldHold = await refer(code, "flatmate", "203.0.113.9");
      t.false(wouldHold.rewardsHeld);
      await purchase("flatmate");
      const [grant] = await grantsOf(referrer.id);
      t.is(grant.status, "approved", "no grant is held in shadow");
      const queue = await okBody(protocol, "ListFraudReviews", {}, app.secretKey);
      t.deepEqual(queue.reviews, []);
    },
  );

  test.serial(
    `${protocol}: a backtest's counts are what enforcing the same policy then does`,
    async (t) => {
      const candidate: Json = {
        ...everyAction,
        rules: [...(everyAction.rules as Json[]), { type: "velocity", params: { perHour: 3 } }],
      };
      // The same referrals, once judged by the default rules, once by the candidate.
      const history = await newApplication();
      const enforced = await newApplication(candidate);
      const statuses: Json[][] = [];
      for (const app of [history, enforced]) {
        const { identify, refer } = backend(protocol, app);
        const ada = await identify("ada", {
          email: "ada@example.com",
          context: { ip: "203.0.113.5" },
        });
        const made: Json[] = [];
        for (const [name, email, ip] of [
          ["temp", "temp@mailinator.com", "198.51.100.2"],
          ["flatmate", "flatmate@example.net", "203.0.113.9"],
          ["p1", "p1@example.net", "198.51.100.10"],
          ["p2", "p2@example.net", "198.51.100.11"],
          ["p3", "p3@example.net", "198.51.100.12"],
          ["mallory", "m@fraud.example", "198.51.100.13"],
          ["vip", "vip@example.com", "203.0.113.5"],
        ] as const) {
          await identify(name, { email });
          made.push(await refer(ada.referralCode, name, ip));
        }
        made.push(await refer(ada.referralCode, "ada"));
        statuses.push(made);
      }
      const [before, after] = statuses as [Json[], Json[]];
      const streamed = await callStream(
        server,
        protocol,
        rpc("TestFraudPolicy"),
        { campaignId: history.campaignId, policy: candidate },
        history.secretKey,
      );
      t.falsy(streamed.error);
      const last = streamed.messages.at(-1) as Json;
      t.is(last.scanned, before.length);
      const result = last.result;
      const count = (made: Json[], test: (referral: Json) => boolean) => made.filter(test).length;
      t.like(result, {
        referrals: before.length,
        withoutEvidence: 0,
        allowed: 1,
        would: {
          flag: count(after, (r) => r.status === "flagged"),
          reject: count(after, (r) => r.status === "rejected"),
          holdReward: count(after, (r) => r.status === "pending" && r.rewardsHeld),
        },
      });
      t.true(result.would.flag > 0 && result.would.reject > 0 && result.would.holdReward > 0);
      const stoppedNow = (r: Json) => r.status === "flagged" || r.status === "rejected";
      t.is(
        result.newlyFlagged,
        before.filter((r, index) => r.status !== "flagged" && stoppedNow(after[index] as Json))
          .length,
      );
      const velocity = result.rules.find((rule: Json) => rule.type === "velocity");
      t.true(velocity.hits > 0, "velocity recounted from the stored times");
      t.is(velocity.sampleReferralIds.length, Math.min(5, velocity.hits));

      // A backtest changes nothing.
      const unchanged = await okBody(protocol, "ListReferrals", {}, history.secretKey);
      t.deepEqual(
        unchanged.data.map((r: Json) => r.status).sort(),
        before.map((r) => r.status).sort(),
      );
      const refused = await callStream(
        server,
        protocol,
        rpc("TestFraudPolicy"),
        {
          campaignId: history.campaignId,
          policy: { rules: [{ type: "velocity", action: "reject" }] },
        },
        history.secretKey,
      );
      t.like(refused.error, { code: "invalid_argument" });
      t.true(refused.error?.message.includes("policy.rules[0].action"));
    },
  );
}

test.serial(
  "a review deadline: accept lapses into an acceptance by the sweep, keep_flagged stays flagged",
  async (t) => {
    const day = 24 * 60 * 60 * 1000;
    const policy = (onLapse: string): Json => ({
      rules: [{ type: "disposable_email" }],
      review: { deadlineDays: 2, onLapse },
    });
    const accepting = await newApplication(policy("accept"));
    const keeping = await newApplication(policy("keep_flagged"));
    const flaggedIn = async (app: App) => {
      const { identify, refer } = backend("rest", app);
      const referrer = await identify("dee");
      await identify("temp", { email: "temp@mailinator.com" });
      return refer(referrer.referralCode, "temp");
    };
    const lapsing = await flaggedIn(accepting);
    const kept = await flaggedIn(keeping);
    t.is(lapsing.status, "flagged");
    const [review] = (await okBody("rest", "ListFraudReviews", {}, accepting.secretKey)).reviews;
    t.like(review, { onLapse: "accept", flagged: 1 });
    t.is(
      Date.parse(review.deadline) - Date.parse(lapsing.statusHistory[0].changedAt),
      2 * day,
      "the deadline counts from the flag",
    );
    const statusOf = async (app: App, id: string) =>
      (await okBody("rest", "ListReferrals", {}, app.secretKey)).data.find(
        (referral: Json) => referral.id === id,
      );
    elapsedMs += 3 * day;
    const deadline = Date.now() + 10_000;
    let lapsed = await statusOf(accepting, lapsing.id);
    while (lapsed.status === "flagged" && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      lapsed = await statusOf(accepting, lapsing.id);
    }
    t.is(lapsed.status, "pending", "accepted by the lapse: back in the lifecycle");
    t.like(lapsed.statusHistory.at(-1), {
      cause: "review",
      actorId: "service",
      reason: "the fraud review's deadline lapsed",
    });
    t.is((await statusOf(keeping, kept.id)).status, "flagged");
    const [stillOpen] = (await okBody("rest", "ListFraudReviews", {}, keeping.secretKey)).reviews;
    t.true(Date.parse(stillOpen.deadline) < Date.now() + elapsedMs, "shown lapsed");
  },
);
