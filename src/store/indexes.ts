import type { CreateIndexesOptions, IndexSpecification } from "mongodb";
import type { Collections } from "./collection.js";
import { defaultEventRetentionMs } from "./retention.js";

/** One index: its keys, options, and the query it serves. */
interface IndexDeclaration {
  readonly key: Record<string, 1 | -1>;
  readonly options?: CreateIndexesOptions;
  readonly serves: string;
  /**
   * Documents expire EVENT_RETENTION after the (single, date) key: a TTL
   * index on MongoDB. The embedded engine has no TTL; the index serves its
   * retention sweep (`src/store/retention.ts`), which removes the same documents.
   */
  readonly expires?: true;
}

/** The documents whose outbox holds events, for the relay; most documents have none. */
const outboxIndex: IndexDeclaration = {
  key: { outboxPending: 1 },
  options: { sparse: true },
  serves: "the outbox relay: documents with events waiting",
};

/** Documents holding grants about to be made (see `GrantPlanHolder`), for the reward sweep. */
const grantPlanIndex: IndexDeclaration = {
  key: { grantPlanPending: 1 },
  options: { sparse: true },
  serves: "the reward sweep: grants a crash left unmade",
};

/**
 * Every index, per collection. Created at start-up with `createIndex`, which
 * does nothing when an identical index exists, so starting is idempotent.
 */
