import test from "ava";
import { decideAttribution, holdsRewards, statusFromRules } from "../../src/domain/attribution.js";
import { convertsOnTrigger, rewardTriggerOf } from "../../src/domain/conversion.js";

test("no referral yet: create", (t) => {
  t.deepEqual(decideAttribution(null, "cus_a"), { kind: "create" });
});

test("the same referrer again: unchanged, in every status", (t) => {
  for (const status of ["pending", "flagged", "accepted", "rejected", "reversed"] as const) {
    t.deepEqual(decideAttribution({ status, referrerId: "cus_a" }, "cus_a"), {
      kind: "unchanged",
    });
  }
});

test("another referrer while pending or flagged: re-attribute", (t) => {
  for (const status of ["pending", "flagged"] as const) {
    t.deepEqual(decideAttribution({ status, referrerId: "cus_a" }, "cus_b"), {
      kind: "reattribute",
    });
  }
});

test("another referrer from a caller who may not move it: kept as it is while undecided, refused once final", (t) => {
  for (const status of ["pending", "flagged"] as const) {
    t.deepEqual(decideAttribution({ status, referrerId: "cus_a" }, "cus_b", false), {
      kind: "kept",
    });
  }
  t.deepEqual(decideAttribution({ status: "accepted", referrerId: "cus_a" }, "cus_b", false), {
    kind: "refuse",
    reason: "referral already accepted",
  });
  t.deepEqual(decideAttribution({ status: "pending", referrerId: "cus_a" }, "cus_a", false), {
    kind: "unchanged",
  });
});

test("another referrer once final: refused, saying why", (t) => {
  t.deepEqual(decideAttribution({ status: "accepted", referrerId: "cus_a" }, "cus_b"), {
    kind: "refuse",
    reason: "referral already accepted",
  });
  t.deepEqual(decideAttribution({ status: "rejected", referrerId: "cus_a" }, "cus_b"), {
    kind: "refuse",
    reason: "referral already rejected",
  });
  t.deepEqual(decideAttribution({ status: "reversed", referrerId: "cus_a" }, "cus_b"), {
    kind: "refuse",
    reason: "referral already reversed",
  });
});

test("status from the rules: flagged when one fires, else pending", (t) => {
  t.is(statusFromRules([]), "pending");
  t.is(statusFromRules([{ type: "velocity", message: "too fast" }]), "flagged");
});

test("re-attribution clears a flag the rules set, but not a reviewer's", (t) => {
  t.is(statusFromRules([], { status: "flagged", lastChangeCause: "created" }), "pending");
  t.is(statusFromRules([], { status: "flagged", lastChangeCause: "reattributed" }), "pending");
  t.is(statusFromRules([], { status: "flagged", lastChangeCause: "review" }), "flagged");
  t.is(statusFromRules([], { status: "pending", lastChangeCause: "review" }), "pending");
});

test("reward trigger: manual wins over proposed; none when neither is set", (t) => {
  t.is(rewardTriggerOf({ manualRewardTrigger: "paid", proposedRewardTrigger: "purchase" }), "paid");
  t.is(
    rewardTriggerOf({ manualRewardTrigger: null, proposedRewardTrigger: "purchase" }),
    "purchase",
  );
  t.is(rewardTriggerOf({}), null);
});

test("the trigger converts pending referrals only", (t) => {
  t.true(convertsOnTrigger("pending"));
  t.false(convertsOnTrigger("flagged"));
  t.false(convertsOnTrigger("accepted"));
  t.false(convertsOnTrigger("rejected"));
});

test("the strongest acting verdict sets the status: reject, then flag; notes and held rewards stay pending", (t) => {
  const verdict = (action?: "note" | "flag" | "hold_reward" | "reject", shadow = false) => ({
    type: "similar_name" as const,
    message: "alike",
    ...(action ? { action } : {}),
    ...(shadow ? { shadow } : {}),
  });
  t.is(statusFromRules([verdict("note")]), "pending");
  t.is(statusFromRules([verdict("hold_reward")]), "pending");
  t.true(holdsRewards([verdict("hold_reward")]));
  t.false(holdsRewards([verdict("hold_reward", true)]), "a shadow verdict holds nothing");
  t.is(statusFromRules([verdict("note"), verdict("flag")]), "flagged");
  t.is(statusFromRules([verdict("flag"), verdict("reject")]), "rejected");
  t.is(statusFromRules([verdict("reject", true), verdict("flag", true)]), "pending", "shadow");
  t.is(statusFromRules([verdict()]), "flagged", "a verdict stored before actions flagged");
});
