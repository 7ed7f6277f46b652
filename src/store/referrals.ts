import type { Filter, UpdateFilter } from "mongodb";
import type { ReferralStatusName } from "../domain/referral-status.js";
import type { ReferralParties, RuledStatus, StatusChange } from "../domain/referral-transitions.js";
import type { EnvironmentName, Tenant } from "../domain/tenancy.js";
import type { Collections, JointWrite } from "./collection.js";
import type { CustomerDoc, OutboxEntryDoc, ReferralDoc } from "./documents.js";
import { isDuplicateKeyError } from "./errors.js";
import { outboxOf, withOutbox } from "./events.js";
import { compareNewestFirst, findNewestFirst, type PageRequest } from "./paging.js";
import { ownedBy } from "./tenant.js";

/** One referral of the application by id. */
export function findReferral(
  db: Collections,
  tenant: Tenant,
  id: string,
): Promise<ReferralDoc | null> {
  return db.referrals.findOne({ ...ownedBy(tenant), _id: id, deletedAt: null });
}

/** The referral of a referee in a campaign, if any. */
export function findReferralOfReferee(
  db: Collections,
  tenant: Tenant,
  parties: Omit<ReferralParties, "referrerId">,
): Promise<ReferralDoc | null> {
  return db.referrals.findOne({
    ...ownedBy(tenant),
    environment: parties.environment,
    campaignId: parties.campaignId,
    refereeId: parties.refereeId,
  });
}

/**
 * Inserts a referral with the events it raises, or returns the one a
 * concurrent call inserted first: the unique index on (application,
 * environment, campaign, referee) lets exactly one insert win.
 */
export async function insertReferral(
  db: Collections,
  tenant: Tenant,
  doc: ReferralDoc,
  outbox: readonly OutboxEntryDoc[],
): Promise<{ doc: ReferralDoc; created: boolean }> {
  try {
    await db.referrals.insertOne({ ...doc, ...ownedBy(tenant), ...outboxOf(outbox) });
    return { doc, created: true };
  } catch (error) {
    if (!isDuplicateKeyError(error)) throw error;
    const winner = await findReferralOfReferee(db, tenant, doc);
    if (!winner) throw error;
    return { doc: winner, created: false };
  }
}

/**
 * Moves a referral to another referrer with the status and frauds the rules
 * gave, appending `change` when the status moves, with the events it raises.
 * Applies only if the referral is still as `current` was read (same
 * referrer and status), so a concurrent change is never overwritten; null
 * when it was.
 */
export function reattributeReferral(
  db: Collections,
  tenant: Tenant,
  current: ReferralDoc,
  referrerId: string,
  ruled: RuledStatus,
  change: StatusChange,
  outbox: readonly OutboxEntryDoc[],
): Promise<ReferralDoc | null> {
  const now = change.changedAt;
  const fields = { referrerId, ...ruled, attributedAt: now, updatedAt: now };
  const statusMoves = ruled.status !== current.status;
  // A hold or a deadline the new attribution's verdicts do not give ends.
  const unset: Record<string, ""> = {};
  if (current.rewardsHeld && !ruled.rewardsHeld) unset.rewardsHeld = "";
  if (current.reviewDueAt && !ruled.reviewDueAt) unset.reviewDueAt = "";
  return db.referrals.findOneAndUpdate(
    unchangedSince(tenant, current),
    withOutbox(
      {
        $set: fields,
        ...(statusMoves ? { $push: { statusHistory: change } } : {}),
        ...(Object.keys(unset).length > 0 ? { $unset: unset } : {}),
      },
      outbox,
    ) as UpdateFilter<ReferralDoc>,
    { returnDocument: "after" },
  );
}

/**
 * The reward work a status change starts, written in the same atomic write:
 * an acceptance's planned grants, a reversal's flag.
 */
export type ReferralRewardWork = Pick<
  ReferralDoc,
  "grantPlan" | "grantPlanPending" | "reversalPending" | "awaitsConfirmation"
> & {
  /** The change is the review a held reward waited for: the referral's hold ends. */
  readonly releasesRewards?: true;
};

/**
 * Moves a referral to `change.toStatus` and records the change with the
 * events it raises, and the reward work it starts, only if it is still as
 * `current` was read (status and referrer): of concurrent changes exactly
 * one applies. Null when another came first.
 */
