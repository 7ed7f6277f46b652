import type { Filter, UpdateFilter } from "mongodb";
import type { CurrencyName } from "../domain/money.js";
import type { ReferralStatusName } from "../domain/referral-status.js";
import type { StatusChange } from "../domain/referral-transitions.js";
import type { GrantMove, PlannedGrant, PlannedLimit } from "../domain/reward-grant.js";
import {
  type RewardGrantKindName,
  type RewardGrantStatusName,
  roomFor,
} from "../domain/reward-ledger.js";
import type { EnvironmentName, Tenant } from "../domain/tenancy.js";
import type { Collections, JointWrite, StoreCollection, WriteTogether } from "./collection.js";
import type {
  GrantPlanHolder,
  OutboxEntryDoc,
  ReferralDoc,
  RewardAllowanceDoc,
  RewardGrantDoc,
  RewardSnapshotDoc,
  StoredReward,
} from "./documents.js";
import { isDuplicateKeyError } from "./errors.js";
import { type EntryList, outboxOf, removeEntries, withOutbox } from "./events.js";
import { findNewestFirst, type PageRequest } from "./paging.js";
import { type ReferralRewardWork, transitionWrite } from "./referrals.js";
import { ownedBy } from "./tenant.js";

/** One grant of the application by id. */
export function findRewardGrant(
  db: Collections,
  tenant: Tenant,
  id: string,
): Promise<RewardGrantDoc | null> {
  return db.rewardGrants.findOne({ ...ownedBy(tenant), _id: id });
}

/** Filters of ListRewardGrants. */
export interface RewardGrantFilter {
  readonly customerId?: string;
  readonly campaignId?: string;
  /** Only the grants of this referral (see {@link ReferralGrants}). */
  readonly referral?: ReferralGrants;
  readonly status?: RewardGrantStatusName;
  readonly kind?: RewardGrantKindName;
  readonly environment?: EnvironmentName;
}

/**
 * Where a referral's grants are: made for its referrer and its referee, at
 * or after its acceptance (earned then, clawed back later). So they are
 * found on the customers' index, with no index of their own.
 */
export interface ReferralGrants {
  readonly id: string;
  readonly customerIds: readonly string[];
  readonly since: Date;
}

/** A page of grants, newest first, and the number of all matches. */
export async function findRewardGrants(
  db: Collections,
  tenant: Tenant,
  filter: RewardGrantFilter,
  page: PageRequest,
): Promise<{ total: number; docs: RewardGrantDoc[] }> {
  const { referral, customerId, ...fields } = filter;
  const query: Filter<RewardGrantDoc> = { ...ownedBy(tenant) };
  for (const [field, value] of Object.entries(fields)) {
    if (value !== undefined) (query as Record<string, unknown>)[field] = value;
  }
  if (customerId !== undefined) query.customerId = customerId;
  if (referral) {
    if (customerId !== undefined && !referral.customerIds.includes(customerId)) {
      return { total: 0, docs: [] };
    }
    Object.assign(query, ofReferral(referral, customerId));
  }
  return findNewestFirst(db.rewardGrants, query, page);
}

/** Where a referral's grants are; none before it is accepted. */
export function referralGrants(referral: ReferralDoc): ReferralGrants | undefined {
  const accepted = referral.statusHistory.find((change) => change.toStatus === "accepted");
  if (!accepted) return undefined;
  return {
    id: referral._id,
    customerIds: [referral.referrerId, referral.refereeId],
    since: accepted.changedAt,
  };
}

function ofReferral(referral: ReferralGrants, customerId?: string): Filter<RewardGrantDoc> {
  return {
    referralId: referral.id,
    customerId: customerId ?? { $in: [...referral.customerIds] },
    createdAt: { $gte: referral.since },
  };
}

/** Every grant of a referral, clawbacks included, newest first. */
export function findGrantsOfReferral(
  db: Collections,
  tenant: Tenant,
  referral: ReferralGrants,
): Promise<RewardGrantDoc[]> {
  return db.rewardGrants
    .find({ ...ownedBy(tenant), ...ofReferral(referral) }, { sort: { createdAt: -1, _id: -1 } })
    .toArray();
}

