import type { Filter } from "mongodb";
import { newId } from "../domain/ids.js";
import type { EnvironmentName, ReferralDoc, ReferralStatusName } from "./documents.js";
import { isDuplicateKeyError } from "./errors.js";
import { findNewestFirst, type PageRequest } from "./paging.js";
import type { Store } from "./store.js";
import { ownedBy, type TenantScope } from "./tenant.js";

/** The parties of a referral. */
export interface ReferralParties {
  readonly environment: EnvironmentName;
  readonly campaignId: string;
  readonly referrerId: string;
  readonly refereeId: string;
}

/** The referral of a referee in a campaign, if any. */
export function findReferralOfReferee(
  store: Store,
  tenant: TenantScope,
  parties: Omit<ReferralParties, "referrerId">,
): Promise<ReferralDoc | null> {
  return store.referrals.findOne({
    ...ownedBy(tenant),
    environment: parties.environment,
    campaignId: parties.campaignId,
    refereeId: parties.refereeId,
  });
}

/**
 * Inserts a pending referral, or returns the one a concurrent call inserted
 * first: the unique index on (application, environment, campaign, referee)
 * lets exactly one insert win.
 */
export async function insertReferral(
  store: Store,
  tenant: TenantScope,
  parties: ReferralParties,
  now: Date,
): Promise<{ doc: ReferralDoc; created: boolean }> {
  const doc: ReferralDoc = {
    _id: newId("ref", now),
    organizationId: tenant.organizationId,
    applicationId: tenant.applicationId,
    ...parties,
    status: "pending",
    suspectedFrauds: [],
    createdAt: now,
    updatedAt: now,
    deletedAt: null,
  };
  try {
    await store.referrals.insertOne(doc);
    return { doc, created: true };
  } catch (error) {
    if (!isDuplicateKeyError(error)) throw error;
    const winner = await findReferralOfReferee(store, tenant, parties);
    if (!winner) throw error;
    return { doc: winner, created: false };
  }
}

/** Moves a referral to another referrer while it is pending or flagged; null otherwise. */
export function reattributeReferral(
  store: Store,
  tenant: TenantScope,
  id: string,
  referrerId: string,
  now: Date,
): Promise<ReferralDoc | null> {
  return store.referrals.findOneAndUpdate(
    { ...ownedBy(tenant), _id: id, status: { $in: ["pending", "flagged"] } },
    { $set: { referrerId, updatedAt: now } },
    { returnDocument: "after" },
  );
}

/** Filters of ListReferrals. */
export interface ReferralFilter {
  readonly status?: ReferralStatusName;
  readonly campaignId?: string;
  readonly referrerId?: string;
  readonly refereeId?: string;
  readonly environment?: EnvironmentName;
}

/** A page of referrals, newest first, and the number of all matches. */
export async function findReferrals(
  store: Store,
  tenant: TenantScope,
  filter: ReferralFilter,
  page: PageRequest,
): Promise<{ total: number; docs: ReferralDoc[] }> {
  const query: Filter<ReferralDoc> = { ...ownedBy(tenant), deletedAt: null };
  if (filter.status) query.status = filter.status;
  if (filter.campaignId !== undefined) query.campaignId = filter.campaignId;
  if (filter.referrerId !== undefined) query.referrerId = filter.referrerId;
  if (filter.refereeId !== undefined) query.refereeId = filter.refereeId;
  if (filter.environment) query.environment = filter.environment;
  return findNewestFirst(store.referrals, query, page);
}

/** What a customer's referral fields are derived from. */
export interface ReferralFacts {
  /** Referrals naming the customer as referrer, any status. */
  visited: number;
  /** Of those, the accepted ones. */
  converted: number;
  /** The referral that brought the customer, if any. */
  referredBy?: ReferralDoc;
}

/**
 * The referral facts of a page of customers, from two indexed queries for
 * the whole page (not one per customer), so counters are always exact.
 */
export async function referralFactsOf(
  store: Store,
  customerIds: readonly string[],
): Promise<Map<string, ReferralFacts>> {
  const facts = new Map<string, ReferralFacts>(
    customerIds.map((id) => [id, { visited: 0, converted: 0 }]),
  );
  if (customerIds.length === 0) return facts;
  const ids = [...customerIds];
  const [asReferrer, asReferee] = await Promise.all([
    store.referrals
      .find(
        { referrerId: { $in: ids }, deletedAt: null },
        { projection: { referrerId: 1, status: 1 } },
      )
      .toArray(),
    store.referrals
      .find({ refereeId: { $in: ids }, deletedAt: null }, { sort: { createdAt: -1, _id: -1 } })
      .toArray(),
  ]);
  for (const referral of asReferrer) {
    const entry = facts.get(referral.referrerId);
    if (!entry) continue;
    entry.visited += 1;
    if (referral.status === "accepted") entry.converted += 1;
  }
  for (const referral of asReferee) {
    const entry = facts.get(referral.refereeId);
    // Newest first: the first referral seen for a referee is the one that counts.
    if (entry && !entry.referredBy) entry.referredBy = referral;
  }
  return facts;
}
