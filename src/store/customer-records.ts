import { type Customer, CustomerSchema } from "../../gen/referral/v1/resources_pb.js";
import { messageFromDoc } from "../contract/records.js";
import type { Tenant } from "../domain/tenancy.js";
import type { Collections } from "./collection.js";
import type { CustomerViews } from "./customer-views.js";
import {
  type CustomerFilter,
  findCustomerIds,
  findCustomerOrTombstone,
  findCustomers,
  findCustomersByIds,
} from "./customers.js";
import type { CustomerDoc } from "./documents.js";
import type { PageRequest } from "./paging.js";
import { referralFactsOf } from "./referrals.js";

/**
 * A customer identify has just created, as the API shows it: a new customer
 * has referred nobody and was referred by nobody yet, so no query is needed.
 */
export function newCustomerMessage(doc: CustomerDoc): Customer {
  return messageFromDoc(CustomerSchema, doc, { ...emptyReferralFields, ...erasedFields(doc) });
}

/**
 * What an erased customer shows instead of its stored placeholder: no
 * external user id (see `erasedExternalUserId`); nothing for a live one.
 */
function erasedFields(doc: CustomerDoc): { externalUserId?: string } {
  return doc.deletedAt ? { externalUserId: "" } : {};
}

const emptyReferralFields = {
  visitedReferralsCount: 0,
  convertedReferralsCount: 0,
  referredBy: null,
  referredById: null,
  referredByReferralId: null,
  referredInCampaignId: null,
};

/**
 * Customers as the API shows them: stored fields plus the referral fields
 * derived from the referrals collection, for a whole page in a fixed number
 * of queries. Built from the documents given, never kept: they may have been
 * read before a write that a kept view would then hide.
 */
export function customerMessages(
  db: Collections,
  tenant: Tenant,
  docs: readonly CustomerDoc[],
): Promise<Customer[]> {
  return buildCustomerMessages(db, tenant, docs);
}

/**
 * The view of one customer of the tenant by id, or null: from `views`
 * without a query when it is kept there.
 */
export async function customerView(
  db: Collections,
  tenant: Tenant,
  id: string,
  views?: CustomerViews,
): Promise<Customer | null> {
  const read = async () => {
    const doc = await findCustomerOrTombstone(db, tenant, id);
    return doc ? buildCustomerMessages(db, tenant, [doc]) : [];
  };
  const [view] = views ? await keptOrRead(tenant, [id], views, read) : await read();
  return view ?? null;
}

/**
 * A page of ListCustomers as the API shows it, and the number of all
 * matches. With `views`, the page is read as ids and only the customers
 * without a kept view are read in full.
 */
export async function customerPage(
  db: Collections,
  tenant: Tenant,
  filter: CustomerFilter,
  page: PageRequest,
  views?: CustomerViews,
): Promise<{ total: number; customers: Customer[] }> {
  if (!views) {
    const { total, docs } = await findCustomers(db, tenant, filter, page);
    return { total, customers: await buildCustomerMessages(db, tenant, docs) };
  }
  const { total, ids } = await findCustomerIds(db, tenant, filter, page);
  const customers = await keptOrRead(tenant, ids, views, async (missing) =>
    buildCustomerMessages(db, tenant, await findCustomersByIds(db, tenant, missing)),
  );
  return { total, customers };
}

/**
 * The views of `ids`, in order: the kept ones, and the others as `read`
 * builds them (from reads made after the version is taken), kept in turn.
 * A customer `read` does not find (removed meanwhile) is left out, as a
 * read a moment later would leave it out.
 */
async function keptOrRead(
  tenant: Tenant,
  ids: readonly string[],
  views: CustomerViews,
  read: (missing: readonly string[]) => Promise<Customer[]>,
): Promise<Customer[]> {
  const readAt = views.version();
  const kept = ids.map((id) => views.get(id, tenant.applicationId));
  const missing = ids.filter((_, index) => kept[index] === undefined);
  if (missing.length === 0) return kept as Customer[];
  const built = new Map((await read(missing)).map((view) => [view.id, views.keep(view, readAt)]));
  return ids.flatMap((id, index) => kept[index] ?? built.get(id) ?? []);
}

async function buildCustomerMessages(
  db: Collections,
  tenant: Tenant,
  docs: readonly CustomerDoc[],
): Promise<Customer[]> {
  const facts = await referralFactsOf(
    db,
    tenant,
    docs.map((doc) => doc._id),
  );
  const referrerIds = [
    ...new Set([...facts.values()].flatMap((f) => (f.referredBy ? [f.referredBy.referrerId] : []))),
  ];
  const referrers = new Map(
    referrerIds.length === 0
      ? []
      : (await findCustomersByIds(db, tenant, referrerIds)).map((c) => [c._id, c]),
  );
  return docs.map((doc) => {
    const fact = facts.get(doc._id);
    const referral = fact?.referredBy;
    const referrer = referral ? referrers.get(referral.referrerId) : undefined;
    return messageFromDoc(CustomerSchema, doc, {
      ...erasedFields(doc),
      visitedReferralsCount: fact?.visited ?? 0,
      convertedReferralsCount: fact?.converted ?? 0,
      referredBy: referrer
        ? {
            id: referrer._id,
            // An erased referrer is shown by its id only.
            externalUserId: referrer.deletedAt ? "" : referrer.externalUserId,
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