/**
 * Stores a grant with the events it raises, or finds the one stored first:
 * grant ids are fixed before the insert (derived for earned grants and
 * clawbacks, planned for manual ones), so the primary key lets exactly one
 * insert win however many callers make the same grant.
 */
export async function insertRewardGrant(
  db: Collections,
  tenant: Tenant,
  doc: RewardGrantDoc,
  outbox: readonly OutboxEntryDoc[],
): Promise<{ doc: RewardGrantDoc; created: boolean }> {
  try {
    await db.rewardGrants.insertOne({ ...doc, ...ownedBy(tenant), ...outboxOf(outbox) });
    return { doc, created: true };
  } catch (error) {
    if (!isDuplicateKeyError(error)) throw error;
    const winner = await findRewardGrant(db, tenant, doc._id);
    if (!winner) throw error;
    return { doc: winner, created: false };
  }
}

/**
 * Applies a move with the events it raises, only if the grant is still in
 * the status the move starts from: of concurrent moves exactly one
 * applies. Null when another came first.
 */
export function moveRewardGrant(
  db: Collections,
  tenant: Tenant,
  current: RewardGrantDoc,
  move: GrantMove,
  outbox: readonly OutboxEntryDoc[],
): Promise<RewardGrantDoc | null> {
  const { change } = move;
  const update = withOutbox(
    {
      $set: { ...move.set, status: change.toStatus, updatedAt: change.changedAt },
      $push: { statusHistory: change },
    },
    outbox,
  );
  if (move.unset?.length) {
    update.$unset = Object.fromEntries(move.unset.map((field) => [field, ""]));
  }
  // A grant awaiting confirmation is moved once: by its confirmation or by
  // a reviewer, whichever comes first.
  const awaiting = current.awaitsConfirmation ? { awaitsConfirmation: true as const } : {};
  return db.rewardGrants.findOneAndUpdate(
    { ...ownedBy(tenant), _id: current._id, status: change.fromStatus, ...awaiting },
    update as UpdateFilter<RewardGrantDoc>,
    { returnDocument: "after" },
  );
}

/** Clears the flag a grant carries until the room it held is given back. */
export async function clearReleasePending(
  db: Collections,
  tenant: Tenant,
  grantId: string,
): Promise<void> {
  await db.rewardGrants.updateOne(
    { ...ownedBy(tenant), _id: grantId },
    { $unset: { releasePending: "" } },
  );
}

/** One currency, kind and status of a customer's grants: how many, and their amounts. */
export interface BalanceGroup {
  readonly currency: CurrencyName | null;
  readonly kind: RewardGrantKindName;
  readonly status: RewardGrantStatusName;
  readonly count: number;
  /** Minor units. */
  readonly amountMinor: number;
}

/**
 * A customer's grants by currency, kind and status. The embedded engine
 * answers from totals its triggers keep in each grant's own write (see
 * `counterDeclarations`), whatever the number of grants; MongoDB groups
 * the customer's grants on their index.
 */
export async function rewardBalanceOf(
  db: Collections,
  tenant: Tenant,
  customerId: string,
): Promise<BalanceGroup[]> {
  const groups = await db.rewardGrants
    .aggregate([
      { $match: { ...ownedBy(tenant), customerId } },
      {
        $group: {
          _id: { currency: "$value.currency", kind: "$kind", status: "$status" },
          count: { $sum: 1 },
          amountMinor: { $sum: "$amountMinor" },
        },
      },
    ])
    .toArray();
  return groups.map((group) => ({
    currency: group._id.currency ?? null,
    kind: group._id.kind,
    status: group._id.status,
    count: Number(group.count),
    amountMinor: Number(group.amountMinor),
  }));
}

/**
 * How many slots of a count limit are held: grants hold slots `<key>#1`
 * to `<key>#<limit>` (see `GrantRecord.limitSlot`), counted on their
 * unique index.
 */
export function countSlotsHeld(db: Collections, tenant: Tenant, key: string): Promise<number> {
  return db.rewardGrants.countDocuments({ ...ownedBy(tenant), ...slotsOf(key) });
}