export function transitionReferral(
  db: Collections,
  tenant: Tenant,
  current: ReferralDoc,
  change: StatusChange & { fromStatus: ReferralStatusName },
  outbox: readonly OutboxEntryDoc[],
  rewards: ReferralRewardWork = {},
): Promise<ReferralDoc | null> {
  const [filter, update, options] = transitionWrite(tenant, current, change, outbox, rewards).args;
  return db.referrals.findOneAndUpdate(filter, update, options);
}

/**
 * {@link transitionReferral}'s write, to make with others (see
 * `WriteTogether`): the group stands only if the referral is still as
 * `current` was read.
 */
export function transitionWrite(
  tenant: Tenant,
  current: ReferralDoc,
  change: StatusChange & { fromStatus: ReferralStatusName },
  outbox: readonly OutboxEntryDoc[],
  rewards: ReferralRewardWork = {},
): JointWrite & {
  readonly args: readonly [
    Filter<ReferralDoc>,
    UpdateFilter<ReferralDoc>,
    { readonly returnDocument: "after" },
  ];
} {
  const { releasesRewards, ...work } = rewards;
  const fields = { ...work, status: change.toStatus, updatedAt: change.changedAt };
  const update = withOutbox({ $set: fields, $push: { statusHistory: change } }, outbox);
  const unset: Record<string, ""> = {};
  // Leaving acceptance ends a wait for confirmation: nothing is left to confirm.
  if (current.awaitsConfirmation && change.toStatus !== "accepted") {
    unset.awaitsConfirmation = "";
  }
  if (releasesRewards && current.rewardsHeld) unset.rewardsHeld = "";
  if (Object.keys(unset).length > 0) update.$unset = unset;
  return {
    collection: "referrals",
    operation: "findOneAndUpdate",
    args: [
      { ...unchangedSince(tenant, current), status: change.fromStatus },
      update as UpdateFilter<ReferralDoc>,
      { returnDocument: "after" },
    ],
    mustMatch: true,
  };
}

function unchangedSince(tenant: Tenant, current: ReferralDoc): Filter<ReferralDoc> {
  return {
    ...ownedBy(tenant),
    _id: current._id,
    referrerId: current.referrerId,
    status: current.status,
  };
}

/** The counts of the evidence a referral's policy reads (see `gatherEvidence`). */
export interface EvidenceCountsWanted {
  readonly referrerId: string;
  /** The referrer's hour and day. */
  readonly velocity: { readonly hour: Date; readonly day: Date } | null;
  /** The referrer's flagged and rejected referrals. */
  readonly history: boolean;
  /** The referrals from a network (its keyed hash) since a time. */
  readonly network: { readonly hash: string; readonly since: Date } | null;
}

/** What {@link countEvidence} counted; null for what was not wanted. */
export interface EvidenceCounts {
  readonly lastHour: number | null;
  readonly lastDay: number | null;
  readonly flagged: number | null;
  readonly rejected: number | null;
  readonly fromNetwork: number | null;
}

/**
 * The evidence's counts, each up to `atMost`. The referrer's flagged and
 * rejected are kept totals on the embedded engine (no query); the times'
 * counts are read in one statement there (bounded index counts); MongoDB
 * counts each.
 */
export async function countEvidence(
  db: Collections,
  tenant: Tenant,
  wanted: EvidenceCountsWanted,
  atMost: number,
): Promise<EvidenceCounts> {
  const owned = ownedBy(tenant);
  const { referrerId } = wanted;
  const timed: Filter<ReferralDoc>[] = [];
  if (wanted.velocity) {
    timed.push(
      { referrerId, attributedAt: { $gte: wanted.velocity.hour }, ...owned },
      { referrerId, attributedAt: { $gte: wanted.velocity.day }, ...owned },
    );
  }
  if (wanted.network) {
    timed.push({
      "evidence.refereeNetwork.networkHash": wanted.network.hash,
      attributedAt: { $gte: wanted.network.since },
      ...owned,
    });
  }
  const count = (filter: Filter<ReferralDoc>) =>
    db.referrals.countDocuments(filter, { limit: atMost });
  const history = (status: ReferralStatusName) =>
    wanted.history ? count({ ...owned, referrerId, status, deletedAt: null }) : null;
  const [counts, flagged, rejected] = await Promise.all([
    timed.length === 0
      ? []
      : db.referrals.countMany
        ? db.referrals.countMany(timed, atMost)
        : Promise.all(timed.map(count)),
    history("flagged"),
    history("rejected"),
  ]);
  const velocity = wanted.velocity !== null;
  return {
    lastHour: velocity ? (counts[0] ?? 0) : null,
    lastDay: velocity ? (counts[1] ?? 0) : null,
    flagged,
    rejected,
    fromNetwork: wanted.network ? (counts[velocity ? 2 : 0] ?? 0) : null,
  };
}

