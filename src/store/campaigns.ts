import type { EnvironmentName, Tenant } from "../domain/tenancy.js";
import type { Collections } from "./collection.js";
import type { CampaignDoc } from "./documents.js";
import { ownedBy } from "./tenant.js";

/** Filters and order of ListCampaigns. */
export interface CampaignQuery {
  readonly environment?: EnvironmentName;
  readonly isLive?: boolean;
  readonly isDefault?: boolean;
  readonly order: "asc" | "desc";
}

/**
 * How long an application's campaigns are served from memory. Campaigns are
 * read on every ListCampaigns, referral and conversion and written only by
 * the operator: a write through this process clears its application's entry
 * at once; on the embedded store any committed campaign write does, in every
 * worker (the collection's version); another instance sharing a MongoDB
 * database sees it within this time.
 */
export const campaignCacheTtlMs = 5_000;

interface CachedCampaigns {
  readonly docs: Promise<readonly CampaignDoc[]>;
  readonly expires: number;
  readonly version: number | undefined;
}

// Per store, so tests' stores and a restarted app never share entries.
const campaignCaches = new WeakMap<Collections, Map<string, CachedCampaigns>>();

/**
 * The application's live (not deleted) campaigns, newest first, from the
 * cache or one query. The documents are frozen: callers share them.
 */
function campaignsOf(db: Collections, applicationId: string): Promise<readonly CampaignDoc[]> {
  let cache = campaignCaches.get(db);
  if (!cache) {
    cache = new Map();
    campaignCaches.set(db, cache);
  }
  const now = Date.now();
  // Read before the campaigns, so a write committed meanwhile drops them.
  const version = db.campaigns.version;
  const cached = cache.get(applicationId);
  if (cached && cached.expires > now && cached.version === version) return cached.docs;
  const docs = db.campaigns
    .find({ applicationId, deletedAt: null }, { sort: { createdAt: -1, _id: -1 } })
    .toArray()
    .then((found) => found.map(deepFreeze));
  // A failed read is not remembered.
  docs.catch(() => cache.delete(applicationId));
  cache.set(applicationId, { docs, expires: now + campaignCacheTtlMs, version });
  return docs;
}

/** Forgets an application's cached campaigns; every campaign write path calls it. */
function forgetCampaigns(db: Collections, applicationId: string): void {
  campaignCaches.get(db)?.delete(applicationId);
}

/**
 * The application's campaigns, by creation time: the same frozen list for
 * the same query for as long as the cached campaigns are current, so what
 * is built from it (the response) can be built once too.
 */
export async function findCampaigns(
  db: Collections,
  tenant: Tenant,
  query: CampaignQuery,
): Promise<readonly CampaignDoc[]> {
  const docs = await campaignsOf(db, ownedBy(tenant).applicationId);
  let selections = campaignSelections.get(docs);
  if (!selections) {
    selections = new Map();
    campaignSelections.set(docs, selections);
  }
  const key = `${query.environment ?? ""}|${query.isLive ?? ""}|${query.isDefault ?? ""}|${query.order}`;
  let selected = selections.get(key);
  if (!selected) {
    const matching = docs.filter(
      (doc) =>
        (!query.environment || doc.environment === query.environment) &&
        (query.isLive === undefined || doc.isLive === query.isLive) &&
        (query.isDefault === undefined || doc.isDefault === query.isDefault),
    );
    selected = Object.freeze(query.order === "asc" ? matching.reverse() : matching);
    selections.set(key, selected);
  }
  return selected;
}

/** The selections {@link findCampaigns} made of each cached list, dropped with it. */
const campaignSelections = new WeakMap<
  readonly CampaignDoc[],
  Map<string, readonly CampaignDoc[]>
>();

/** One campaign of the application by id. */
export async function findCampaign(
  db: Collections,
  tenant: Tenant,
  id: string,
): Promise<CampaignDoc | null> {
  const docs = await campaignsOf(db, ownedBy(tenant).applicationId);
  return docs.find((doc) => doc._id === id) ?? null;
}