/** The slots of a count limit that are held, when some were given back out of order. */
export async function findSlotsHeld(
  db: Collections,
  tenant: Tenant,
  key: string,
): Promise<Set<string>> {
  const holders = await db.rewardGrants
    .find({ ...ownedBy(tenant), ...slotsOf(key) }, { projection: { limitSlot: 1 } })
    .toArray();
  return new Set(holders.map((holder) => holder.limitSlot as string));
}

function slotsOf(key: string): Filter<RewardGrantDoc> {
  // "$" follows "#": the range holds exactly the key's slots.
  return { limitSlot: { $gte: `${key}#`, $lt: `${key}$` } };
}

// Each round of taking or giving back room either writes or loses to a
// writer that did, so a round is lost at most once per concurrent writer;
// the bound only stops a bug from spinning.
const maxRounds = 1000;

/**
 * Takes room for a grant under its amount limit: what the limit lets
 * through (see `roomFor`), recorded under the grant's id, so taking again
 * for the same grant (a retry, the sweep) returns what it holds and takes
 * nothing more. Zero when the limit is reached.
 */
export async function takeRoom(
  db: Collections,
  tenant: Tenant,
  limit: PlannedLimit,
  grant: Pick<RewardGrantDoc, "_id" | "customerId">,
  requested: number,
  now: Date,
): Promise<number> {
  for (let round = 0; round < maxRounds; round++) {
    const { take, write } = await roomToTake(db, tenant, limit, grant, requested, now);
    if (!write) return take;
    if (write.operation === "insertOne") {
      try {
        await db.rewardAllowances.insertOne(write.args[0] as RewardAllowanceDoc);
        return take;
      } catch (error) {
        if (!isDuplicateKeyError(error)) throw error;
        continue;
      }
    }
    const [filter, update] = write.args as [
      Filter<RewardAllowanceDoc>,
      UpdateFilter<RewardAllowanceDoc>,
    ];
    const { matchedCount } = await db.rewardAllowances.updateOne(filter, update);
    if (matchedCount === 1) return take;
  }
  throw new Error(`allowance ${limit.key} kept changing`);
}

/**
 * The room a grant would take under its amount limit as the allowance
 * reads now, and the write that takes it: an insert of the allowance, or
 * an update that applies only while no other took room since the read
 * (a `mustMatch` of the group it is written in). No write when the grant
 * holds room already or the limit is reached.
 */
export async function roomToTake(
  db: Collections,
  tenant: Tenant,
  limit: PlannedLimit,
  grant: Pick<RewardGrantDoc, "_id" | "customerId">,
  requested: number,
  now: Date,
): Promise<{ take: number; write?: JointWrite }> {
  const current = await db.rewardAllowances.findOne({ ...ownedBy(tenant), _id: limit.key });
  const held = current?.holds[grant._id];
  if (held !== undefined) return { take: held };
  const take = roomFor(limit.unit, limit.max, current?.used ?? 0, requested);
  if (take === 0) return { take };
  if (!current) {
    const allowance: RewardAllowanceDoc = {
      _id: limit.key,
      organizationId: tenant.organizationId,
      applicationId: tenant.applicationId,
      rewardId: limit.rewardId,
      customerId: grant.customerId,
      unit: limit.unit,
      window: limit.window,
      used: take,
      holds: { [grant._id]: take },
      version: 1,
      createdAt: now,
      updatedAt: now,
    };
    return {
      take,
      write: { collection: "rewardAllowances", operation: "insertOne", args: [allowance] },
    };
  }
  const update: UpdateFilter<RewardAllowanceDoc> = {
    $inc: { used: take, version: 1 },
    $set: { [`holds.${grant._id}`]: take, updatedAt: now },
  };
  return {
    take,
    write: {
      collection: "rewardAllowances",
      operation: "updateOne",
      args: [{ _id: current._id, version: current.version }, update],
      mustMatch: true,
    },
  };
}

/** A grant ready to be stored with its acceptance: its room decided, and the write that takes it. */
export interface PlacedGrant {
  readonly doc: RewardGrantDoc;
  /** The allowance's write, for a grant taking room under an amount limit. */
  readonly room?: JointWrite;
}

