import type { ExecutionContext } from "ava";
import type { PlannedGrant } from "../../src/domain/reward-grant.js";
import {
  limitOf,
  newGrant,
  type RewardTerms,
  valueOfReward,
} from "../../src/domain/reward-plan.js";
import { makePlannedGrants, moveGrant } from "../../src/services/reward-ledger.js";
import type { Store } from "../../src/store/store.js";
import { storeTest as declareStoreTest, engineNames } from "../helpers/engines.js";

/**
 * The reward ledger's storage contract, on the embedded engine always and on
 * MongoDB when MONGODB_URI is set: limits exact under concurrency, grants
 * made once whoever makes them, one of concurrent moves applied, room
 * given back once.
 */

const tenant = { organizationId: "org_1", applicationId: "app_1" };
const november = new Date("2026-11-10T12:00:00Z");

function reward(fields: Partial<RewardTerms> = {}): RewardTerms {
  return {
    id: "rwd_monthly",
    type: "payout",
    party: "referrer",
    method: "paypal",
    currency: "usd",
    payoutAmount: 20,
    discountAmount: null,
    discountPercentage: null,
    discountDurationInMonth: null,
    limit: 3,
    limitUnit: "rewards",
    limitInterval: "month",
    disabled: false,
    approval: "automatic",
    holdPeriod: null,
    expiresAfter: null,
    ...fields,
  };
}

/** The grant one conversion plans for the referrer, as an acceptance writes it. */
function planned(index: number, terms: RewardTerms, at = november): PlannedGrant {
  const limit = limitOf(terms, "cus_referrer", at, "UTC");
  const grant = newGrant({
    id: `grt_${String(index).padStart(4, "0")}`,
    tenant,
    environment: "production",
    customerId: "cus_referrer",
    kind: "earned",
    campaignId: "cmp_1",
    referralId: `ref_${index}`,
    reward: terms,
    ...valueOfReward(terms),
    limitWindow: limit?.window ?? null,
    ignoresLimit: false,
    at,
    cause: "earned",
    actorId: `chk_${index}`,
    reason: null,
  });
  return { grant, limit };
}

const statusCounts = (statuses: readonly string[]) =>
  statuses.reduce<Record<string, number>>((counts, status) => {
    counts[status] = (counts[status] ?? 0) + 1;
    return counts;
  }, {});

