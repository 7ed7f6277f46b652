import test from "ava";
import {
  canTransition,
  isUndecided,
  type ReferralStatusName,
} from "../../src/domain/referral-status.js";

const statuses: ReferralStatusName[] = ["pending", "flagged", "accepted", "rejected", "reversed"];

// The whole table, so any added or removed transition fails here.
const allowed = new Set([
  "pending->accepted",
  "pending->rejected",
  "pending->flagged",
  "flagged->accepted",
  "flagged->rejected",
  "flagged->pending",
  "accepted->reversed",
]);

for (const from of statuses) {
  for (const to of statuses) {
    const legal = allowed.has(`${from}->${to}`);
    test(`${from} -> ${to} is ${legal ? "allowed" : "refused"}`, (t) => {
      t.is(canTransition(from, to), legal);
    });
  }
}

test("pending and flagged are undecided; accepted, rejected and reversed are not", (t) => {
  t.deepEqual(
    statuses.filter((status) => isUndecided(status)),
    ["pending", "flagged"],
  );
});