/**
 * Moves a referral as {@link transitionReferral} does, and stores the
 * grants it earns, in one atomic write: nothing to finish after a crash,
 * so no plan is written. `"referral changed"` when another change came
 * first; `"room changed"` when another grant took a slot or room since
 * the grants were placed (place them again). Nothing is written then.
 */
export async function transitionWithGrants(
  together: WriteTogether,
  tenant: Tenant,
  current: ReferralDoc,
  change: StatusChange & { fromStatus: ReferralStatusName },
  outbox: readonly OutboxEntryDoc[],
  grants: readonly PlacedGrant[],
  rewards: ReferralRewardWork = {},
  /** Writes made first in the same group (the checkpoint that makes the change); none must match. */
  alongside: readonly JointWrite[] = [],
): Promise<ReferralDoc | "referral changed" | "room changed"> {
  const writes: JointWrite[] = [
    ...alongside,
    transitionWrite(tenant, current, change, outbox, rewards),
  ];
  for (const { doc, room } of grants) {
    if (room) writes.push(room);
    writes.push({
      collection: "rewardGrants",
      operation: "insertOne",
      args: [{ ...doc, ...ownedBy(tenant) }],
    });
  }
  try {
    const outcome = await together(writes);
    if (outcome.results) return outcome.results[alongside.length] as ReferralDoc;
    return outcome.missed === alongside.length ? "referral changed" : "room changed";
  } catch (error) {
    // A slot another grant took since it was counted (grant ids are new with their acceptance).
    if (isDuplicateKeyError(error)) return "room changed";
    throw error;
  }
}

/** Gives back the room a grant holds, if it holds any; giving it back again does nothing. */
export async function giveRoomBack(
  db: Collections,
  tenant: Tenant,
  allowanceId: string,
  grantId: string,
  now: Date,
): Promise<void> {
  const allowances = db.rewardAllowances;
  for (let round = 0; round < maxRounds; round++) {
    const current = await allowances.findOne({ ...ownedBy(tenant), _id: allowanceId });
    const held = current?.holds[grantId];
    if (!current || held === undefined) return;
    const { matchedCount } = await allowances.updateOne(
      { _id: current._id, version: current.version },
      {
        $inc: { used: -held, version: 1 },
        $unset: { [`holds.${grantId}`]: "" },
        $set: { updatedAt: now },
      },
    );
    if (matchedCount === 1) return;
  }
  throw new Error(`allowance ${allowanceId} kept changing`);
}

/** A document's planned grants (see `GrantPlanHolder`). */
export const grantPlanList: EntryList = {
  list: "grantPlan",
  flag: "grantPlanPending",
  idPath: "grant._id",
};

/** Adds planned grants to a customer (manual grants), in one write. */
export async function planCustomerGrants(
  db: Collections,
  tenant: Tenant,
  customerId: string,
  planned: readonly PlannedGrant[],
): Promise<boolean> {
  const { matchedCount } = await db.customers.updateOne(
    { ...ownedBy(tenant), _id: customerId },
    { $set: { grantPlanPending: true }, $push: { grantPlan: { $each: [...planned] } } },
  );
  return matchedCount === 1;
}

/**
 * Removes made grants from a referral's plan. The plan is written whole by
 * its acceptance and only ever removed whole (by the accepting call, or by
 * the sweep: whichever comes second finds it gone).
 */
export function removeFromReferralPlan(
  db: Collections,
  tenant: Tenant,
  referralId: string,
  grantIds: readonly string[],
): Promise<void> {
  return removeEntries(db.referrals, tenant, referralId, grantPlanList, grantIds, {
    wholeListRead: true,
  });
}

/**
 * Removes made grants from a customer's plan, which gains entries from
 * concurrent manual grants: only those made are pulled.
 */
export function removeFromCustomerPlan(
  db: Collections,
  tenant: Tenant,
  customerId: string,
  grantIds: readonly string[],
): Promise<void> {
  return removeEntries(db.customers, tenant, customerId, grantPlanList, grantIds, {
    wholeListRead: false,
  });
}

