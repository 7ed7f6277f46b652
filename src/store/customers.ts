import type { Filter } from "mongodb";
import { canonicalEmail, normalizeEmailForLookup } from "../domain/email.js";
import type { NetworkEvidence } from "../domain/fraud-evidence.js";
import { generateReferralCode } from "../domain/referral-code.js";
import type { EnvironmentName, Tenant } from "../domain/tenancy.js";
import type { Collections } from "./collection.js";
import type { CustomerDoc, OutboxEntryDoc } from "./documents.js";
import { isDuplicateKeyError } from "./errors.js";
import { withOutbox } from "./events.js";
import { findIdsNewestFirst, findNewestFirst, type PageRequest } from "./paging.js";
import { ownedBy } from "./tenant.js";

/** What identify may change; unset fields are left as they are. */
export interface IdentifyInput {
  readonly environment: EnvironmentName;
  readonly externalUserId: string;
  readonly name: string;
  readonly email?: string;
  /** Shallow merge: a key set to null is removed. */
  readonly customProperties?: Record<string, unknown>;
}

// A duplicate key here is either a concurrent identify of the same user (the
// next attempt updates the document it inserted) or a referral-code
// collision (the next attempt draws a new code); neither reaches the caller.
const identifyAttempts = 8;

/** The identity an identify proposes for a new customer, and the events it raises. */
export interface IdentifyWrite {
  /** The id the customer gets if this identify creates it. */
  readonly newId: string;
  readonly at: Date;
  /** Written in the same atomic upsert. */
  readonly outbox: readonly OutboxEntryDoc[];
  /**
   * The name, email and custom properties are written only if this creates
   * the customer (a public-key call without a userHash, docs/trust.md): an
   * existing customer's are never overwritten, even by a write that raced
   * the caller's check.
   */
  readonly profileOnCreateOnly?: boolean;
  /**
   * The end user's network as this call saw it (fraud evidence), kept with
   * the customer as its profile is: never over an existing customer's by a
   * call that may not change it.
   */
  readonly network?: NetworkEvidence | null;
}

/**
 * Creates or updates the customer keyed by (application, environment,
 * externalUserId) in one atomic upsert, so concurrent identifies of one user
 * leave exactly one customer.
 */
export async function upsertCustomer(
  db: Collections,
  tenant: Tenant,
  input: IdentifyInput,
  write: IdentifyWrite,
  newReferralCode: () => string = generateReferralCode,
): Promise<CustomerDoc> {
  const now = write.at;
  const set: Record<string, unknown> = { name: input.name, updatedAt: now };
  const unset: Record<string, ""> = {};
  const onInsert: Record<string, unknown> = {
    organizationId: tenant.organizationId,
    createdAt: now,
    deletedAt: null,
  };
  if (input.email !== undefined) {
    set.email = input.email;
    set.emailNormalized = normalizeEmailForLookup(input.email);
    set.emailCanonical = canonicalEmail(input.email);
  } else {
    onInsert.email = null;
    onInsert.emailNormalized = null;
    onInsert.emailCanonical = null;
  }
  const properties = Object.entries(input.customProperties ?? {});
  for (const [key, value] of properties) {
    if (value === null) unset[`customProperties.${key}`] = "";
    else set[`customProperties.${key}`] = value;
  }
  if (!properties.some(([, value]) => value !== null)) {
    // No key is set, so the object may not exist yet: create it on insert.
    // (With keys set, the dotted paths create it, and naming it here too
    // would conflict.)
    if (Object.keys(unset).length === 0) onInsert.customProperties = {};
  }
  if (write.network) set.network = write.network;
  if (write.profileOnCreateOnly) {
    for (const [path, value] of Object.entries(set)) {
      if (path === "updatedAt" || path.startsWith("customProperties.")) continue;
      onInsert[path] = value;
      delete set[path];
    }
    onInsert.customProperties = Object.fromEntries(
      properties.filter(([, value]) => value !== null),
    );
    for (const path of Object.keys(set)) if (path.startsWith("customProperties.")) delete set[path];
    for (const path of Object.keys(unset)) delete unset[path];
  }
  const filter = {
    ...ownedBy(tenant),
    environment: input.environment,
    externalUserId: input.externalUserId,
  };
  for (let attempt = 1; ; attempt++) {
    try {
      const update = withOutbox({ $set: set }, write.outbox);
      update.$setOnInsert = { ...onInsert, _id: write.newId, referralCode: newReferralCode() };
      if (Object.keys(unset).length > 0) update.$unset = unset;
      const doc = await db.customers.findOneAndUpdate(filter, update, {
        upsert: true,
        returnDocument: "after",
      });
      if (!doc) throw new Error("upsert returned no document");
      doc.customProperties ??= {};
      return doc;
    } catch (error) {
      if (!isDuplicateKeyError(error) || attempt >= identifyAttempts) throw error;
    }
  }
}

