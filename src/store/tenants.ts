import { apiKeyPrefix, generateApiKey, hashApiKey } from "../domain/api-keys.js";
import type { IdentityVerificationName } from "../domain/identity.js";
import { newId } from "../domain/ids.js";
import type { ApiKeyKindName, Tenant } from "../domain/tenancy.js";
import type { Collections } from "./collection.js";
import type { ApiKeyDoc, ApplicationDoc, NetworkFactsName, OrganizationDoc } from "./documents.js";

/** Creates an organization. */
export async function insertOrganization(
  db: Collections,
  name: string,
  now: Date,
): Promise<OrganizationDoc> {
  const doc: OrganizationDoc = { _id: newId("org", now), name, createdAt: now, updatedAt: now };
  await db.organizations.insertOne(doc);
  return doc;
}

/** One organization by id. */
export function findOrganization(db: Collections, id: string): Promise<OrganizationDoc | null> {
  return db.organizations.findOne({ _id: id });
}

/** Creates an application in an organization. */
export async function insertApplication(
  db: Collections,
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
  await db.applications.insertOne(doc);
  return doc;
}

/** One application by id. */
export function findApplication(db: Collections, id: string): Promise<ApplicationDoc | null> {
  return db.applications.findOne({ _id: id });
}

/**
 * How long an application read for a call is kept: every public-key call
 * naming a customer reads its identity settings. On the embedded engine an
 * entry lasts only while the collection's committed version stays, so it
 * is exact in every process; on MongoDB a change made through another
 * instance is seen within this time (docs/trust.md).
 */
export const applicationCacheTtlMs = 5_000;

interface CachedApplication {
  readonly doc: Promise<Readonly<ApplicationDoc> | null>;
  readonly expires: number;
  readonly version: number | undefined;
}

// Per store, so tests' stores and a restarted app never share entries.
const applicationCaches = new WeakMap<Collections, Map<string, CachedApplication>>();

/**
 * One application by id, from the cache or one query (see
 * {@link applicationCacheTtlMs}). The document is frozen: callers share it.
 */
export function findApplicationCached(
  db: Collections,
  id: string,
): Promise<Readonly<ApplicationDoc> | null> {
  let cache = applicationCaches.get(db);
  if (!cache) {
    cache = new Map();
    applicationCaches.set(db, cache);
  }
  const now = Date.now();
  // Read before the application, so a write committed meanwhile drops it.
  const version = db.applications.version;
  const cached = cache.get(id);
  if (cached && cached.expires > now && cached.version === version) return cached.doc;
  const doc = findApplication(db, id).then((found) => found && Object.freeze(found));
  // A failed read is not remembered.
  doc.catch(() => cache.delete(id));
  cache.set(id, { doc, expires: now + applicationCacheTtlMs, version });
  return doc;
}

/** Forgets a cached application; every write of an application calls it. */
function forgetApplication(db: Collections, id: string): void {
  applicationCaches.get(db)?.delete(id);
}

/** Every application, oldest first. */
export function findApplications(db: Collections): Promise<ApplicationDoc[]> {
  return db.applications.find({}, { sort: { createdAt: 1, _id: 1 } }).toArray();
}

/**
 * Creates an API key and returns it with its document; only the hash is
 * stored. `key` may be given (bootstrap keys from the environment).
 */
export async function insertApiKey(
  db: Collections,
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
  await db.apiKeys.insertOne(doc);
  return { doc, key };
}

/** The key document whose hash matches, revoked or not. */
export function findApiKeyByHash(db: Collections, hash: string): Promise<ApiKeyDoc | null> {
  return db.apiKeys.findOne({ hash });
}

/** The key document with this id, revoked or not. */
export function findApiKey(db: Collections, id: string): Promise<ApiKeyDoc | null> {
  return db.apiKeys.findOne({ _id: id });
}

/** An application's keys, oldest first. */
export function findApiKeys(db: Collections, applicationId: string): Promise<ApiKeyDoc[]> {
  return db.apiKeys.find({ applicationId }, { sort: { createdAt: 1, _id: 1 } }).toArray();
}

/** Revokes a key (keeping the first revocation time); null when no such key. */
export async function revokeApiKey(
  db: Collections,
  id: string,
  now: Date,
): Promise<ApiKeyDoc | null> {
  await db.apiKeys.updateOne(
    { _id: id, revokedAt: null },
    { $set: { revokedAt: now, updatedAt: now } },
  );
  return findApiKey(db, id);
}

/** The tenant an application is. */
export function tenantOfApplication(
  application: Pick<ApplicationDoc, "_id" | "organizationId">,
): Tenant {
  return { organizationId: application.organizationId, applicationId: application._id };
}

/**
 * Replaces an application's identity secret (sealed), keeping the current
 * one, if any, as the previous one until `previousExpiresAt`; null when no
 * such application.
 */
export async function rotateIdentitySecret(
  db: Collections,
  application: ApplicationDoc,
  sealed: string,
  now: Date,
  previousExpiresAt: Date,
): Promise<ApplicationDoc | null> {
  const previous = application.identitySecretSealed;
  await db.applications.updateOne(
    { _id: application._id },
    {
      $set: {
        identitySecretSealed: sealed,
        identitySecretCreatedAt: now,
        previousIdentitySecretSealed: previous ?? null,
        previousIdentitySecretExpiresAt: previous ? previousExpiresAt : null,
        updatedAt: now,
      },
    },
  );
  forgetApplication(db, application._id);
  return findApplication(db, application._id);
}

/**
 * The application's network key, sealed: `sealed` becomes it unless one
 * was made first (two calls racing to make it keep the first).
 */
export async function ensureNetworkKey(
  db: Collections,
  id: string,
  sealed: string,
): Promise<string | null> {
  await db.applications.updateOne(
    { _id: id, networkKeySealed: { $exists: false } },
    { $set: { networkKeySealed: sealed } },
  );
  forgetApplication(db, id);
  return (await findApplication(db, id))?.networkKeySealed ?? null;
}

/** Sets whether an application's referrals keep network facts; null when no such application. */
export async function setNetworkFacts(
  db: Collections,
  id: string,
  networkFacts: NetworkFactsName,
  now: Date,
): Promise<ApplicationDoc | null> {
  await db.applications.updateOne({ _id: id }, { $set: { networkFacts, updatedAt: now } });
  forgetApplication(db, id);
  return findApplication(db, id);
}

/** Sets an application's identity verification mode; null when no such application. */
export async function setIdentityVerification(
  db: Collections,
  id: string,
  mode: IdentityVerificationName,
  now: Date,
): Promise<ApplicationDoc | null> {
  await db.applications.updateOne(
    { _id: id },
    { $set: { identityVerification: mode, updatedAt: now } },
  );
  forgetApplication(db, id);
  return findApplication(db, id);
}