export const indexDeclarations: { [C in CollectionName]: readonly IndexDeclaration[] } = {
  organizations: [],
  applications: [{ key: { createdAt: 1, _id: 1 }, serves: "ListApplications, oldest first" }],
  apiKeys: [
    {
      key: { hash: 1 },
      options: { unique: true },
      serves: "authenticating every request by the key's hash",
    },
    { key: { applicationId: 1, createdAt: 1, _id: 1 }, serves: "ListApiKeys" },
  ],
  customers: [
    outboxIndex,
    grantPlanIndex,
    {
      key: { applicationId: 1, externalUserId: 1, environment: 1 },
      options: { unique: true },
      serves:
        "IdentifyCustomer's upsert (concurrent identifies of one user race to one document); ListCustomers by externalUserId with or without environment",
    },
    {
      key: { applicationId: 1, referralCode: 1, environment: 1 },
      options: { unique: true },
      serves:
        "finding a referrer by code (codes are unique per environment); ListCustomers by code",
    },
    {
      key: { applicationId: 1, deletedAt: 1, createdAt: -1, _id: -1 },
      serves: "ListCustomers, newest first; a deep page skips index entries only",
    },
    {
      key: { applicationId: 1, deletedAt: 1, environment: 1, createdAt: -1, _id: -1 },
      serves: "ListCustomers of one environment, newest first",
    },
    { key: { applicationId: 1, emailNormalized: 1 }, serves: "ListCustomers by email" },
    {
      key: { referralCode: 1 },
      serves: "a share link that names no campaign: the customer of its code, in any application",
    },
    {
      key: { applicationId: 1, environment: 1, emailCanonical: 1 },
      serves: "the duplicate_referee_email rule: customers sharing a mailbox",
    },
  ],
  referrals: [
    outboxIndex,
    grantPlanIndex,
    {
      key: { reversalPending: 1 },
      options: { sparse: true },
      serves: "the reward sweep: reversals a crash interrupted",
    },
    {
      key: { rewardsHeld: 1, applicationId: 1 },
      options: { sparse: true },
      serves: "the fraud review queue: referrals whose rewards a hold_reward verdict holds",
    },
    {
      key: { reviewDueAt: 1 },
      options: { sparse: true },
      serves: "the reward sweep: fraud reviews whose deadline accepts them",
    },
    {
      key: { applicationId: 1, environment: 1, campaignId: 1, refereeId: 1 },
      options: { unique: true },
      serves: "one referral per campaign and referee; makes concurrent creates race-free",
    },
    {
      key: { applicationId: 1, deletedAt: 1, createdAt: -1, _id: -1 },
      serves: "ListReferrals, newest first",
    },
    {
      key: { applicationId: 1, deletedAt: 1, environment: 1, createdAt: -1, _id: -1 },
      serves: "ListReferrals of one environment",
    },
    {
      key: { applicationId: 1, deletedAt: 1, status: 1, createdAt: -1, _id: -1 },
      serves: "ListReferrals by status (a rare status is not found by walking all referrals)",
    },
    {
      key: { applicationId: 1, deletedAt: 1, campaignId: 1, createdAt: -1, _id: -1 },
      serves: "ListReferrals of one campaign",
    },
    {
      key: { referrerId: 1, status: 1 },
      serves: "a referrer's visited and converted counts; ListReferrals by referrer",
    },
    {
      key: { referrerId: 1, attributedAt: -1, applicationId: 1 },
      serves: "the fraud evidence: a referrer's last hour and day, counted in the index",
    },
    {
      key: { "evidence.refereeNetwork.networkHash": 1, attributedAt: -1, applicationId: 1 },
      options: { sparse: true },
      serves:
        "the fraud evidence: referrals from one network in the last day, counted in the index",
    },
    {
      key: { refereeId: 1, createdAt: -1 },
      serves:
        "who referred a customer; the referrals a checkpoint may convert; ListReferrals by referee",
    },
  ],
  rewardGrants: [
    outboxIndex,
    {
      key: { applicationId: 1, createdAt: -1, _id: -1 },
      serves:
        "ListRewardGrants, newest first; its environment, campaign and kind filters walk it (a grant index fewer on every conversion)",
    },
    {
      key: { applicationId: 1, status: 1, createdAt: -1, _id: -1 },
      serves: "ListRewardGrants by status (approved grants to pay, pending ones to review)",
    },
    {
      key: { customerId: 1, createdAt: -1, _id: -1 },
      serves:
        "a customer's grants: ListRewardGrants by customer, balances on MongoDB; a referral's grants, which are its two parties' since its acceptance",
    },
    {
      key: { approvalDueAt: 1 },
      options: { sparse: true },
      serves: "the reward sweep: pending grants whose hold has ended (set only until then)",
    },
    {
      key: { expiryDueAt: 1 },
      options: { sparse: true },
      serves: "the reward sweep: approved grants past their expiry (set only until then)",
    },
    {
      key: { limitSlot: 1 },
      options: { unique: true, sparse: true },
      serves:
        "count limits: one grant per slot of a (reward, recipient, window), so of grants racing for the last slot one is stored; the slots taken, by range",
    },
    {
      key: { releasePending: 1 },
      options: { sparse: true },
      serves: "the reward sweep: room a crash left held by a grant that no longer holds it",
    },
  ],
  // Read and written by id only.
  rewardAllowances: [],
  rewardSnapshots: [],
  checkpoints: [
    outboxIndex,
    {
      key: { applicationId: 1, environment: 1, customerId: 1, name: 1 },
      serves: "a customer's checkpoints by name",
    },
  ],
  campaigns: [
    {
      key: { applicationId: 1, environment: 1, isDefault: 1 },
      serves: "the environment's default campaign",
    },
    { key: { applicationId: 1, createdAt: -1, _id: -1 }, serves: "ListCampaigns" },
  ],
  webhooks: [
    {
      key: { applicationId: 1, createdAt: -1 },
      serves: "ListWebhooks; the relay's endpoints of an application",
    },
  ],
  events: [
    {
      key: { createdAt: 1 },
      expires: true,
      serves: "retention: events older than EVENT_RETENTION go",
    },
    {
      key: { customerId: 1 },
      options: { sparse: true },
      serves: "erasure: the stored events whose payload holds a customer's data",
    },
    {
      key: { referredById: 1 },
      options: { sparse: true },
      serves: "erasure: the stored events whose referredBy holds a referrer's data",
    },
    {
      // Events whose delivery is kept in them only (see `EventDoc.delivered`),
      // by id: an event id begins with its time, which such a delivery is
      // listed by.
      key: { "delivered.webhookId": 1, _id: -1 },
      options: { partialFilterExpression: { "delivered.webhookId": { $exists: true } } },
      serves: "ListWebhookDeliveries, newest first: the deliveries kept in their events",
    },
  ],
  deliveries: [
    {
      key: { eventId: 1, webhookId: 1 },
      options: { unique: true },
      serves: "one delivery per event and endpoint, so relaying an event twice queues it once",
    },
    {
      key: { nextAttemptAt: 1 },
      // Pending deliveries only: nearly every delivery succeeds at its
      // first attempt and never enters the index.
      options: { partialFilterExpression: { status: "pending" } },
      serves: "the workers' due deliveries; the first due, which they sleep until",
    },
    {
      key: { webhookId: 1, createdAt: -1, _id: -1 },
      serves: "ListWebhookDeliveries, newest first; by status succeeded (nearly all of them)",
    },
    // By any other status, one partial index each: they hold the few
    // deliveries not succeeded, and an endpoint's failed ones are listed
    // without walking its succeeded ones.
    ...(["pending", "failed", "skipped"] as const).map(
      (status): IndexDeclaration => ({
        key: { webhookId: 1, createdAt: -1, _id: -1 },
        options: {
          name: `${status}_webhookId_1_createdAt_-1__id_-1`,
          partialFilterExpression: { status },
        },
        serves: `ListWebhookDeliveries by status ${status}; the catch-up of an endpoint's pending ones`,
      }),
    ),
    {
      key: { createdAt: 1 },
      // Finished deliveries only (nextAttemptAt is null unless pending): one
      // still due or waiting for a retry is never removed. The embedded
      // engine indexes them all; its sweep filters on nextAttemptAt.
      options: { partialFilterExpression: { nextAttemptAt: { $type: "null" } } },
      expires: true,
      serves: "retention: finished deliveries older than EVENT_RETENTION go",
    },
  ],
  idempotencyKeys: [
    {
      key: { tenantId: 1, key: 1 },
      options: { unique: true },
      serves:
        "a write's idempotency key: the first call inserts it, so of concurrent retries one runs",
    },
    {
      key: { expiresAt: 1 },
      // MongoDB removes a document once its own expiresAt has passed.
      options: { expireAfterSeconds: 0 },
      serves: "expired idempotency keys: MongoDB's TTL monitor; the embedded engine's sweep",
    },
  ],
  clicks: [
    {
      key: { visitorHash: 1, campaignId: 1, createdAt: -1 },
      options: { sparse: true },
      serves: "a visitor's repeat within the hour, and whether a click is the visitor's first",
    },
    {
      key: { applicationId: 1, referrerId: 1, networkHash: 1, createdAt: 1 },
      serves:
        "erasing a customer: the clicks on its links; the click_flood rule: a referrer's clicks from one network in a day",
    },
    {
      key: { expiresAt: 1 },
      // MongoDB removes a click once its window has ended.
      options: { expireAfterSeconds: 0 },
      serves: "expired clicks: MongoDB's TTL monitor; the embedded engine's sweep",
    },
  ],
};