/**
 * The external user id an erased customer is stored with: not the
 * caller's (it starts with DEL, a control character no text may hold), and
 * unique, as the unique index on external ids needs.
 */
export function erasedExternalUserId(id: string): string {
  return `\u007f${id}`;
}

/**
 * Erases a customer's personal data in one atomic write (the name, email
 * and its lookup forms, external user id and custom properties), with the
 * customer.erased event; its referral code stays, retired, so it is never
 * issued again. The tombstone, or the one an earlier erasure left
 * (unchanged), or null when no such customer exists.
 */
export async function eraseCustomer(
  db: Collections,
  tenant: Tenant,
  id: string,
  at: Date,
  outbox: readonly OutboxEntryDoc[],
): Promise<{ tombstone: CustomerDoc; erasedNow: boolean } | null> {
  const erased = await db.customers.findOneAndUpdate(
    { ...ownedBy(tenant), _id: id, deletedAt: null },
    withOutbox(
      {
        $set: {
          name: "",
          email: null,
          emailNormalized: null,
          emailCanonical: null,
          customProperties: {},
          externalUserId: erasedExternalUserId(id),
          network: null,
          deletedAt: at,
          updatedAt: at,
        },
      },
      outbox,
    ),
    { returnDocument: "after" },
  );
  if (erased) return { tombstone: erased, erasedNow: true };
  const tombstone = await db.customers.findOne({ ...ownedBy(tenant), _id: id });
  return tombstone ? { tombstone, erasedNow: false } : null;
}

/** One customer of the application by id, erased ones included (their tombstones). */
export function findCustomerOrTombstone(
  db: Collections,
  tenant: Tenant,
  id: string,
): Promise<CustomerDoc | null> {
  return db.customers.findOne({ ...ownedBy(tenant), _id: id });
}

/** One customer of the application by id. */
export function findCustomer(
  db: Collections,
  tenant: Tenant,
  id: string,
): Promise<CustomerDoc | null> {
  return db.customers.findOne({ ...ownedBy(tenant), _id: id, deletedAt: null });
}

/** One customer by external user id in an environment. */
export function findCustomerByExternalId(
  db: Collections,
  tenant: Tenant,
  environment: EnvironmentName,
  externalUserId: string,
): Promise<CustomerDoc | null> {
  return db.customers.findOne({
    ...ownedBy(tenant),
    environment,
    externalUserId,
    deletedAt: null,
  });
}

/** One customer by referral code in an environment. */
export function findCustomerByReferralCode(
  db: Collections,
  tenant: Tenant,
  environment: EnvironmentName,
  referralCode: string,
): Promise<CustomerDoc | null> {
  return db.customers.findOne({
    ...ownedBy(tenant),
    environment,
    referralCode,
    deletedAt: null,
  });
}

/** Customers of the application by id (referrers of a page, for example). */
export function findCustomersByIds(
  db: Collections,
  tenant: Tenant,
  ids: readonly string[],
): Promise<CustomerDoc[]> {
  return db.customers.find({ ...ownedBy(tenant), _id: { $in: [...ids] } }).toArray();
}

/** Filters of ListCustomers. */
export interface CustomerFilter {
  readonly environment?: EnvironmentName;
  readonly externalUserId?: string;
  readonly email?: string;
  readonly referralCode?: string;
  /** True: erased customers only; otherwise they are left out. */
  readonly deleted?: boolean;
}

/** A page of customers, newest first, and the number of all matches. */
export function findCustomers(
  db: Collections,
  tenant: Tenant,
  filter: CustomerFilter,
  page: PageRequest,
): Promise<{ total: number; docs: CustomerDoc[] }> {
  return findNewestFirst(db.customers, customerQuery(tenant, filter), page);
}

/** {@link findCustomers}, the ids of the page only. */
export function findCustomerIds(
  db: Collections,
  tenant: Tenant,
  filter: CustomerFilter,
  page: PageRequest,
): Promise<{ total: number; ids: string[] }> {
  return findIdsNewestFirst(db.customers, customerQuery(tenant, filter), page);
}

function customerQuery(tenant: Tenant, filter: CustomerFilter): Filter<CustomerDoc> {
  const query: Filter<CustomerDoc> = {
    ...ownedBy(tenant),
    deletedAt: filter.deleted ? { $ne: null } : null,
  };
  if (filter.environment) query.environment = filter.environment;
  if (filter.externalUserId !== undefined) query.externalUserId = filter.externalUserId;
  if (filter.email !== undefined) query.emailNormalized = normalizeEmailForLookup(filter.email);
  if (filter.referralCode !== undefined) query.referralCode = filter.referralCode;
  return query;
}
