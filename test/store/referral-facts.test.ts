import { referralFactsOf } from "../../src/store/referrals.js";
import { engineNames, storeTest } from "../helpers/engines.js";

/**
 * A customer's referral fields are derived from the referrals: a referee
 * referred in several campaigns shows its newest referral (by creation,
 * then by id when two were created at once), whatever order the store
 * returns them in.
 */

const tenant = { organizationId: "org_1", applicationId: "app_1" };
const at = (minute: number) => new Date(Date.UTC(2026, 0, 2, 3, minute));

function referral(id: string, refereeId: string, createdAt: Date, fields: object = {}) {
  return {
    _id: id,
    ...tenant,
    environment: "production",
    campaignId: `cmp_${id}`,
    referrerId: `cus_referrer_${id}`,
    refereeId,
    status: "pending",
    deletedAt: null,
    createdAt,
    updatedAt: createdAt,
    ...fields,
  };
}

for (const engine of engineNames) {
  storeTest(
    engine,
    "a referee referred in several campaigns is referred by its newest referral",
    async (t, store) => {
      const referrals = store.system.referrals;
      // Inserted oldest last, and the tie broken by the greater id.
      for (const doc of [
        referral("ref_b", "cus_tied", at(5)),
        referral("ref_c", "cus_tied", at(5)),
        referral("ref_a", "cus_tied", at(1)),
        referral("ref_new", "cus_one", at(9)),
        referral("ref_gone", "cus_one", at(10), { deletedAt: at(11) }),
        referral("ref_old", "cus_one", at(2)),
      ]) {
        await referrals.insertOne(doc as never);
      }
      const facts = await referralFactsOf(store.system, tenant, [
        "cus_tied",
        "cus_one",
        "cus_none",
      ]);
      t.is(facts.get("cus_tied")?.referredBy?._id, "ref_c");
      t.is(facts.get("cus_one")?.referredBy?._id, "ref_new", "a deleted referral does not count");
      t.is(facts.get("cus_none")?.referredBy, undefined);
      t.is(facts.get("cus_none")?.visited, 0);
    },
  );
}
