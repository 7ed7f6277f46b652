import test from "ava";
import type { ReferralEvidence } from "../../src/domain/fraud-evidence.js";
import {
  type CatalogueRuleName,
  defaultFraudPolicy,
  defaultRuleSettings,
  describeDuration,
  judgeAttribution,
  type RuleFacts,
  type RuleSetting,
  riskOf,
  ruleCatalogue,
} from "../../src/domain/fraud-rules.js";
import { plainEvidence } from "../helpers/evidence.js";

const hour = 3_600;
const day = 24 * hour;

/** An attribution no rule objects to; each test changes some of its evidence. */
function facts(evidence: Partial<ReferralEvidence> = {}, refereeId = "cus_b"): RuleFacts {
  return {
    referrerId: "cus_a",
    refereeId,
    evidence: { ...plainEvidence(), refereeAgeSeconds: hour, ...evidence },
  };
}

const email = (canonical: string, extra: { disposable?: boolean; masked?: boolean } = {}) => ({
  canonical,
  domain: canonical.slice(canonical.indexOf("@") + 1),
  disposable: extra.disposable ?? false,
  masked: extra.masked ?? false,
});

const network = (addressHash: string, networkHash: string, deviceId: string | null = null) => ({
  addressHash,
  networkHash,
  userAgentFamily: null,
  deviceId,
  source: "connection" as const,
  seenAt: new Date(),
});

/** Every catalogue rule enabled with its own defaults. */
const everyRule: RuleSetting[] = (Object.keys(ruleCatalogue) as CatalogueRuleName[]).map(
  (type) => ({
    type,
    enabled: true,
    action: ruleCatalogue[type].action,
    severity: ruleCatalogue[type].severity,
    params: ruleCatalogue[type].params,
  }),
);

const types = (input: RuleFacts, settings = everyRule) =>
  judgeAttribution(input, settings).map((verdict) => verdict.type);

test("a clean referral draws no verdict from any rule", (t) => {
  t.deepEqual(judgeAttribution(facts(), everyRule), []);
});

test("self_referral: the same customer, or the same mailbox; the verdict says what it read", (t) => {
  t.deepEqual(judgeAttribution(facts({}, "cus_a"), defaultRuleSettings()), [
    {
      type: "self_referral",
      message: "the referee is the referrer",
      action: "flag",
      severity: "high",
      ruleVersion: 1,
      evidence: { sameCustomer: true },
    },
  ]);
  const sameMailbox = facts({
    referrerEmail: email("janedoe@gmail.com"),
    refereeEmail: email("janedoe@gmail.com"),
  });
  t.like(judgeAttribution(sameMailbox, everyRule)[0], {
    type: "self_referral",
    message: "the referee has the referrer's email address",
  });
  t.deepEqual(types(facts({ referrerEmail: null, refereeEmail: null })), []);
});

test("existing_customer: identified longer ago than the limit, which the environment sets", (t) => {
  t.deepEqual(types(facts({ refereeAgeSeconds: 7 * day }), defaultRuleSettings()), []);
  const [verdict] = judgeAttribution(facts({ refereeAgeSeconds: 12 * day }), defaultRuleSettings());
  t.like(verdict, {
    type: "existing_customer",
    message: "the referee was identified 12 days before the referral (limit 7 days)",
    evidence: { refereeAgeSeconds: 12 * day },
  });
  const longer = defaultRuleSettings({ ...defaultFraudPolicy, maxRefereeAgeMs: 30 * day * 1000 });
  t.deepEqual(types(facts({ refereeAgeSeconds: 12 * day }), longer), []);
});

test("velocity: the referrer already reached its hourly limit", (t) => {
  t.deepEqual(types(facts({ referrerReferralsLastHour: 19 }), defaultRuleSettings()), []);
  t.like(judgeAttribution(facts({ referrerReferralsLastHour: 20 }), defaultRuleSettings())[0], {
    type: "velocity",
    message: "the referrer already has at least 20 referrals in the last hour (its limit)",
  });
  const two = defaultRuleSettings({ ...defaultFraudPolicy, velocityLimit: 2 });
  t.deepEqual(types(facts({ referrerReferralsLastHour: 2 }), two), ["velocity"]);
});

test("duplicate_referee_email: another customer of the mailbox was referred", (t) => {
  t.deepEqual(types(facts({ refereeMailboxReferred: true }), defaultRuleSettings()), [
    "duplicate_referee_email",
  ]);
});