/**
 * Whether a customer other than `refereeId`, with the same canonical email,
 * was already referred in the environment (the duplicate_referee_email rule).
 */
export async function isMailboxAlreadyReferred(
  db: Collections,
  tenant: Tenant,
  environment: EnvironmentName,
  emailCanonical: string,
  refereeId: string,
): Promise<boolean> {
  const sameMailbox = await db.customers
    .find(
      { ...ownedBy(tenant), environment, emailCanonical, _id: { $ne: refereeId } },
      { projection: { _id: 1 } },
    )
    .toArray();
  if (sameMailbox.length === 0) return false;
  const referred = await db.referrals.countDocuments({
    ...ownedBy(tenant),
    environment,
    refereeId: { $in: sameMailbox.map((customer) => customer._id) },
    deletedAt: null,
  });
  return referred > 0;
}

/**
 * A referee's referrals a reward-trigger checkpoint may act on: the pending
 * ones it may accept, and those awaiting a trusted checkpoint's
 * confirmation (see `conversionByCheckpoint`).
 */
export function findConvertibleReferralsOfReferee(
  db: Collections,
  tenant: Tenant,
  customer: CustomerDoc,
): Promise<ReferralDoc[]> {
  return db.referrals
    .find({
      refereeId: customer._id,
      ...ownedBy(tenant),
      environment: customer.environment,
      $or: [{ status: "pending" }, { awaitsConfirmation: true }],
      deletedAt: null,
    })
    .toArray();
}

/**
 * Ends a referral's reward hold (a fraud review's decision), with the
 * events the decision raises; null when the referral is gone.
 */
export function endRewardsHold(
  db: Collections,
  tenant: Tenant,
  referralId: string,
  at: Date,
  outbox: readonly OutboxEntryDoc[],
): Promise<ReferralDoc | null> {
  return db.referrals.findOneAndUpdate(
    { ...ownedBy(tenant), _id: referralId },
    { ...withOutbox({ $set: { updatedAt: at } }, outbox), $unset: { rewardsHeld: "" } },
    { returnDocument: "after" },
  );
}

/** Ends a referral's review deadline, once the sweep has dealt with it. */
export async function clearReviewDue(
  db: Collections,
  tenant: Tenant,
  referralId: string,
): Promise<void> {
  await db.referrals.updateOne(
    { ...ownedBy(tenant), _id: referralId },
    { $unset: { reviewDueAt: "" } },
  );
}

