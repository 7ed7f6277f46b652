import type { Filter } from "mongodb";
import type { CampaignDoc, EnvironmentName } from "./documents.js";
import type { Store } from "./store.js";
import { ownedBy, type TenantScope } from "./tenant.js";

/** Filters and order of ListCampaigns. */
export interface CampaignQuery {
  readonly environment?: EnvironmentName;
  readonly isLive?: boolean;
  readonly isDefault?: boolean;
  readonly order: "asc" | "desc";
}

/** The application's campaigns, by creation time. */
export function findCampaigns(
  store: Store,
  tenant: TenantScope,
  query: CampaignQuery,
): Promise<CampaignDoc[]> {
  const filter: Filter<CampaignDoc> = { ...ownedBy(tenant), deletedAt: null };
  if (query.environment) filter.environment = query.environment;
  if (query.isLive !== undefined) filter.isLive = query.isLive;
  if (query.isDefault !== undefined) filter.isDefault = query.isDefault;
  const direction = query.order === "asc" ? 1 : -1;
  return store.campaigns.find(filter, { sort: { createdAt: direction, _id: direction } }).toArray();
}

/** One campaign of the application by id. */
export function findCampaign(
  store: Store,
  tenant: TenantScope,
  id: string,
): Promise<CampaignDoc | null> {
  return store.campaigns.findOne({ ...ownedBy(tenant), _id: id, deletedAt: null });
}

/** Campaigns of the application by id; deleted ones are left out. */
export function findCampaignsByIds(
  store: Store,
  tenant: TenantScope,
  ids: readonly string[],
): Promise<CampaignDoc[]> {
  return store.campaigns
    .find({ ...ownedBy(tenant), _id: { $in: [...ids] }, deletedAt: null })
    .toArray();
}

/** One campaign of any application by id, for the operator's admin API. */
export function findCampaignById(store: Store, id: string): Promise<CampaignDoc | null> {
  return store.campaigns.findOne({ _id: id, deletedAt: null });
}

/** The environment's default campaign, if it has one. */
export function findDefaultCampaign(
  store: Store,
  tenant: TenantScope,
  environment: EnvironmentName,
): Promise<CampaignDoc | null> {
  return store.campaigns.findOne({
    ...ownedBy(tenant),
    environment,
    isDefault: true,
    deletedAt: null,
  });
}

/** Inserts a campaign; a default one first clears the flag on its environment's others. */
export async function insertCampaign(store: Store, doc: CampaignDoc): Promise<void> {
  if (doc.isDefault) await clearDefault(store, doc, doc.updatedAt);
  await store.campaigns.insertOne(doc);
}

/** Replaces a campaign's fields; making it default clears the flag on the others. */
export async function replaceCampaignFields(
  store: Store,
  current: CampaignDoc,
  fields: Partial<CampaignDoc>,
  now: Date,
): Promise<CampaignDoc | null> {
  if (fields.isDefault) await clearDefault(store, current, now);
  return store.campaigns.findOneAndUpdate(
    { _id: current._id, applicationId: current.applicationId, deletedAt: null },
    { $set: { ...fields, updatedAt: now } },
    { returnDocument: "after" },
  );
}

/** Marks a campaign deleted; it keeps its referrals and leaves every list. */
export function markCampaignDeleted(
  store: Store,
  current: CampaignDoc,
  now: Date,
): Promise<CampaignDoc | null> {
  return store.campaigns.findOneAndUpdate(
    { _id: current._id, applicationId: current.applicationId, deletedAt: null },
    { $set: { deletedAt: now, updatedAt: now, isDefault: false, isLive: false } },
    { returnDocument: "after" },
  );
}

async function clearDefault(
  store: Store,
  campaign: Pick<CampaignDoc, "_id" | "applicationId" | "environment">,
  now: Date,
): Promise<void> {
  await store.campaigns.updateMany(
    {
      applicationId: campaign.applicationId,
      environment: campaign.environment,
      isDefault: true,
      _id: { $ne: campaign._id },
    },
    { $set: { isDefault: false, updatedAt: now } },
  );
}
