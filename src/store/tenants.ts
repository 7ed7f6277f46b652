import { apiKeyPrefix, generateApiKey, hashApiKey } from "../domain/api-keys.js";
import { newId } from "../domain/ids.js";
import type { ApiKeyDoc, ApiKeyKindName, ApplicationDoc, OrganizationDoc } from "./documents.js";
import type { Store } from "./store.js";

/** Creates an organization. */
export async function insertOrganization(
  store: Store,
  name: string,
  now: Date,
): Promise<OrganizationDoc> {
  const doc: OrganizationDoc = { _id: newId("org", now), name, createdAt: now, updatedAt: now };
  await store.organizations.insertOne(doc);
  return doc;
}

/** One organization by id. */
export function findOrganization(store: Store, id: string): Promise<OrganizationDoc | null> {
  return store.organizations.findOne({ _id: id });
}

/** Creates an application in an organization. */
export async function insertApplication(
  store: Store,
  organizationId: string,
  name: string,
  now: Date,
): Promise<ApplicationDoc> {
  const doc: ApplicationDoc = {
    _id: newId("app", now),
    name,
    organizationId,
    createdAt: now,
    updatedAt: now,
  };
  await store.applications.insertOne(doc);
  return doc;
}

/** One application by id. */
export function findApplication(store: Store, id: string): Promise<ApplicationDoc | null> {
  return store.applications.findOne({ _id: id });
}

/** Every application, oldest first. */
export function findApplications(store: Store): Promise<ApplicationDoc[]> {
  return store.applications.find({}, { sort: { createdAt: 1, _id: 1 } }).toArray();
}

/**
 * Creates an API key and returns it with its document; only the hash is
 * stored. `key` may be given (bootstrap keys from the environment).
 */
export async function insertApiKey(
  store: Store,
  application: ApplicationDoc,
  kind: ApiKeyKindName,
  now: Date,
  options: { name?: string; key?: string } = {},
): Promise<{ doc: ApiKeyDoc; key: string }> {
  const key = options.key ?? generateApiKey(kind);
  const doc: ApiKeyDoc = {
    _id: newId("key", now),
    organizationId: application.organizationId,
    applicationId: application._id,
    kind,
    hash: hashApiKey(key),
    prefix: apiKeyPrefix(key),
    name: options.name ?? null,
    createdAt: now,
    updatedAt: now,
    revokedAt: null,
  };
  await store.apiKeys.insertOne(doc);
  return { doc, key };
}

/** The key document whose hash matches, revoked or not. */
export function findApiKeyByHash(store: Store, hash: string): Promise<ApiKeyDoc | null> {
  return store.apiKeys.findOne({ hash });
}

/** An application's keys, oldest first. */
export function findApiKeys(store: Store, applicationId: string): Promise<ApiKeyDoc[]> {
  return store.apiKeys.find({ applicationId }, { sort: { createdAt: 1, _id: 1 } }).toArray();
}

/** Revokes a key (keeping the first revocation time); null when no such key. */
export async function revokeApiKey(store: Store, id: string, now: Date): Promise<ApiKeyDoc | null> {
  await store.apiKeys.updateOne(
    { _id: id, revokedAt: null },
    { $set: { revokedAt: now, updatedAt: now } },
  );
  return store.apiKeys.findOne({ _id: id });
}