for (const engine of engineNames) {
  const storeTest = (title: string, body: (t: ExecutionContext, store: Store) => Promise<void>) =>
    declareStoreTest(engine, title, body);

  storeTest(
    "50 conversions at once for one referrer limited to 3 a month: exactly 3 granted, 47 capped",
    async (t, store) => {
      const ledger = store.forTenant(tenant);
      const made = await Promise.all(
        Array.from({ length: 50 }, (_, i) =>
          makePlannedGrants(ledger, null, [planned(i, reward())], november),
        ),
      );
      t.deepEqual(statusCounts(made.flat().map((grant) => grant.status)), {
        approved: 3,
        capped: 47,
      });
      const stored = await store.system.rewardGrants.find({ customerId: "cus_referrer" }).toArray();
      t.deepEqual(statusCounts(stored.map((grant) => grant.status)), { approved: 3, capped: 47 });
      for (const grant of stored.filter((doc) => doc.status === "capped")) {
        t.like(grant, { statusReason: "limit_reached", amountMinor: 0, requestedAmount: 20 });
      }
      // The three hold the limit's three slots.
      t.deepEqual(
        stored
          .filter((doc) => doc.status === "approved")
          .map((doc) => doc.limitSlot?.split("#")[1])
          .sort(),
        ["1", "2", "3"],
      );
      // A new month is a new window.
      const december = new Date("2026-12-01T00:00:00Z");
      const [next] = await makePlannedGrants(
        ledger,
        null,
        [planned(99, reward(), december)],
        december,
      );
      t.like(next, { status: "approved", limitWindow: "2026-12" });
    },
  );

  storeTest(
    "an amount limit clamps and caps exactly under concurrency, and a voided grant frees its room",
    async (t, store) => {
      const ledger = store.forTenant(tenant);
      // $20 grants under $50 a month: two whole, one clamped to $10, the rest capped.
      const terms = reward({ limit: 50, limitUnit: "amount" });
      const made = (
        await Promise.all(
          Array.from({ length: 20 }, (_, i) =>
            makePlannedGrants(ledger, null, [planned(i, terms)], november),
          ),
        )
      ).flat();
      const amounts = made.map((grant) => grant.amountMinor).sort((a, b) => (b ?? 0) - (a ?? 0));
      t.deepEqual(amounts.slice(0, 4), [2000, 2000, 1000, 0]);
      t.is(
        made.reduce((sum, grant) => sum + (grant.amountMinor ?? 0), 0),
        5000,
      );
      const clamped = made.find((grant) => grant.amountMinor === 1000);
      t.like(clamped, { status: "approved", requestedAmount: 20, value: { amount: 10 } });

      const whole = made.find((grant) => grant.amountMinor === 2000);
      if (!whole) throw new Error("no whole grant");
      const voided = await moveGrant(ledger, whole, "voided", {
        cause: "review",
        actorId: "key_1",
        reason: "refund",
        at: november,
      });
      t.is(voided?.status, "voided");
      const stored = await store.system.rewardGrants.findOne({ _id: whole._id });
      t.is(stored?.releasePending, undefined, "the room was given back and the flag cleared");
      const [again] = await makePlannedGrants(ledger, null, [planned(100, terms)], november);
      t.like(again, { status: "approved", amountMinor: 2000 });
      const [full] = await makePlannedGrants(ledger, null, [planned(101, terms)], november);
      t.is(full?.status, "capped");
    },
  );

  storeTest(
    "a grant made twice at once is stored once and takes its room once",
    async (t, store) => {
      const ledger = store.forTenant(tenant);
      const plan = planned(1, reward());
      const made = await Promise.all(
        Array.from({ length: 10 }, () => makePlannedGrants(ledger, null, [plan], november)),
      );
      t.is(new Set(made.flat().map((grant) => grant._id)).size, 1);
      t.is(await store.system.rewardGrants.countDocuments({}), 1);
      t.is(made.flat()[0]?.limitSlot?.endsWith("#1"), true);
      // Under an amount limit the grant takes its room once.
      const amounts = planned(2, reward({ limit: 100, limitUnit: "amount" }));
      await Promise.all(
        Array.from({ length: 10 }, () => makePlannedGrants(ledger, null, [amounts], november)),
      );
      const [allowance] = await store.system.rewardAllowances.find({}).toArray();
      t.is(allowance?.used, 2000);
      t.deepEqual(Object.keys(allowance?.holds ?? {}), [amounts.grant._id]);
    },
  );

  storeTest(
    "of concurrent moves of one grant exactly one applies, and room is given back once",
    async (t, store) => {
      const ledger = store.forTenant(tenant);
      const [grant] = await makePlannedGrants(ledger, null, [planned(1, reward())], november);
      if (!grant) throw new Error("no grant");
      const moves = await Promise.all(
        (["voided", "rejected", "fulfilled", "voided", "rejected"] as const).map((to) =>
          moveGrant(ledger, grant, to, {
            cause: "review",
            actorId: "key_1",
            reason: null,
            at: november,
            fulfillment: { reference: "x", code: null, note: null },
          }),
        ),
      );
      t.is(moves.filter((moved) => moved !== null).length, 1);
      const stored = await store.system.rewardGrants.findOne({ _id: grant._id });
      t.is(stored?.statusHistory.length, 2);
      // A fulfilled grant keeps its slot; a voided or rejected one gave it back.
      t.is(stored?.limitSlot !== undefined, stored?.status === "fulfilled");
    },
  );
}