/**
 * Into how many groups each field that documents share divides a
 * collection (`status` has a handful of values, an application owns a tenth of
 * the data, most documents are not deleted). Fields not listed are taken to
 * be nearly unique: ids, emails, codes, times. The embedded engine gives
 * SQLite's planner statistics derived from these figures instead of sampled
 * ones, so every query is planned the same at any size and on any data, and
 * the plans the query-plan test checks are the plans production runs.
 */
export const fieldFanout: Readonly<Record<string, number>> = {
  applicationId: 10,
  organizationId: 10,
  // An idempotency key's owner: an application, or the admin API.
  tenantId: 10,
  environment: 2,
  deletedAt: 1,
  // A handful of values (a referral's five, a grant's seven).
  status: 5,
  // An API key's two, a grant's three.
  kind: 3,
  enabled: 2,
  isDefault: 2,
  isLive: 2,
  campaignId: 10,
  webhookId: 10,
  "delivered.webhookId": 10,
  outboxPending: 1,
  // A referrer brings a handful of referees, not one.
  referrerId: 100_000,
};

/**
 * A total the embedded engine keeps per group of documents, in the same
 * transaction as every write that changes it, so a list's
 * exact `total` is one lookup at any size. A count whose filter is exactly
 * `groupBy` equalities plus `nullFields` is answered from it; any other
 * count runs in SQL on the indexes. MongoDB counts with its indexes, and
 * answers the aggregations that sums serve with them too.
 */
export interface CounterDeclaration {
  /** The fields a counted filter matches by equality; one total per combination. */
  readonly groupBy: readonly string[];
  /** The fields a counted filter requires to be null or missing. */
  readonly nullFields?: readonly string[];
  /**
   * Integer fields totalled per group beside the count (a missing or null
   * value adds nothing): an `aggregate` that `$match`es a prefix of
   * `groupBy`, groups by the rest and `$sum`s these is answered from them.
   */
  readonly sums?: readonly string[];
  readonly serves: string;
}

const live = ["deletedAt"];

