import test from "ava";
import {
  defaultFraudPolicy,
  describeDuration,
  type ReferralCandidate,
  suspectedFrauds,
} from "../../src/domain/fraud-rules.js";

const at = new Date("2026-03-10T12:00:00.000Z");
const hour = 3_600_000;
const day = 24 * hour;

/** A referral no rule objects to; each test changes one fact. */
function clean(overrides: Partial<ReferralCandidate> = {}): ReferralCandidate {
  return {
    referrer: { id: "cus_a", email: "alice@example.com" },
    referee: { id: "cus_b", email: "bob@example.com", identifiedAt: new Date(at.getTime() - hour) },
    at,
    referrerRecentReferrals: 0,
    refereeEmailAlreadyReferred: false,
    ...overrides,
  };
}

const types = (candidate: ReferralCandidate, policy = defaultFraudPolicy) =>
  suspectedFrauds(candidate, policy).map((fraud) => fraud.type);

test("a clean referral fires no rule", (t) => {
  t.deepEqual(suspectedFrauds(clean()), []);
});

test("self_referral: the referee is the referrer", (t) => {
  const frauds = suspectedFrauds(
    clean({ referee: { id: "cus_a", email: "alice@example.com", identifiedAt: at } }),
  );
  t.deepEqual(frauds, [{ type: "self_referral", message: "the referee is the referrer" }]);
});

test("self_referral: the same mailbox after normalization", (t) => {
  const frauds = suspectedFrauds(
    clean({
      referrer: { id: "cus_a", email: "Jane.Doe@gmail.com" },
      referee: { id: "cus_b", email: " janedoe+friend@GoogleMail.com", identifiedAt: at },
    }),
  );
  t.deepEqual(frauds, [
    { type: "self_referral", message: "the referee has the referrer's email address" },
  ]);
});

test("self_referral: no email on either side is not a match", (t) => {
  t.deepEqual(
    types(
      clean({
        referrer: { id: "cus_a", email: null },
        referee: { id: "cus_b", email: null, identifiedAt: at },
      }),
    ),
    [],
  );
});

test("existing_customer: identified longer ago than the limit", (t) => {
  const referee = (age: number) => ({
    id: "cus_b",
    email: null,
    identifiedAt: new Date(at.getTime() - age),
  });
  t.deepEqual(types(clean({ referee: referee(7 * day) })), [], "exactly the limit is fine");
  const frauds = suspectedFrauds(clean({ referee: referee(12 * day) }));
  t.deepEqual(frauds, [
    {
      type: "existing_customer",
      message: "the referee was identified 12 days before the referral (limit 7 days)",
    },
  ]);
  t.deepEqual(
    suspectedFrauds(clean({ referee: referee(12 * day) }), {
      ...defaultFraudPolicy,
      maxRefereeAgeMs: 30 * day,
    }),
    [],
    "the limit is configurable",
  );
});

test("velocity: the referrer already reached the hourly limit", (t) => {
  t.deepEqual(types(clean({ referrerRecentReferrals: 19 })), []);
  t.deepEqual(suspectedFrauds(clean({ referrerRecentReferrals: 20 })), [
    {
      type: "velocity",
      message: "the referrer already has at least 20 referrals in the last hour (its limit)",
    },
  ]);
  t.deepEqual(
    types(clean({ referrerRecentReferrals: 2 }), { ...defaultFraudPolicy, velocityLimit: 2 }),
    ["velocity"],
  );
});

test("duplicate_referee_email: another customer with the mailbox was referred", (t) => {
  t.deepEqual(suspectedFrauds(clean({ refereeEmailAlreadyReferred: true })), [
    {
      type: "duplicate_referee_email",
      message: "another customer with the referee's email address was already referred",
    },
  ]);
});

test("every rule that fires is reported, in a fixed order", (t) => {
  t.deepEqual(
    types(
      clean({
        referee: { id: "cus_a", email: null, identifiedAt: new Date(at.getTime() - 30 * day) },
        referrerRecentReferrals: 50,
        refereeEmailAlreadyReferred: true,
      }),
    ),
    ["self_referral", "existing_customer", "velocity", "duplicate_referee_email"],
  );
});

test("durations read as the largest whole unit", (t) => {
  t.is(describeDuration(day), "1 day");
  t.is(describeDuration(3 * hour + 5), "3 hours");
  t.is(describeDuration(90_000), "1 minute");
  t.is(describeDuration(1500), "1 second");
  t.is(describeDuration(10), "10 ms");
});