/** Ends a referral's wait for confirmation, once its grants are confirmed. */
export async function clearAwaitsConfirmation(
  db: Collections,
  tenant: Tenant,
  referralId: string,
): Promise<void> {
  await db.referrals.updateOne(
    { ...ownedBy(tenant), _id: referralId },
    { $unset: { awaitsConfirmation: "" } },
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
  db: Collections,
  tenant: Tenant,
  filter: ReferralFilter,
  page: PageRequest,
): Promise<{ total: number; docs: ReferralDoc[] }> {
  const query: Filter<ReferralDoc> = { ...ownedBy(tenant), deletedAt: null };
  if (filter.status) query.status = filter.status;
  if (filter.campaignId !== undefined) query.campaignId = filter.campaignId;
  if (filter.referrerId !== undefined) query.referrerId = filter.referrerId;
  if (filter.refereeId !== undefined) query.refereeId = filter.refereeId;
  if (filter.environment) query.environment = filter.environment;
  return findNewestFirst(db.referrals, query, page);
}

/**
 * The referrals waiting for a fraud review, the most recently attributed
 * first, at most `atMost`: the flagged ones (by the status index) and
 * those whose rewards are held (by their sparse index), in the campaign
 * or environment when given.
 */
export async function findReferralsForReview(
  db: Collections,
  tenant: Tenant,
  filter: { readonly campaignId?: string; readonly environment?: EnvironmentName },
  atMost: number,
): Promise<ReferralDoc[]> {
  const scope: Filter<ReferralDoc> = { ...ownedBy(tenant), deletedAt: null };
  if (filter.campaignId !== undefined) scope.campaignId = filter.campaignId;
  if (filter.environment) scope.environment = filter.environment;
  const newest = { sort: { createdAt: -1, _id: -1 }, limit: atMost } as const;
  const [flagged, held] = await Promise.all([
    db.referrals.find({ ...scope, status: "flagged" }, newest).toArray(),
    db.referrals
      .find({ ...scope, rewardsHeld: true, status: { $in: ["pending", "accepted"] } }, newest)
      .toArray(),
  ]);
  const byId = new Map([...flagged, ...held].map((referral) => [referral._id, referral]));
  return [...byId.values()]
    .sort((a, b) => b.attributedAt.getTime() - a.attributedAt.getTime())
    .slice(0, atMost);
}

/**
 * A campaign's referrals attributed in [from, to), in pages of `pageSize`
 * oldest first, for a backtest: each page resumes after the last one, so
 * a long history is read in bounded memory.
 */
export async function* referralsOfCampaignBetween(
  db: Collections,
  tenant: Tenant,
  campaignId: string,
  from: Date | null,
  to: Date | null,
  pageSize: number,
): AsyncGenerator<ReferralDoc[]> {
  let after: { createdAt: Date; _id: string } | null = null;
  for (;;) {
    const query: Filter<ReferralDoc> = { ...ownedBy(tenant), deletedAt: null, campaignId };
    if (after) {
      query.$or = [
        { createdAt: { $gt: after.createdAt } },
        { createdAt: after.createdAt, _id: { $gt: after._id } },
      ];
    }
    const page = await db.referrals
      .find(query, { sort: { createdAt: 1, _id: 1 }, limit: pageSize })
      .toArray();
    if (page.length === 0) return;
    const last = page[page.length - 1] as ReferralDoc;
    after = { createdAt: last.createdAt, _id: last._id };
    const inRange = page.filter(
      (referral) =>
        (from === null || referral.attributedAt >= from) &&
        (to === null || referral.attributedAt < to),
    );
    if (inRange.length > 0) yield inRange;
    if (page.length < pageSize) return;
  }
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
 * The referral facts of a page of customers: the referee query for the
 * whole page (not one per customer), and two counts per customer. The
 * counts are kept totals on the embedded engine (see `counterDeclarations`)
 * and index counts on MongoDB, so a referrer with many referrals costs what
 * one with a few does; they are exact, as every write keeps them.
 */
export async function referralFactsOf(
  db: Collections,
  tenant: Tenant,
  customerIds: readonly string[],
): Promise<Map<string, ReferralFacts>> {
  const facts = new Map<string, ReferralFacts>();
  if (customerIds.length === 0) return facts;
  const owned = ownedBy(tenant);
  const counted = customerIds.map(async (referrerId) => {
    const visited = await db.referrals.countDocuments({ ...owned, referrerId, deletedAt: null });
    // Most customers have referred nobody: then none of theirs is accepted either.
    const converted =
      visited === 0
        ? 0
        : await db.referrals.countDocuments({
            ...owned,
            referrerId,
            status: "accepted",
            deletedAt: null,
          });
    facts.set(referrerId, { visited, converted });
  });
  const [asReferee] = await Promise.all([
    // Sorted here, not by the store: a referee has a referral per campaign
    // at most, and SQLite's sort of even no rows cost 19 µs of the 22 the
    // query took (the index orders by date, not by date then id).
    db.referrals
      .find({ ...owned, refereeId: { $in: [...customerIds] }, deletedAt: null })
      .toArray(),
    ...counted,
  ]);
  asReferee.sort(compareNewestFirst);
  for (const referral of asReferee) {
    const entry = facts.get(referral.refereeId);
    // Newest first: the first referral seen for a referee is the one that counts.
    if (entry && !entry.referredBy) entry.referredBy = referral;
  }
  return facts;
}