/** Every kept total, per collection. */
export const counterDeclarations: { [C in CollectionName]?: readonly CounterDeclaration[] } = {
  customers: [
    { groupBy: ["applicationId"], nullFields: live, serves: "ListCustomers' total" },
    {
      groupBy: ["applicationId", "environment"],
      nullFields: live,
      serves: "ListCustomers' total in one environment",
    },
  ],
  referrals: [
    { groupBy: ["applicationId"], nullFields: live, serves: "ListReferrals' total" },
    {
      groupBy: ["applicationId", "environment"],
      nullFields: live,
      serves: "ListReferrals' total in one environment",
    },
    {
      groupBy: ["applicationId", "status"],
      nullFields: live,
      serves: "ListReferrals' total by status",
    },
    {
      groupBy: ["applicationId", "environment", "status"],
      nullFields: live,
      serves: "ListReferrals' total by status in one environment",
    },
    {
      groupBy: ["applicationId", "campaignId"],
      nullFields: live,
      serves: "ListReferrals' total of one campaign",
    },
    {
      groupBy: ["applicationId", "referrerId"],
      nullFields: live,
      serves: "a customer's visitedReferralsCount; ListReferrals' total of one referrer",
    },
    {
      groupBy: ["applicationId", "referrerId", "status"],
      nullFields: live,
      serves: "a customer's convertedReferralsCount (its accepted referrals)",
    },
    {
      groupBy: ["applicationId", "campaignId", "status"],
      nullFields: live,
      serves: "ListReferrals' total of one campaign by status",
    },
  ],
  rewardGrants: [
    { groupBy: ["applicationId"], serves: "ListRewardGrants' total" },
    {
      groupBy: ["applicationId", "environment"],
      serves: "ListRewardGrants' total in one environment",
    },
    { groupBy: ["applicationId", "status"], serves: "ListRewardGrants' total by status" },
    { groupBy: ["applicationId", "campaignId"], serves: "ListRewardGrants' total of a campaign" },
    {
      groupBy: ["applicationId", "customerId", "value.currency", "kind", "status"],
      sums: ["amountMinor"],
      serves: "GetCustomerRewardBalance: a customer's grants and amounts per currency and status",
    },
  ],
  events: [
    {
      groupBy: ["applicationId", "delivered.webhookId"],
      serves: "ListWebhookDeliveries' total: the deliveries kept in their events",
    },
  ],
  deliveries: [
    {
      groupBy: ["applicationId", "webhookId"],
      serves: "ListWebhookDeliveries' total",
    },
    {
      groupBy: ["applicationId", "webhookId", "status"],
      serves: "ListWebhookDeliveries' total by status",
    },
  ],
};

/** The names of the store's collections. */
export type CollectionName =
  | "organizations"
  | "applications"
  | "apiKeys"
  | "customers"
  | "referrals"
  | "checkpoints"
  | "rewardGrants"
  | "rewardAllowances"
  | "rewardSnapshots"
  | "campaigns"
  | "webhooks"
  | "events"
  | "deliveries"
  | "idempotencyKeys"
  | "clicks";

/** How expiring indexes are created: their lifetime, and how an existing one's is changed. */
export interface ExpiryOptions {
  /** EVENT_RETENTION in whole seconds (MongoDB's `expireAfterSeconds`). */
  readonly expireAfterSeconds: number;
  /**
   * Gives an existing TTL index a new lifetime (MongoDB's `collMod`); called
   * when creating it failed because it exists with another one.
   */
  readonly changeExpiry?: (
    collection: CollectionName,
    key: Record<string, 1 | -1>,
    expireAfterSeconds: number,
  ) => Promise<void>;
}

/**
 * Indexes an earlier version declared and this one no longer does: dropped
 * at start, so an upgraded store stops keeping them on every write. Named
 * as MongoDB names them.
 */
export const retiredIndexes: { [C in CollectionName]?: readonly string[] } = {
  // Replaced by referrerId_1_attributedAt_-1_applicationId_1, which counts in the index.
  referrals: ["referrerId_1_attributedAt_-1"],
  // Widened to applicationId_1_referrerId_1_networkHash_1_createdAt_1, which also counts a network's clicks.
  clicks: ["applicationId_1_referrerId_1"],
  // Replaced by partial indexes of the deliveries not succeeded (nextAttemptAt_1 and
  // pending_/failed_/skipped_webhookId_1_createdAt_-1__id_-1), which a succeeded one never enters.
  deliveries: ["status_1_nextAttemptAt_1", "webhookId_1_status_1_createdAt_-1__id_-1"],
};

/** MongoDB's IndexOptionsConflict: the index exists with other options. */
const indexOptionsConflict = 85;

/** Creates every declared index; safe to run on every start. */
export async function ensureIndexes(
  db: Collections,
  expiry: ExpiryOptions = { expireAfterSeconds: defaultEventRetentionMs / 1000 },
): Promise<void> {
  for (const [name, declarations] of Object.entries(indexDeclarations)) {
    const collection = db[name as CollectionName];
    for (const { key, options, expires } of declarations) {
      if (!expires) {
        await collection.createIndex(key as IndexSpecification, options);
        continue;
      }
      const { expireAfterSeconds, changeExpiry } = expiry;
      try {
        await collection.createIndex(key as IndexSpecification, {
          ...options,
          expireAfterSeconds,
        });
      } catch (error) {
        // EVENT_RETENTION changed since the index was made.
        const code = (error as { code?: unknown }).code;
        if (code !== indexOptionsConflict || !changeExpiry) throw error;
        await changeExpiry(name as CollectionName, key, expireAfterSeconds);
      }
    }
  }
  // Dropped once every declared index exists: a query the retired index
  // served has its replacement before the old one goes.
  for (const [name, retired] of Object.entries(retiredIndexes)) {
    for (const index of retired) {
      // Already gone (a fresh store, or a start after the one that dropped it).
      await db[name as CollectionName].dropIndex(index).catch(() => undefined);
    }
  }
}