test("the default settings run today's four rules, flagging", (t) => {
  const settings = defaultRuleSettings();
  t.deepEqual(
    settings.map((setting) => setting.type),
    ["self_referral", "existing_customer", "velocity", "duplicate_referee_email"],
  );
  t.true(settings.every((setting) => setting.action === "flag" && setting.enabled));
  const noisy = facts({
    nameSimilarity: 1,
    refereeEmail: email("x@mailinator.com", { disposable: true }),
  });
  t.deepEqual(types(noisy, settings), [], "the new rules run only where a policy lists them");
});

test("the new rules read the evidence", (t) => {
  const cases: [CatalogueRuleName, Partial<ReferralEvidence>, Partial<ReferralEvidence>][] = [
    [
      "similar_email",
      {
        referrerEmail: email("john.doe1@example.com"),
        refereeEmail: email("john.doe2@example.com"),
        emailLocalDistance: 1,
      },
      {
        referrerEmail: email("john@example.com"),
        refereeEmail: email("maria@example.com"),
        emailLocalDistance: 4,
      },
    ],
    ["similar_name", { nameSimilarity: 0.9 }, { nameSimilarity: 0.5 }],
    [
      "disposable_email",
      { refereeEmail: email("x@mailinator.com", { disposable: true }) },
      { refereeEmail: email("x@example.com") },
    ],
    [
      "masked_email",
      { refereeEmail: email("x@privaterelay.appleid.com", { masked: true }) },
      { refereeEmail: email("x@example.com") },
    ],
    [
      "same_network_as_referrer",
      { refereeNetwork: network("a1", "n1"), referrerNetwork: network("a2", "n1") },
      { refereeNetwork: network("a1", "n1"), referrerNetwork: network("a3", "n2") },
    ],
    ["network_velocity", { networkReferralsLastDay: 10 }, { networkReferralsLastDay: 9 }],
    ["click_flood", { networkClicksLastDay: 20 }, { networkClicksLastDay: 19 }],
    [
      "shared_device",
      { refereeNetwork: network("a1", "n1", "d1"), referrerNetwork: network("a2", "n2", "d1") },
      { refereeNetwork: network("a1", "n1", "d1"), referrerNetwork: network("a2", "n2", "d2") },
    ],
    ["referrer_history", { referrerRejected: 1 }, { referrerFlagged: 2 }],
  ];
  for (const [rule, fires, quiet] of cases) {
    const only = everyRule.filter((setting) => setting.type === rule);
    t.deepEqual(types(facts(fires), only), [rule], `${rule} fires`);
    t.deepEqual(types(facts(quiet), only), [], `${rule} stays quiet`);
  }
  const [network_] = judgeAttribution(
    facts({ refereeNetwork: network("a1", "n1"), referrerNetwork: network("a1", "n1") }),
    everyRule,
  );
  t.like(network_, {
    message: "the referee called from the referrer's address",
    action: "hold_reward",
    evidence: { sameAddress: true },
  });
});

test("a setting's parameters, action and severity override the catalogue's; a disabled rule is silent", (t) => {
  const settings: RuleSetting[] = [
    {
      type: "similar_name",
      enabled: true,
      action: "flag",
      severity: "high",
      params: { minSimilarity: 0.5 },
    },
    { type: "disposable_email", enabled: false, action: "flag", severity: "high", params: {} },
  ];
  const verdicts = judgeAttribution(
    facts({ nameSimilarity: 0.6, refereeEmail: email("x@mailinator.com", { disposable: true }) }),
    settings,
  );
  t.deepEqual(
    verdicts.map((verdict) => [verdict.type, verdict.action, verdict.severity]),
    [["similar_name", "flag", "high"]],
  );
});

test("risk: the higher of the worst severity and the score's band", (t) => {
  t.deepEqual(riskOf([]), { level: "low", score: 0 });
  const verdict = (severity: "low" | "medium" | "high") => ({
    type: "similar_name" as const,
    message: "",
    severity,
  });
  t.deepEqual(riskOf([verdict("low")]), { level: "low", score: 10 });
  t.deepEqual(riskOf([verdict("low"), verdict("low"), verdict("low")]), {
    level: "medium",
    score: 30,
  });
  t.deepEqual(riskOf([verdict("high")]), { level: "high", score: 50 });
  t.deepEqual(riskOf([verdict("medium"), verdict("medium")]), { level: "high", score: 50 });
  t.is(riskOf(Array.from({ length: 9 }, () => verdict("high"))).score, 100);
  t.deepEqual(
    riskOf([{ type: "velocity", message: "" }]),
    { level: "medium", score: 25 },
    "stored before severities",
  );
});

test("durations read as the largest whole unit", (t) => {
  t.is(describeDuration(day * 1000), "1 day");
  t.is(describeDuration(3 * hour * 1000 + 5), "3 hours");
  t.is(describeDuration(90_000), "1 minute");
  t.is(describeDuration(1500), "1 second");
  t.is(describeDuration(10), "10 ms");
});
