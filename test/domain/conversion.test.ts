import test from "ava";
import fc from "fast-check";
import {
  conversionByCheckpoint,
  type PublicCheckpointsName,
  publicCheckpointsOf,
} from "../../src/domain/conversion.js";
import type { ReferralStatusName } from "../../src/domain/referral-status.js";
import { newGrant } from "../../src/domain/reward-plan.js";

const modes: readonly PublicCheckpointsName[] = ["hold", "convert", "ignore"];

test("a campaign without the setting holds", (t) => {
  t.is(publicCheckpointsOf({}), "hold");
  t.is(publicCheckpointsOf({ publicCheckpoints: null }), "hold");
  t.is(publicCheckpointsOf({ publicCheckpoints: "ignore" }), "ignore");
});

test("a trusted checkpoint converts a pending referral, whatever the campaign says", (t) => {
  for (const mode of modes) {
    t.is(conversionByCheckpoint({ status: "pending" }, true, mode), "convert", mode);
  }
});

test("an unverified checkpoint converts as the campaign says", (t) => {
  t.is(conversionByCheckpoint({ status: "pending" }, false, "hold"), "convert and hold");
  t.is(conversionByCheckpoint({ status: "pending" }, false, "convert"), "convert");
  t.is(conversionByCheckpoint({ status: "pending" }, false, "ignore"), "nothing");
});

test("only a trusted checkpoint confirms, and only an accepted referral awaiting it", (t) => {
  const awaiting = { status: "accepted", awaitsConfirmation: true } as const;
  for (const mode of modes) {
    t.is(conversionByCheckpoint(awaiting, true, mode), "confirm", mode);
    t.is(conversionByCheckpoint(awaiting, false, mode), "nothing", mode);
    t.is(conversionByCheckpoint({ status: "accepted" }, true, mode), "nothing", mode);
  }
});

test("no checkpoint ever converts or confirms a flagged or final referral", (t) => {
  fc.assert(
    fc.property(
      fc.constantFrom<ReferralStatusName>("flagged", "rejected", "reversed"),
      fc.boolean(),
      fc.boolean(),
      fc.constantFrom(...modes),
      (status, awaiting, trusted, mode) =>
        conversionByCheckpoint(
          awaiting ? { status, awaitsConfirmation: true } : { status },
          trusted,
          mode,
        ) === "nothing",
    ),
  );
  t.pass();
});

test("a grant awaiting confirmation is pending with its reason, and no approval is scheduled", (t) => {
  const at = new Date("2026-11-29T10:00:00Z");
  for (const holdPeriod of [null, "7d"]) {
    const grant = newGrant({
      id: "grt_1",
      tenant: { organizationId: "org_1", applicationId: "app_1" },
      environment: "production",
      customerId: "cus_1",
      kind: "earned",
      campaignId: "cmp_1",
      referralId: "ref_1",
      reward: {
        id: "rwd_1",
        type: "payout",
        party: "referrer",
        method: "paypal",
        currency: "usd",
        payoutAmount: 20,
        discountAmount: null,
        discountPercentage: null,
        discountDurationInMonth: null,
        limit: null,
        limitUnit: null,
        limitInterval: null,
        disabled: false,
        approval: "automatic",
        holdPeriod,
        expiresAfter: null,
      },
      value: {
        type: "payout",
        method: "paypal",
        currency: "usd",
        amount: 20,
        discountPercentage: null,
        discountDurationInMonth: null,
      },
      amountMinor: 2000,
      limitWindow: null,
      ignoresLimit: false,
      at,
      cause: "earned",
      actorId: "chk_1",
      reason: "unverified_conversion",
      awaitingConfirmation: true,
    });
    t.like(grant, {
      status: "pending",
      statusReason: "unverified_conversion",
      awaitsConfirmation: true,
    });
    t.is(grant.approvalDueAt, undefined, `hold ${holdPeriod}`);
    t.is(grant.expiresAt, null);
  }
});
