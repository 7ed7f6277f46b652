import type {
  Collection,
  CreateIndexesOptions,
  DeleteResult,
  Document,
  Filter,
  FindOneAndUpdateOptions,
  FindOptions,
  IndexSpecification,
  InsertManyResult,
  InsertOneResult,
  OptionalUnlessRequiredId,
  UpdateFilter,
  UpdateOptions,
  UpdateResult,
  WithId,
} from "mongodb";
import type {
  ApiKeyDoc,
  ApplicationDoc,
  CampaignDoc,
  CheckpointDoc,
  ClickDoc,
  CustomerDoc,
  DeliveryDoc,
  EventDoc,
  IdempotencyKeyDoc,
  OrganizationDoc,
  ReferralDoc,
  RewardAllowanceDoc,
  RewardGrantDoc,
  RewardSnapshotDoc,
  WebhookDoc,
} from "./documents.js";

/**
 * The part of the driver's `Collection` the repositories use. Repositories are
 * written against this type; the real driver satisfies it as it is (checked
 * below at compile time) and the embedded engine implements it.
 */
export interface StoreCollection<T extends Document> {
  insertOne(doc: OptionalUnlessRequiredId<T>): Promise<InsertOneResult<T>>;
  /** Ordered: stops at the first failure, keeping the documents before it (seeding, imports). */
  insertMany(docs: readonly OptionalUnlessRequiredId<T>[]): Promise<InsertManyResult<T>>;
  findOne(filter: Filter<T>, options?: FindOptions): Promise<WithId<T> | null>;
  find(filter: Filter<T>, options?: FindOptions): { toArray(): Promise<WithId<T>[]> };
  /** How many match, counted up to `limit` when given (a bound on what the count reads). */
  countDocuments(filter?: Filter<T>, options?: { limit?: number }): Promise<number>;
  /**
   * The embedded engine's several counts in one statement: how many match
   * each filter, each counted up to `limit` (index-only where an index
   * serves the filter). Absent on MongoDB, where a count each is as cheap.
   */
  countMany?(filters: readonly Filter<T>[], limit: number): Promise<number[]>;
  updateOne(
    filter: Filter<T>,
    update: UpdateFilter<T>,
    options?: UpdateOptions,
  ): Promise<UpdateResult<T>>;
  updateMany(filter: Filter<T>, update: UpdateFilter<T>): Promise<UpdateResult<T>>;
  /** Always called with `returnDocument: "after"`. */
  findOneAndUpdate(
    filter: Filter<T>,
    update: UpdateFilter<T>,
    options: FindOneAndUpdateOptions,
  ): Promise<WithId<T> | null>;
  deleteOne(filter: Filter<T>): Promise<DeleteResult>;
  /** Every match, in one write (retention removes expired documents a bounded batch at a time). */
  deleteMany(filter: Filter<T>): Promise<DeleteResult>;
  createIndex(spec: IndexSpecification, options?: CreateIndexesOptions): Promise<string>;
  /** Removes an index by its MongoDB name (`field_1_other_-1`); rejects when there is none. */
  dropIndex(name: string): Promise<unknown>;
  /**
   * One shape only: `[{ $match: filter }, { $group: { _id: { name: "$field", ... },
   * count: { $sum: 1 }, total: { $sum: "$field" } } }]`, each group's counts
   * and sums (see `CounterDeclaration.sums`).
   */
  aggregate(pipeline: Document[]): { toArray(): Promise<Document[]> };
  /**
   * The embedded engine's committed version of the collection (see
   * `SqliteCollection.version`): what is kept from it stays exact while the
   * version stays, in every process reading the file. Undefined on MongoDB,
   * where other instances write unseen.
   */
  readonly version?: number;
}

// The driver's Collection must stay usable as a StoreCollection.
type Assignable<T extends Document> = Collection<T> extends StoreCollection<T> ? true : never;
export const driverCollectionFits: Assignable<{ _id: string }> = true;

/**
 * Every collection, unscoped. Only the store's own modules and the system
 * paths (`store.system`: authentication, provisioning, admin, the webhook
 * relay and workers) hold it; services get a tenant's repositories.
 */
export interface Collections {
  readonly organizations: StoreCollection<OrganizationDoc>;
  readonly applications: StoreCollection<ApplicationDoc>;
  readonly apiKeys: StoreCollection<ApiKeyDoc>;
  readonly customers: StoreCollection<CustomerDoc>;
  readonly referrals: StoreCollection<ReferralDoc>;
  readonly checkpoints: StoreCollection<CheckpointDoc>;
  readonly rewardGrants: StoreCollection<RewardGrantDoc>;
  readonly rewardAllowances: StoreCollection<RewardAllowanceDoc>;
  readonly rewardSnapshots: StoreCollection<RewardSnapshotDoc>;
  readonly campaigns: StoreCollection<CampaignDoc>;
  readonly webhooks: StoreCollection<WebhookDoc>;
  readonly events: StoreCollection<EventDoc>;
  readonly deliveries: StoreCollection<DeliveryDoc>;
  readonly idempotencyKeys: StoreCollection<IdempotencyKeyDoc>;
  readonly clicks: StoreCollection<ClickDoc>;
}

/** The writes a group made together may hold (see {@link WriteTogether}). */
export type JointOperation = "insertOne" | "updateOne" | "findOneAndUpdate";

/** One write of a group made together: a collection write, as its call would be made. */
export interface JointWrite {
  readonly collection: keyof Collections;
  readonly operation: JointOperation;
  readonly args: readonly unknown[];
  /** The group stands only if this update matched a document: else none of it is written. */
  readonly mustMatch?: true;
}

/**
 * What a group made together gave: each write's result as its own call
 * would return it, or the first update marked `mustMatch` that matched
 * nothing (and then nothing was written).
 */
export type JointOutcome =
  | { readonly results: readonly unknown[] }
  | { readonly missed: number; readonly results?: undefined };

/**
 * Writes documents of any collections atomically: every one committed, or
 * none (a unique index one of them violates refuses the group with the
 * duplicate-key error). The embedded engine's (one savepoint in its
 * writer); absent on MongoDB, where it would take a multi-document
 * transaction.
 */
export type WriteTogether = (writes: readonly JointWrite[]) => Promise<JointOutcome>;