/** Clears the flag a reversed referral carries until its grants are voided or clawed back. */
export async function clearReversalPending(
  db: Collections,
  tenant: Tenant,
  referralId: string,
): Promise<void> {
  await db.referrals.updateOne(
    { ...ownedBy(tenant), _id: referralId },
    { $unset: { reversalPending: "" } },
  );
}

/** What the reward sweep works through, a batch at a time, across tenants. */
export const sweepQueries = {
  /** Pending grants whose hold ended, with automatic approval. */
  dueApprovals: (db: Collections, now: Date, limit: number) =>
    db.rewardGrants.find({ approvalDueAt: { $lte: now } }, { limit }).toArray(),
  /** Approved grants past their expiry. */
  dueExpiries: (db: Collections, now: Date, limit: number) =>
    db.rewardGrants.find({ expiryDueAt: { $lte: now } }, { limit }).toArray(),
  /** Grants that stopped holding room, whose room a crash kept. */
  pendingReleases: (db: Collections, limit: number) =>
    db.rewardGrants.find({ releasePending: true }, { limit }).toArray(),
  /** Referrals and customers with planned grants. */
  planHolders: <T extends GrantPlanHolder>(collection: StoreCollection<T>, limit: number) =>
    collection.find({ grantPlanPending: true } as Filter<T>, { limit }).toArray(),
  /** Reversed referrals whose grants are not yet voided or clawed back. */
  pendingReversals: (db: Collections, limit: number) =>
    db.referrals.find({ reversalPending: true }, { limit }).toArray(),
  /** Referrals whose review deadline, which accepts them, has passed. */
  dueReviews: (db: Collections, now: Date, limit: number) =>
    db.referrals.find({ reviewDueAt: { $lte: now } }, { limit }).toArray(),
};

// Snapshots never change once stored, so what this process has stored or
// read is current for as long as it is kept (per store, as campaigns are).
const snapshotCaches = new WeakMap<Collections, Map<string, RewardSnapshotDoc>>();
const snapshotCacheSize = 10_000;

function snapshotCacheOf(db: Collections): Map<string, RewardSnapshotDoc> {
  let cache = snapshotCaches.get(db);
  if (!cache) {
    cache = new Map();
    snapshotCaches.set(db, cache);
  }
  return cache;
}

function remember(cache: Map<string, RewardSnapshotDoc>, doc: RewardSnapshotDoc): void {
  if (cache.size >= snapshotCacheSize) cache.clear();
  cache.set(doc._id, doc);
}

/**
 * Stores a reward snapshot unless it is stored already: its id is its
 * content's hash, so storing it twice (two processes, a retry) stores it
 * once. Resolves once it is durable, so what names it can be written next.
 */
export async function storeRewardSnapshot(
  db: Collections,
  tenant: Tenant,
  id: string,
  reward: StoredReward,
  now: Date,
): Promise<void> {
  const cache = snapshotCacheOf(db);
  if (cache.get(id)?.applicationId === tenant.applicationId) return;
  const doc: RewardSnapshotDoc = {
    _id: id,
    organizationId: tenant.organizationId,
    applicationId: tenant.applicationId,
    reward,
    createdAt: now,
  };
  try {
    await db.rewardSnapshots.insertOne(doc);
  } catch (error) {
    if (!isDuplicateKeyError(error)) throw error;
  }
  remember(cache, doc);
}

/** The application's reward snapshots by id (the plain rewards), from memory where it can. */
export async function findRewardSnapshots(
  db: Collections,
  tenant: Tenant,
  ids: readonly (string | null)[],
): Promise<Map<string, StoredReward>> {
  const cache = snapshotCacheOf(db);
  const found = new Map<string, StoredReward>();
  const missing: string[] = [];
  for (const id of new Set(ids)) {
    if (id === null) continue;
    const cached = cache.get(id);
    if (cached?.applicationId === tenant.applicationId) found.set(id, cached.reward);
    else if (!cached) missing.push(id);
  }
  if (missing.length > 0) {
    const docs = await db.rewardSnapshots
      .find({ ...ownedBy(tenant), _id: { $in: missing } })
      .toArray();
    for (const doc of docs) {
      remember(cache, doc);
      found.set(doc._id, doc.reward);
    }
  }
  return found;
}
