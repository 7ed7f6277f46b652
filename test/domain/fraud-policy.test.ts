import test from "ava";
import { networkHashes, type ReferralEvidence } from "../../src/domain/fraud-evidence.js";
import {
  compilePolicy,
  completePolicy,
  type FraudPolicyDoc,
  judgeWithPolicy,
  maxListEntries,
  strongestAction,
} from "../../src/domain/fraud-policy.js";
import { defaultFraudPolicy, ruleCatalogue } from "../../src/domain/fraud-rules.js";
import { plainEvidence } from "../helpers/evidence.js";

const key = Buffer.alloc(32, 7);

/** A policy completed as a save completes it; fails the test on a problem. */
function completed(policy: FraudPolicyDoc): FraudPolicyDoc {
  const problem = completePolicy(policy);
  if (problem) throw new Error(`${problem.field}: ${problem.message}`);
  return policy;
}

test("a saved policy says everything it does: each rule's defaults, the mode, the review", (t) => {
  const policy = completed({ rules: [{ type: "velocity", params: { perHour: 5 } }] });
  t.deepEqual(policy, {
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
});

test("a policy that cannot work is refused, naming the field", (t) => {
  const cases: [FraudPolicyDoc, string][] = [
    [{ rules: [{ type: "" }] }, "rules[0].type"],
    [{ rules: [{ type: "allow_list" }] }, "rules[0].type"],
    [{ rules: [{ type: "velocity" }, { type: "velocity" }] }, "rules[1].type"],
    [{ rules: [{ type: "disposable_email", action: "reject" }] }, "rules[0].action"],
    [{ rules: [{ type: "velocity", params: { perDay: 1 } }] }, "rules[0].params.perDay"],
    [{ rules: [{ type: "velocity", params: { perHour: 1.5 } }] }, "rules[0].params.perHour"],
    [
      { rules: [{ type: "similar_name", params: { minSimilarity: 2 } }] },
      "rules[0].params.minSimilarity",
    ],
    [{ rules: [{ type: "self_referral", params: { any: 1 } }] }, "rules[0].params.any"],
    [{ allow: { domains: ["not a domain"] } }, "allow.domains[0]"],
    [{ deny: { networks: ["10.0.0.0/8"] } }, "deny.networks[0]"],
    [{ deny: { networks: ["2001:db8::/48"] } }, "deny.networks[0]"],
    [{ deny: { customerIds: ["ref_1"] } }, "deny.customerIds[0]"],
    [
      { allow: { emails: Array.from({ length: maxListEntries + 1 }, (_, i) => `a${i}@x.com`) } },
      "allow.emails",
    ],
    [{ review: { deadlineDays: -1 } }, "review.deadlineDays"],
  ];
  for (const [policy, field] of cases) {
    t.is(completePolicy(policy)?.field, field, JSON.stringify(policy).slice(0, 80));
  }
  t.is(completePolicy({ rules: [{ type: "shared_device", action: "reject" }] }), null);
  t.is(
    completePolicy({ deny: { networks: ["203.0.113.0/24", "2001:db8::/64", "198.51.100.7"] } }),
    null,
  );
});

const referrerId = "cus_referrer";
const refereeId = "cus_referee";

function facts(overrides: Partial<ReferralEvidence> = {}) {
  return { referrerId, refereeId, evidence: { ...plainEvidence(), ...overrides } };
}

test("a campaign without a policy runs the environment's four rules, flagging", (t) => {
  const policy = compilePolicy(null, defaultFraudPolicy, null);
  t.deepEqual(
    policy.settings.map((setting) => [setting.type, setting.action]),
    [
      ["self_referral", "flag"],
      ["existing_customer", "flag"],
      ["velocity", "flag"],
      ["duplicate_referee_email", "flag"],
    ],
  );
  t.false(policy.own);
  t.deepEqual(judgeWithPolicy(facts(), policy), []);
});

test("a rule not listed does not run; a disabled one neither", (t) => {
  const disposable = facts({
    refereeEmail: {
      canonical: "x@mailinator.com",
      domain: "mailinator.com",
      disposable: true,
      masked: false,
    },
  });
  const off = compilePolicy(
    completed({ rules: [{ type: "disposable_email", enabled: false }] }),
    defaultFraudPolicy,
    null,
  );
  t.deepEqual(judgeWithPolicy(disposable, off), []);
  const on = compilePolicy(
    completed({ rules: [{ type: "disposable_email" }] }),
    defaultFraudPolicy,
    null,
  );
  t.like(judgeWithPolicy(disposable, on), [{ type: "disposable_email", action: "flag" }]);
  const unlisted = compilePolicy(completed({ rules: [] }), defaultFraudPolicy, null);
  t.deepEqual(judgeWithPolicy(disposable, unlisted), []);
});

test("the allow list ends evaluation; the deny list rejects; either party, emails by mailbox, domains as parents, networks by their hashes", (t) => {
  const everything = Object.keys(ruleCatalogue).map((type) => ({ type }));
  const withList = (list: FraudPolicyDoc["allow"], side: "allow" | "deny") =>
    compilePolicy(completed({ rules: everything, [side]: list }), defaultFraudPolicy, key);
  const network = {
    addressHash: "",
    networkHash: "",
    userAgentFamily: null,
    deviceId: null,
    source: "backend" as const,
    seenAt: new Date(0),
  };
  const hashes = networkHashes("203.0.113.9", key);
  if (!hashes) throw new Error("an address has hashes");
  const onNetwork = facts({
    refereeNetwork: { ...network, ...hashes },
    referrerNetwork: { ...network, ...hashes },
  });
  // The same network would hold the reward: the allow list trusts it instead.
  const allowed = judgeWithPolicy(onNetwork, withList({ networks: ["203.0.113.0/24"] }, "allow"));
  t.like(allowed, [{ type: "allow_list", action: "note", evidence: { party: "referrer" } }]);
  t.is(allowed.length, 1);
  t.like(judgeWithPolicy(onNetwork, withList({ networks: ["203.0.113.9"] }, "deny")), [
    { type: "deny_list", action: "reject", severity: "high" },
  ]);
  t.deepEqual(
    judgeWithPolicy(onNetwork, withList({ networks: ["203.0.113.10"] }, "deny")).map((v) => v.type),
    ["same_network_as_referrer"],
    "another address of the network is not a listed address",
  );
  const gmail = facts({
    refereeEmail: {
      canonical: "janedoe@gmail.com",
      domain: "gmail.com",
      disposable: false,
      masked: false,
    },
  });
  t.like(judgeWithPolicy(gmail, withList({ emails: ["Jane.Doe+promo@googlemail.com"] }, "deny")), [
    { type: "deny_list", evidence: { party: "referee", email: "janedoe@gmail.com" } },
  ]);
  const sub = facts({
    refereeEmail: {
      canonical: "a@mail.corp.example",
      domain: "mail.corp.example",
      disposable: false,
      masked: false,
    },
  });
  t.like(judgeWithPolicy(sub, withList({ domains: ["corp.example"] }, "allow")), [
    { type: "allow_list", evidence: { domain: "corp.example" } },
  ]);
  t.deepEqual(judgeWithPolicy(sub, withList({ domains: ["orp.example"] }, "allow")), []);
  t.like(judgeWithPolicy(facts(), withList({ customerIds: [referrerId] }, "deny")), [
    { type: "deny_list", evidence: { party: "referrer", customerId: referrerId } },
  ]);
  // Without a network key (network facts off), network entries match nothing.
  const keyless = compilePolicy(
    completed({ rules: [], deny: { networks: ["203.0.113.9"] } }),
    defaultFraudPolicy,
    null,
  );
  t.deepEqual(judgeWithPolicy(onNetwork, keyless), []);
});

test("shadow verdicts carry the action they would take and act on nothing", (t) => {
  const policy = compilePolicy(
    completed({ mode: "shadow", rules: [{ type: "self_referral", action: "reject" }] }),
    defaultFraudPolicy,
    null,
  );
  const verdicts = judgeWithPolicy({ ...facts(), refereeId: referrerId }, policy);
  t.like(verdicts, [{ type: "self_referral", action: "reject", shadow: true }]);
  t.is(strongestAction(verdicts), null);
  // Enforced, the same verdict would reject.
  t.is(strongestAction(verdicts.map((verdict) => ({ ...verdict, shadow: false }))), "reject");
});

test("the strongest action wins: reject, flag, hold_reward, note; a verdict without one flagged", (t) => {
  const verdict = (action?: "note" | "flag" | "hold_reward" | "reject") => ({
    type: "similar_name" as const,
    message: "",
    ...(action ? { action } : {}),
  });
  t.is(strongestAction([]), null);
  t.is(strongestAction([verdict("note")]), "note");
  t.is(strongestAction([verdict("note"), verdict("hold_reward")]), "hold_reward");
  t.is(strongestAction([verdict("hold_reward"), verdict("flag")]), "flag");
  t.is(strongestAction([verdict("reject"), verdict("flag")]), "reject");
  t.is(strongestAction([verdict()]), "flag");
});
