import { type Customer, CustomerSchema } from "../../gen/referral/v1/resources_pb.js";
import type { CustomerDoc } from "../store/documents.js";
import { referralFactsOf } from "../store/referrals.js";
import type { Store } from "../store/store.js";
import { messageFromDoc } from "./records.js";

/**
 * Customers as the API shows them: stored fields plus the referral fields
 * derived from the referrals collection, for a whole page in a fixed number
 * of queries.
 */
export async function customerMessages(
  store: Store,
  docs: readonly CustomerDoc[],
): Promise<Customer[]> {
  const facts = await referralFactsOf(
    store,
    docs.map((doc) => doc._id),
  );
  const referrerIds = [
    ...new Set([...facts.values()].flatMap((f) => (f.referredBy ? [f.referredBy.referrerId] : []))),
  ];
  const referrers = new Map(
    referrerIds.length === 0
      ? []
      : (await store.customers.find({ _id: { $in: referrerIds } }).toArray()).map((c) => [
          c._id,
          c,
        ]),
  );
  return docs.map((doc) => {
    const fact = facts.get(doc._id);
    const referral = fact?.referredBy;
    const referrer = referral ? referrers.get(referral.referrerId) : undefined;
    return messageFromDoc(CustomerSchema, doc, {
      visitedReferralsCount: fact?.visited ?? 0,
      convertedReferralsCount: fact?.converted ?? 0,
      referredBy: referrer
        ? {
            id: referrer._id,
            externalUserId: referrer.externalUserId,
            email: referrer.email,
            name: referrer.name,
          }
        : null,
      referredById: referral?.referrerId ?? null,
      referredByReferralId: referral?._id ?? null,
      referredInCampaignId: referral?.campaignId ?? null,
    });
  });
}
