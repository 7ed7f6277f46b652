import type { Tenant } from "../domain/tenancy.js";
import type { Collections } from "./collection.js";
import type { ClickDoc } from "./documents.js";
import { ownedBy } from "./tenant.js";

/** A visitor's latest click on a campaign's links, if any (its repeat, or proof it came before). */
export function findLatestVisit(
  db: Collections,
  tenant: Tenant,
  visitorHash: string,
  campaignId: string,
): Promise<ClickDoc | null> {
  return db.clicks.findOne(
    { visitorHash, campaignId, ...ownedBy(tenant) },
    { sort: { createdAt: -1 } },
  );
}

/**
 * Stores a click. On the embedded engine it also removes up to two
 * expired clicks (MongoDB's TTL index does that there), so expired clicks
 * leave at least as fast as new ones arrive; the deletes share the click's
 * commit.
 */
export async function insertClick(
  db: Collections,
  doc: ClickDoc,
  sweepsExpired: boolean,
): Promise<void> {
  await Promise.all([
    db.clicks.insertOne(doc),
    ...(sweepsExpired
      ? [1, 2].map(() => db.clicks.deleteOne({ expiresAt: { $lte: doc.createdAt } }))
      : []),
  ]);
}

/** A click by id, in the tenant. */
export function findClick(db: Collections, tenant: Tenant, id: string): Promise<ClickDoc | null> {
  return db.clicks.findOne({ _id: id, ...ownedBy(tenant) });
}

/**
 * People's clicks on a referrer's links from one network in [since, until),
 * up to `atMost` (the click_flood rule's evidence): a visitor's repeats
 * within the hour were never stored, and bots' fetches keep no network.
 */
export function countClicksFromNetwork(
  db: Collections,
  tenant: Tenant,
  referrerId: string,
  networkHash: string,
  since: Date,
  until: Date,
  atMost: number,
): Promise<number> {
  return db.clicks.countDocuments(
    // People's only: bots' fetches keep no network now, but did before.
    {
      ...ownedBy(tenant),
      referrerId,
      networkHash,
      createdAt: { $gte: since, $lt: until },
      bot: null,
    },
    { limit: atMost },
  );
}
