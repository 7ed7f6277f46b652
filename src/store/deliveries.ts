import type { Filter } from "mongodb";
import { newId } from "../domain/ids.js";
import type { Tenant } from "../domain/tenancy.js";
import {
  type CatchUpPace,
  catchUpBatch,
  catchUpPace,
  planCatchUp,
} from "../domain/webhook-delivery.js";
import type { Collections, WriteTogether } from "./collection.js";
import type {
  AttemptDoc,
  DeliveryDoc,
  DeliveryStatusName,
  EventDoc,
  KeptDeliveryDoc,
  WebhookDoc,
} from "./documents.js";
import { isDuplicateKeyError } from "./errors.js";
import { compareNewestFirst, findNewestFirst, type PageRequest } from "./paging.js";
import { ownedBy } from "./tenant.js";

/** The lease value of a delivery nobody holds. */
export const unleased = new Date(0);

/** A lease taken with the delivery as it is queued (see {@link queueDelivery}). */
export interface QueuedLease {
  readonly owner: string;
  readonly until: Date;
}

/**
 * An event's delivery to an endpoint, due now, as it is stored: queued by
 * {@link queueDelivery}, or attempted first and stored with that attempt by
 * {@link storeAttempted}.
 */
export function newDelivery(
  event: EventDoc,
  webhook: WebhookDoc,
  now: Date,
  lease?: QueuedLease,
): DeliveryDoc {
  return {
    _id: newId("whd", now),
    organizationId: event.organizationId,
    applicationId: event.applicationId,
    webhookId: webhook._id,
    eventId: event._id,
    eventType: event.type,
    status: "pending",
    attempts: [],
    scheduleAttempts: 0,
    nextAttemptAt: now,
    leaseUntil: lease?.until ?? unleased,
    leaseOwner: lease?.owner ?? null,
    createdAt: now,
    updatedAt: now,
  };
}

/**
 * Queues an event for an endpoint, due now, and returns the delivery.
 * Relaying the same event again queues nothing (null): the unique (event,
 * endpoint) index keeps one delivery. With `lease`, the delivery is queued
 * already claimed by that worker, so the worker that queued it attempts it
 * without claiming it first; should that worker die, the lease expires and
 * any worker claims it.
 */
export async function queueDelivery(
  db: Collections,
  event: EventDoc,
  webhook: WebhookDoc,
  now: Date,
  lease?: QueuedLease,
): Promise<DeliveryDoc | null> {
  const delivery = newDelivery(event, webhook, now, lease);
  try {
    await db.deliveries.insertOne(delivery);
    return delivery;
  } catch (error) {
    if (!isDuplicateKeyError(error)) throw error;
    return null;
  }
}

/**
 * Stores a delivery whose first attempt was made before it was stored (its
 * event still waits in its document's outbox, so a crash before this
 * loses nothing: the event is relayed and sent again): one insert, holding
 * the attempt and where the delivery stands after it, or `skipped`
 * (`outcome` null: its endpoint was gone). A delivery of the event to the
 * endpoint stored already (queued by a relay after a crash) is left as it is.
 */
export async function storeAttempted(
  db: Collections,
  delivery: DeliveryDoc,
  outcome: AttemptOutcome | null,
  now: Date,
): Promise<void> {
  try {
    await db.deliveries.insertOne(attemptedDelivery(delivery, outcome, now));
  } catch (error) {
    if (!isDuplicateKeyError(error)) throw error;
  }
}

/**
 * A delivery attempted before it was stored, and how the attempt went
 * (`outcome` null: skipped, its endpoint gone), for the relay to store.
 */
export interface FirstAttempt {
  readonly delivery: DeliveryDoc;
  readonly outcome: AttemptOutcome | null;
  /**
   * The event as the attempt sent it, where that is not the event handed
   * over: scrubbed of a customer erased meanwhile. Stored so.
   */
  readonly sent?: EventDoc;
}

/**
 * A delivery attempted before it was stored, as it is stored: with its
 * attempt and where it stands after it, or `skipped` (`outcome` null).
 */
export function attemptedDelivery(
  delivery: DeliveryDoc,
  outcome: AttemptOutcome | null,
  now: Date,
): DeliveryDoc {
  return {
    ...delivery,
    status: outcome?.status ?? "skipped",
    nextAttemptAt: outcome ? outcome.nextAttemptAt : null,
    scheduleAttempts: outcome ? 1 : 0,
    attempts: outcome ? [outcome.attempt] : [],
    leaseUntil: unleased,
    leaseOwner: null,
    updatedAt: outcome?.attempt.attemptedAt ?? now,
  };
}

