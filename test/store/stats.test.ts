import type { ExecutionContext } from "ava";
import { newReferral, statusChange } from "../../src/domain/referral-transitions.js";
import { statsScope } from "../../src/domain/stats.js";
import { bucketRunsOf } from "../../src/domain/stats-time.js";
import type { ReferralDoc } from "../../src/store/documents.js";
import {
  insertReferral,
  reattributeReferral,
  transitionReferral,
} from "../../src/store/referrals.js";
import { differencesOf, recountStats } from "../../src/store/stats-recount.js";
import type { Store } from "../../src/store/store.js";
import { storeTest as declareStoreTest, engineNames } from "../helpers/engines.js";
import { plainEvidence } from "../helpers/evidence.js";

/**
 * The program's counters on both engines: moved in the same write as the
 * record (a write that fails or loses a race moves nothing), exact under
 * concurrent conversions, and equal to a recount of the records.
 */

const tenant = { organizationId: "org_1", applicationId: "app_stats" };
const created = new Date("2026-05-04T10:00:00.000Z");
const accepted = new Date("2026-05-05T12:00:00.000Z");
const day = { from: Date.parse("2026-05-01T00:00:00Z"), to: Date.parse("2026-06-01T00:00:00Z") };

const change = <From extends ReferralDoc["status"] | null>(
  fromStatus: From,
  toStatus: ReferralDoc["status"],
  changedAt: Date,
) => statusChange(fromStatus, toStatus, "review", "key_1", changedAt, undefined);

async function referral(store: Store, index: number, referrerId: string): Promise<ReferralDoc> {
  const doc = newReferral(
    tenant,
    {
      environment: "production",
      campaignId: "cmp_1",
      referrerId,
      refereeId: `cus_referee_${index}`,
    },
    {
      status: "pending",
      suspectedFrauds: [],
      evidence: plainEvidence(),
      risk: { level: "low", score: 0 },
    },
    change(null, "pending", created),
  );
  const { doc: stored } = await insertReferral(store.system, tenant, doc, []);
  return stored;
}

async function totalsOf(store: Store, campaignId: string | null = "cmp_1") {
  const scope = statsScope(tenant.applicationId, "production", campaignId);
  const [sums] = await store.stats.sums(scope, [bucketRunsOf(day.from, day.to)]);
  const [active] = await store.stats.activeReferrers(scope, [[day.from, day.to]]);
  return { sums: sums ?? new Map<string, number>(), active };
}

async function expectRecountAgrees(t: ExecutionContext, store: Store): Promise<void> {
  const { scopes, wanted } = await recountStats(store.system, tenant.applicationId);
  const differences = differencesOf(await store.stats.snapshot(scopes), wanted);
  t.deepEqual(differences, [], "the kept counters equal a recount of the records");
}

for (const engine of engineNames) {
  const storeTest = (title: string, body: (t: ExecutionContext, store: Store) => Promise<void>) =>
    declareStoreTest(engine, title, body);

  storeTest("concurrent conversions of the same referrals count each once", async (t, store) => {
    const referrals = await Promise.all(
      Array.from({ length: 40 }, (_, index) => referral(store, index, `cus_referrer_${index % 4}`)),
    );
    // Each referral accepted by three racing writers: one wins, the others find it moved.
    const outcomes = await Promise.all(
      referrals.flatMap((current) =>
        Array.from({ length: 3 }, () =>
          transitionReferral(
            store.system,
            tenant,
            current,
            change("pending", "accepted", accepted),
            [],
          ),
        ),
      ),
    );
    t.is(outcomes.filter(Boolean).length, 40);
    const { sums, active } = await totalsOf(store);
    t.is(sums.get("created"), 40);
    t.is(sums.get("reached:pending"), 40);
    t.is(sums.get("reached:accepted"), 40);
    t.is(sums.get("cohort:accepted"), 40);
    t.is(active, 4);
    const leaders = await store.stats.leaders(
      statsScope(tenant.applicationId, "production", "cmp_1"),
      10,
      0,
    );
    t.deepEqual(
      leaders.map((row) => row.accepted),
      [10, 10, 10, 10],
    );
    t.deepEqual(
      await store.stats.referralsMade(statsScope(tenant.applicationId, "production", "cmp_1"), [
        "cus_referrer_0",
      ]),
      [10],
    );
    await expectRecountAgrees(t, store);
  });

  storeTest("a write that fails or loses its race moves nothing", async (t, store) => {
    const first = await referral(store, 1, "cus_a");
    // The same referee again: the unique index refuses the insert, which returns the winner.
    const again = await referral(store, 1, "cus_a");
    t.is(again._id, first._id);
    const stale = await transitionReferral(
      store.system,
      tenant,
      { ...first, status: "flagged" },
      change("flagged", "accepted", accepted),
      [],
    );
    t.is(stale, null);
    const { sums } = await totalsOf(store);
    t.is(sums.get("created"), 1);
    t.is(sums.get("reached:accepted"), undefined);
    await expectRecountAgrees(t, store);
  });

  storeTest("re-attribution moves the referral to its new referrer's order", async (t, store) => {
    const moved = await referral(store, 1, "cus_a");
    await referral(store, 2, "cus_a");
    const reattributed = await reattributeReferral(
      store.system,
      tenant,
      moved,
      "cus_b",
      {
        status: "pending",
        suspectedFrauds: [],
        evidence: plainEvidence(),
        risk: { level: "low", score: 0 },
      },
      change("pending", "pending", accepted),
      [],
    );
    t.truthy(reattributed);
    const scope = statsScope(tenant.applicationId, "production", "cmp_1");
    t.deepEqual(await store.stats.referralsMade(scope, ["cus_a", "cus_b"]), [1, 1]);
    const { active } = await totalsOf(store);
    t.is(active, 2);
    await expectRecountAgrees(t, store);
  });

  storeTest(
    "a reversal takes the acceptance back from the cohort and the leaderboard",
    async (t, store) => {
      const current = await referral(store, 1, "cus_a");
      const acceptedDoc = await transitionReferral(
        store.system,
        tenant,
        current,
        change("pending", "accepted", accepted),
        [],
      );
      t.truthy(acceptedDoc);
      const reversed = await transitionReferral(
        store.system,
        tenant,
        acceptedDoc as ReferralDoc,
        change("accepted", "reversed", new Date(accepted.getTime() + 3_600_000)),
        [],
      );
      t.truthy(reversed);
      const { sums } = await totalsOf(store);
      t.is(sums.get("reached:accepted"), 1, "it was accepted in the period");
      t.is(sums.get("reached:reversed"), 1);
      t.is(sums.get("cohort:accepted") ?? 0, 0, "and is not accepted now");
      const scope = statsScope(tenant.applicationId, "production", "cmp_1");
      t.deepEqual(await store.stats.leaders(scope, 10, 0), []);
      t.deepEqual(await store.stats.leadersBetween(scope, day.from, day.to, 10, 0), []);
      await expectRecountAgrees(t, store);
    },
  );
}
