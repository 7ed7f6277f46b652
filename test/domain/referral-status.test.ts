import test from "ava";
import {
  canTransition,
  isFinal,
  type ReferralStatusName,
} from "../../src/domain/referral-status.js";

const statuses: ReferralStatusName[] = ["pending", "flagged", "accepted", "rejected"];

// The whole table, so any added or removed transition fails here.
const allowed = new Set([
  "pending->accepted",
  "pending->rejected",
  "pending->flagged",
  "flagged->accepted",
  "flagged->rejected",
  "flagged->pending",
]);

for (const from of statuses) {
  for (const to of statuses) {
    const legal = allowed.has(`${from}->${to}`);
    test(`${from} -> ${to} is ${legal ? "allowed" : "refused"}`, (t) => {
      t.is(canTransition(from, to), legal);
    });
  }
}

test("accepted and rejected are final; pending and flagged are not", (t) => {
  t.deepEqual(
    statuses.filter((status) => isFinal(status)),
    ["accepted", "rejected"],
  );
});
