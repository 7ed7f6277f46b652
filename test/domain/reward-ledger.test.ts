import test from "ava";
import { limitWindowOf } from "../../src/domain/campaign-time.js";
import {
  canReviewGrant,
  clawbackGrantId,
  earnedGrantId,
  holdsRoom,
  parseDuration,
  type RewardGrantStatusName,
  reversalOf,
  roomFor,
} from "../../src/domain/reward-ledger.js";

const statuses: RewardGrantStatusName[] = [
  "pending",
  "approved",
  "fulfilled",
  "rejected",
  "voided",
  "expired",
  "capped",
];

// The whole table, so any added or removed move fails here.
const grantMoves = new Set([
  "pending->approved",
  "pending->rejected",
  "pending->voided",
  "approved->fulfilled",
  "approved->rejected",
  "approved->voided",
]);
const clawbackMoves = new Set(["pending->fulfilled", "pending->rejected"]);

for (const from of statuses) {
  for (const to of statuses) {
    test(`a reviewer's ${from} -> ${to}: grant ${grantMoves.has(`${from}->${to}`) ? "yes" : "no"}, clawback ${clawbackMoves.has(`${from}->${to}`) ? "yes" : "no"}`, (t) => {
      t.is(canReviewGrant("earned", from, to), grantMoves.has(`${from}->${to}`));
      t.is(canReviewGrant("manual", from, to), grantMoves.has(`${from}->${to}`));
      t.is(canReviewGrant("clawback", from, to), clawbackMoves.has(`${from}->${to}`));
    });
  }
}

test("pending, approved and fulfilled grants hold room; the rest free it", (t) => {
  t.deepEqual(
    statuses.filter((status) => holdsRoom(status)),
    ["pending", "approved", "fulfilled"],
  );
});

test("a reversal voids unpaid grants and claws back paid ones", (t) => {
  t.deepEqual(
    statuses.map((status) => [status, reversalOf(status)]),
    [
      ["pending", "void"],
      ["approved", "void"],
      ["fulfilled", "claw back"],
      ["rejected", "nothing"],
      ["voided", "nothing"],
      ["expired", "nothing"],
      ["capped", "nothing"],
    ],
  );
});

test("a count limit lets one grant through while there is room", (t) => {
  t.is(roomFor("rewards", 3, 0, 2000), 1);
  t.is(roomFor("rewards", 3, 2, 2000), 1);
  t.is(roomFor("rewards", 3, 3, 2000), 0);
  t.is(roomFor("rewards", 0, 0, 2000), 0);
});

test("an amount limit lets through what is left, up to the request", (t) => {
  t.is(roomFor("amount", 10_000, 0, 2000), 2000);
  t.is(roomFor("amount", 10_000, 9000, 2000), 1000, "clamped");
  t.is(roomFor("amount", 10_000, 10_000, 2000), 0, "capped");
  t.is(roomFor("amount", 10_000, 12_000, 2000), 0, "a lowered limit leaves none");
});

test("windows are calendar days, ISO weeks, months and years in the campaign's time zone", (t) => {
  const at = new Date("2026-11-30T15:30:00Z");
  t.is(limitWindowOf(at, "day", "UTC"), "2026-11-30");
  // Tokyo is 9 hours ahead: half past midnight on 1 December there.
  t.is(limitWindowOf(at, "day", "Asia/Tokyo"), "2026-12-01");
  t.is(limitWindowOf(at, "month", "UTC"), "2026-11");
  t.is(limitWindowOf(at, "month", "Asia/Tokyo"), "2026-12");
  t.is(limitWindowOf(at, "year", "UTC"), "2026");
  t.is(limitWindowOf(new Date("2026-12-31T23:00:00Z"), "year", "Europe/Paris"), "2027");
  // Los Angeles is behind: still the 30th of November.
  t.is(limitWindowOf(new Date("2026-12-01T05:00:00Z"), "day", "America/Los_Angeles"), "2026-11-30");
  // Kathmandu's +5:45.
  t.is(limitWindowOf(new Date("2026-11-30T18:14:00Z"), "day", "Asia/Kathmandu"), "2026-11-30");
  t.is(limitWindowOf(new Date("2026-11-30T18:15:00Z"), "day", "Asia/Kathmandu"), "2026-12-01");
  t.is(limitWindowOf(at, "lifetime", "UTC"), "lifetime");
});

test("ISO weeks start on Monday and belong to the year of their Thursday", (t) => {
  const week = (iso: string, zone = "UTC") => limitWindowOf(new Date(iso), "week", zone);
  t.is(week("2026-11-23T00:00:00Z"), "2026-W48", "Monday");
  t.is(week("2026-11-29T23:59:59Z"), "2026-W48", "Sunday");
  t.is(week("2026-11-30T00:00:00Z"), "2026-W49", "the next Monday");
  // 2026 ends on a Thursday: its last week is 53 and holds 1-3 January 2027.
  t.is(week("2026-12-31T12:00:00Z"), "2026-W53");
  t.is(week("2027-01-03T12:00:00Z"), "2026-W53");
  t.is(week("2027-01-04T12:00:00Z"), "2027-W01");
  // 2024-12-30 is a Monday whose Thursday is in 2025.
  t.is(week("2024-12-30T12:00:00Z"), "2025-W01");
  // Sunday night in UTC is Monday morning in Sydney.
  t.is(week("2026-11-29T20:00:00Z"), "2026-W48");
  t.is(week("2026-11-29T20:00:00Z", "Australia/Sydney"), "2026-W49");
});

test("durations are a whole number and a unit, up to ten years", (t) => {
  t.is(parseDuration("30d"), 30 * 86_400_000);
  t.is(parseDuration("12h"), 12 * 3_600_000);
  t.is(parseDuration("90m"), 90 * 60_000);
  t.is(parseDuration("45s"), 45_000);
  t.is(parseDuration("2w"), 14 * 86_400_000);
  t.is(parseDuration("0d"), 0);
  t.is(parseDuration("3650d"), 3650 * 86_400_000);
  for (const refused of ["3651d", "30", "d", "1.5d", "-1d", "30 d", "30D", "1mo", ""]) {
    t.is(parseDuration(refused), undefined, refused);
  }
});

test("earned and clawback ids are derived: the same inputs, the same id", (t) => {
  const at = new Date("2026-11-25T10:00:00Z");
  const id = earnedGrantId("ref_1", "rwd_1", "referrer", at);
  t.regex(id, /^grt_[0-9a-z]{25}$/);
  t.is(earnedGrantId("ref_1", "rwd_1", "referrer", at), id);
  t.not(earnedGrantId("ref_1", "rwd_1", "referee", at), id);
  t.not(earnedGrantId("ref_2", "rwd_1", "referrer", at), id);
  t.is(clawbackGrantId(id, at), clawbackGrantId(id, at));
  t.not(clawbackGrantId(id, at), id);
});