/**
 * What its event keeps of a delivery attempted before it was stored, when
 * that first attempt succeeded (see `EventDoc.delivered`); undefined when
 * it did not, and the delivery is stored on its own.
 */
export function keptDeliveryOf(
  delivery: DeliveryDoc,
  outcome: AttemptOutcome | null,
): KeptDeliveryDoc | undefined {
  const statusCode = outcome?.attempt.statusCode;
  if (outcome?.status !== "succeeded" || statusCode === null || statusCode === undefined) {
    return undefined;
  }
  return {
    webhookId: delivery.webhookId,
    at: outcome.attempt.attemptedAt,
    statusCode,
    durationMs: outcome.attempt.durationMs,
  };
}

/** An event that keeps its delivery to one endpoint (see `EventDoc.delivered`). */
type EventKeepingDelivery = EventDoc & { delivered: KeptDeliveryDoc };

/**
 * The id of the delivery an event keeps: the event's own, under the
 * deliveries' prefix, so it is found from its id without an index.
 */
export function keptDeliveryId(eventId: string): string {
  return `${deliveryIdPrefix}${eventId.slice(eventIdPrefix.length)}`;
}

const eventIdPrefix = "evt_";
const deliveryIdPrefix = "whd_";

/** The event that would keep a delivery of this id, if it is one (see {@link keptDeliveryId}). */
function eventKeepingId(deliveryId: string): string | undefined {
  return deliveryId.startsWith(deliveryIdPrefix)
    ? `${eventIdPrefix}${deliveryId.slice(deliveryIdPrefix.length)}`
    : undefined;
}

/**
 * The delivery an event keeps, as every delivery reads (succeeded at its
 * one attempt), created when its event was: an event id begins with that
 * time, so the event's id orders such deliveries as their times do.
 */
export function deliveryKeptIn(event: EventKeepingDelivery): DeliveryDoc {
  const { delivered } = event;
  return {
    _id: keptDeliveryId(event._id),
    organizationId: event.organizationId,
    applicationId: event.applicationId,
    webhookId: delivered.webhookId,
    eventId: event._id,
    eventType: event.type,
    status: "succeeded",
    attempts: [
      {
        attemptedAt: delivered.at,
        statusCode: delivered.statusCode,
        durationMs: delivered.durationMs,
        error: null,
      },
    ],
    scheduleAttempts: 1,
    nextAttemptAt: null,
    leaseUntil: unleased,
    leaseOwner: null,
    createdAt: event.createdAt,
    updatedAt: delivered.at,
  };
}

/**
 * Claims one delivery due at `now` for a worker until `lease.until`: a
 * single conditional update, so two workers (in one process or many) never
 * hold the same attempt. A worker that dies leaves the lease to expire, and
 * the delivery is claimed again. Leases are in the lease clock's time
 * (`Store.leaseClock`), which every instance shares.
 */
export function claimDueDelivery(
  db: Collections,
  now: Date,
  owner: string,
  lease: { readonly now: Date; readonly until: Date },
): Promise<DeliveryDoc | null> {
  return db.deliveries.findOneAndUpdate(
    { status: "pending", nextAttemptAt: { $lte: now }, leaseUntil: { $lte: lease.now } },
    { $set: { leaseUntil: lease.until, leaseOwner: owner } },
    { returnDocument: "after" },
  );
}

/** How an attempt ends a delivery's turn: done, or due again at `nextAttemptAt`. */
export interface AttemptOutcome {
  readonly attempt: AttemptDoc;
  readonly status: DeliveryStatusName;
  readonly nextAttemptAt: Date | null;
}

/** Records an attempt and releases the lease, if this worker still holds it. */
export async function recordAttempt(
  db: Collections,
  delivery: DeliveryDoc,
  owner: string,
  outcome: AttemptOutcome,
): Promise<void> {
  await db.deliveries.updateOne(
    { _id: delivery._id, leaseOwner: owner },
    {
      $set: {
        status: outcome.status,
        nextAttemptAt: outcome.nextAttemptAt,
        scheduleAttempts: delivery.scheduleAttempts + 1,
        leaseUntil: unleased,
        leaseOwner: null,
        updatedAt: outcome.attempt.attemptedAt,
      },
      $push: { attempts: outcome.attempt },
    },
  );
}

/**
 * Hands a claimed delivery back unattempted (the service is stopping), if
 * this worker still holds it: it is due again at once, for any worker.
 */