/** Campaigns of the application by id; deleted ones are left out. */
export async function findCampaignsByIds(
  db: Collections,
  tenant: Tenant,
  ids: readonly string[],
): Promise<CampaignDoc[]> {
  const docs = await campaignsOf(db, ownedBy(tenant).applicationId);
  return docs.filter((doc) => ids.includes(doc._id));
}

/** One campaign of any application by id, for the operator's admin API. */
export function findCampaignById(db: Collections, id: string): Promise<CampaignDoc | null> {
  return db.campaigns.findOne({ _id: id, deletedAt: null });
}

/** The environment's default campaign, if it has one. */
export async function findDefaultCampaign(
  db: Collections,
  tenant: Tenant,
  environment: EnvironmentName,
): Promise<CampaignDoc | null> {
  const docs = await campaignsOf(db, ownedBy(tenant).applicationId);
  return docs.find((doc) => doc.environment === environment && doc.isDefault) ?? null;
}

/** Inserts a campaign; a default one first clears the flag on its environment's others. */
export async function insertCampaign(db: Collections, doc: CampaignDoc): Promise<void> {
  try {
    if (doc.isDefault) await clearDefault(db, doc, doc.updatedAt);
    await db.campaigns.insertOne(doc);
  } finally {
    forgetCampaigns(db, doc.applicationId);
  }
}

/** Replaces a campaign's fields; making it default clears the flag on the others. */
export async function replaceCampaignFields(
  db: Collections,
  current: CampaignDoc,
  fields: Partial<CampaignDoc>,
  now: Date,
): Promise<CampaignDoc | null> {
  try {
    if (fields.isDefault) await clearDefault(db, current, now);
    return await db.campaigns.findOneAndUpdate(
      { _id: current._id, applicationId: current.applicationId, deletedAt: null },
      { $set: { ...fields, updatedAt: now } },
      { returnDocument: "after" },
    );
  } finally {
    forgetCampaigns(db, current.applicationId);
  }
}

/** What a campaign ping records. */
export interface CampaignPing {
  readonly at: Date;
  /** The request's Origin header; null without one. */
  readonly origin: string | null;
}

/**
 * Records that an app showed one of the application's campaigns. The
 * campaign's settings are unchanged, so `updatedAt` stays: it says when
 * the operator last changed the campaign, which a ping on every app launch
 * would hide.
 */
export async function updateCampaignPing(
  db: Collections,
  tenant: Tenant,
  id: string,
  ping: CampaignPing,
): Promise<CampaignDoc | null> {
  const { applicationId } = ownedBy(tenant);
  try {
    return await db.campaigns.findOneAndUpdate(
      { _id: id, applicationId, deletedAt: null },
      { $set: { lastPingAt: ping.at, lastPingOrigin: ping.origin } },
      { returnDocument: "after" },
    );
  } finally {
    forgetCampaigns(db, applicationId);
  }
}

/** Marks a campaign deleted; it keeps its referrals and leaves every list. */
export async function markCampaignDeleted(
  db: Collections,
  current: CampaignDoc,
  now: Date,
): Promise<CampaignDoc | null> {
  try {
    return await db.campaigns.findOneAndUpdate(
      { _id: current._id, applicationId: current.applicationId, deletedAt: null },
      { $set: { deletedAt: now, updatedAt: now, isDefault: false, isLive: false } },
      { returnDocument: "after" },
    );
  } finally {
    forgetCampaigns(db, current.applicationId);
  }
}

function deepFreeze<T>(value: T): T {
  if (typeof value === "object" && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}

async function clearDefault(
  db: Collections,
  campaign: Pick<CampaignDoc, "_id" | "applicationId" | "environment">,
  now: Date,
): Promise<void> {
  await db.campaigns.updateMany(
    {
      applicationId: campaign.applicationId,
      environment: campaign.environment,
      isDefault: true,
      _id: { $ne: campaign._id },
    },
    { $set: { isDefault: false, updatedAt: now } },
  );
}