export async function releaseDelivery(
  db: Collections,
  delivery: DeliveryDoc,
  owner: string,
  now: Date,
): Promise<void> {
  await db.deliveries.updateOne(
    { _id: delivery._id, leaseOwner: owner },
    { $set: { leaseUntil: unleased, leaseOwner: null, updatedAt: now } },
  );
}

/** Marks a delivery skipped (its endpoint is gone or disabled) and releases it. */
export async function skipDelivery(
  db: Collections,
  delivery: DeliveryDoc,
  owner: string,
  now: Date,
): Promise<void> {
  await db.deliveries.updateOne(
    { _id: delivery._id, leaseOwner: owner },
    {
      $set: {
        status: "skipped",
        nextAttemptAt: null,
        leaseUntil: unleased,
        leaseOwner: null,
        updatedAt: now,
      },
    },
  );
}

/**
 * Brings an endpoint's deliveries waiting for a retry forward, its
 * receiver having answered again: oldest event first, each given a due time on
 * the catch-up pace (see {@link planCatchUp}), up to one batch ahead; the
 * next step, once these are sent, gives out more. Returns how many it
 * brought forward. Only the due time changes: a delivery is still claimed
 * under a lease, one at a time, and its attempt is the next on its
 * schedule. Each update is conditional on the due time read and on nobody
 * holding the delivery, so an attempt recorded meanwhile, or another
 * worker's step, is never overwritten.
 */
export async function bringForwardWaitingDeliveries(
  db: Collections,
  webhookId: string,
  now: Date,
  pace: CatchUpPace = catchUpPace,
): Promise<number> {
  const waiting = await db.deliveries
    .find(
      {
        webhookId,
        status: "pending",
        nextAttemptAt: { $gt: now },
        leaseUntil: { $lte: now },
        // Not those already brought forward and sent: they failed again.
        $or: [{ broughtForwardTo: null }, { broughtForwardTo: { $gt: now } }],
      },
      { sort: { createdAt: 1, _id: 1 }, limit: catchUpBatch(pace) },
    )
    .toArray();
  // The relay queues the events of one pass concurrently, so deliveries are
  // queued in about, not exactly, the order of their events; an event id
  // begins with the time of its change.
  waiting.sort((a, b) => (a.eventId < b.eventId ? -1 : a.eventId > b.eventId ? 1 : 0));
  const slots = planCatchUp(waiting, now, pace);
  const moved = await Promise.all(
    waiting.map(async (delivery, index) => {
      const slot = slots[index];
      if (!slot) return 0;
      const result = await db.deliveries.updateOne(
        {
          _id: delivery._id,
          status: "pending",
          nextAttemptAt: delivery.nextAttemptAt,
          leaseUntil: { $lte: now },
        },
        { $set: { nextAttemptAt: slot, broughtForwardTo: slot, updatedAt: now } },
      );
      return result.modifiedCount;
    }),
  );
  return moved.reduce((sum, count) => sum + count, 0);
}

/**
 * Releases every lease still held: where one dispatcher serves the store
 * (the embedded engine's primary), a lease held as it starts is a previous
 * process's, killed before it could release it (a drain releases its own),
 * and its deliveries would otherwise wait for the lease to expire.
 */
export async function releaseLeasesOfEarlierRuns(db: Collections, now: Date): Promise<number> {
  const { modifiedCount } = await db.deliveries.updateMany(
    // Walked through the due-deliveries index (every pending one has a due
    // time): once a start, never worth an index of its own on every write.
    { status: "pending", nextAttemptAt: { $gte: new Date(0) }, leaseUntil: { $gt: unleased } },
    { $set: { leaseUntil: unleased, leaseOwner: null, updatedAt: now } },
  );
  return modifiedCount;
}

/** When the earliest pending delivery is due, if any; workers sleep until then. */
export async function nextDueAt(db: Collections): Promise<Date | null> {
  const [first] = await db.deliveries
    .find({ status: "pending" }, { sort: { nextAttemptAt: 1 }, limit: 1 })
    .toArray();
  return first?.nextAttemptAt ?? null;
}

/** The queue as metrics show it: pending deliveries, and when the most overdue one was due. */
export async function deliveryQueueOf(
  db: Collections,
): Promise<{ pending: number; oldestDueAt: Date | null }> {
  const [pending, oldestDueAt] = await Promise.all([
    db.deliveries.countDocuments({ status: "pending" }),
    nextDueAt(db),
  ]);
  return { pending, oldestDueAt };
}

/**
 * An endpoint's deliveries, newest first: those stored on their own and
 * those kept in their events (succeeded at their first attempt, see
 * `EventDoc.delivered`), merged. Each source is read in the list's order
 * up to the end of the page, on its own index.
 */
export async function findDeliveries(
  db: Collections,
  tenant: Tenant,
  webhookId: string,
  status: DeliveryStatusName | undefined,
  page: PageRequest,
): Promise<{ total: number; docs: DeliveryDoc[] }> {
  const query: Filter<DeliveryDoc> = { ...ownedBy(tenant), webhookId };
  if (status) query.status = status;
  if (status !== undefined && status !== "succeeded") {
    return findNewestFirst(db.deliveries, query, page);
  }
  const keptQuery: Filter<EventDoc> = { ...ownedBy(tenant), "delivered.webhookId": webhookId };
  const kept = await db.events.countDocuments(keptQuery);
  if (kept === 0) return findNewestFirst(db.deliveries, query, page);
  const end = page.offset + page.limit;
  const [stored, storedRead, keptRead] = await Promise.all([
    db.deliveries.countDocuments(query),
    db.deliveries.find(query, { sort: { createdAt: -1, _id: -1 }, limit: end }).toArray(),
    db.events.find(keptQuery, { sort: { _id: -1 }, limit: end }).toArray(),
  ]);
  const merged = [...storedRead, ...(keptRead as EventKeepingDelivery[]).map(deliveryKeptIn)].sort(
    compareNewestFirst,
  );
  return { total: stored + kept, docs: merged.slice(page.offset, end) };
}

/** One delivery of an endpoint, stored on its own or kept in its event. */
export async function findDelivery(
  db: Collections,
  tenant: Tenant,
  webhookId: string,
  id: string,
): Promise<DeliveryDoc | null> {
  const stored = await db.deliveries.findOne({ ...ownedBy(tenant), webhookId, _id: id });
  if (stored) return stored;
  const event = await findEventKeeping(db, tenant, webhookId, id);
  return event && deliveryKeptIn(event);
}

/** The event keeping the endpoint's delivery of this id, if one does. */
async function findEventKeeping(
  db: Collections,
  tenant: Tenant,
  webhookId: string,
  deliveryId: string,
): Promise<EventKeepingDelivery | null> {
  const eventId = eventKeepingId(deliveryId);
  if (eventId === undefined) return null;
  const event = await db.events.findOne({
    ...ownedBy(tenant),
    _id: eventId,
    "delivered.webhookId": webhookId,
  });
  return event as EventKeepingDelivery | null;
}

/**
 * Makes a delivery due now with a fresh schedule, keeping its attempts; a
 * catch-up may bring it forward again. One kept in its event is stored on
 * its own from now on, under the same id: its document is written and the
 * event's copy removed together (`together`, the embedded engine's; on
 * MongoDB no event keeps a delivery, as only the embedded engine attempts
 * a delivery before storing it).
 */
export async function requeueDelivery(
  db: Collections,
  tenant: Tenant,
  delivery: DeliveryDoc,
  now: Date,
  together?: WriteTogether,
): Promise<DeliveryDoc | null> {
  const requeueStored = () =>
    db.deliveries.findOneAndUpdate(
      { ...ownedBy(tenant), _id: delivery._id },
      {
        $set: {
          status: "pending",
          nextAttemptAt: now,
          scheduleAttempts: 0,
          broughtForwardTo: null,
          updatedAt: now,
        },
      },
      { returnDocument: "after" },
    );
  const requeued = await requeueStored();
  if (requeued || !together) return requeued;
  const event = await findEventKeeping(db, tenant, delivery.webhookId, delivery._id);
  // Stored on its own meanwhile, by a requeue at the same time: requeued there.
  if (!event) return requeueStored();
  const stored: DeliveryDoc = {
    ...deliveryKeptIn(event),
    status: "pending",
    nextAttemptAt: now,
    scheduleAttempts: 0,
    updatedAt: now,
  };
  // The event's copy is removed first: of two requeues at once, the second
  // finds it gone and requeues the document the first stored.
  const outcome = await together([
    {
      collection: "events",
      operation: "updateOne",
      args: [
        { _id: event._id, "delivered.webhookId": delivery.webhookId },
        { $unset: { delivered: "" } },
      ],
      mustMatch: true,
    },
    { collection: "deliveries", operation: "insertOne", args: [stored] },
  ]);
  return outcome.results === undefined ? requeueStored() : stored;
}
