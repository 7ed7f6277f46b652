import type { UpdateResult } from "mongodb";
import type { Tenant } from "../domain/tenancy.js";
import type { Collections, JointWrite, StoreCollection, WriteTogether } from "./collection.js";
import {
  attemptedDelivery,
  type FirstAttempt,
  keptDeliveryOf,
  storeAttempted,
} from "./deliveries.js";
import type {
  CheckpointDoc,
  CustomerDoc,
  EventDoc,
  KeptDeliveryDoc,
  OutboxEntryDoc,
  ReferralDoc,
  RewardGrantDoc,
} from "./documents.js";
import { isDuplicateKeyError } from "./errors.js";
import { packPayload, unpackPayload } from "./event-payload.js";
import type { PageRequest } from "./paging.js";
import { ownedBy } from "./tenant.js";

/** A document that may hold events in its outbox. */
export interface OutboxHolder {
  _id: string;
  organizationId: string;
  applicationId: string;
  outbox?: OutboxEntryDoc[];
  outboxPending?: true;
}

/**
 * The fields that put events in a new document's outbox; none when there
 * are no events (nobody listens), so the relay has nothing to visit.
 */
export function outboxOf(outbox: readonly OutboxEntryDoc[]): {
  outbox?: OutboxEntryDoc[];
  outboxPending?: true;
} {
  return outbox.length > 0 ? { outbox: [...outbox], outboxPending: true } : {};
}

/**
 * An update's operators, with the events appended to the document's
 * outbox when there are any: `$set` gains the pending flag and `$push` the
 * entries (an empty operator is an error on MongoDB, so none is added).
 */
export function withOutbox(
  update: { $set: Record<string, unknown>; $push?: Record<string, unknown> },
  outbox: readonly OutboxEntryDoc[],
): Record<string, unknown> {
  if (outbox.length === 0) return update;
  return {
    ...update,
    $set: { ...update.$set, outboxPending: true },
    $push: { ...update.$push, outbox: { $each: [...outbox] } },
  };
}

/**
 * The collections whose documents hold entries until they are dealt with:
 * events in an outbox (see {@link OutboxHolder}), grants in a plan.
 */
export type HolderCollection =
  | StoreCollection<CustomerDoc>
  | StoreCollection<ReferralDoc>
  | StoreCollection<CheckpointDoc>
  | StoreCollection<RewardGrantDoc>;

/** A document of a {@link HolderCollection}. */
export type HolderDoc = CustomerDoc | ReferralDoc | CheckpointDoc | RewardGrantDoc;

/**
 * Documents with events waiting, a few at a time, but for those `passed`
 * (the relay's, whose first attempts are still out: flagged until then).
 * Those are read past by id alone: read whole on every pass, a few hundred
 * of them cost a busy relay more than the documents it had to relay.
 */
export async function findOutboxHolders(
  collection: HolderCollection,
  limit: number,
  passed: Pick<ReadonlySet<string>, "has" | "size"> = new Set(),
): Promise<HolderDoc[]> {
  const pending = { outboxPending: true as const };
  if (passed.size === 0) return collection.find(pending, { limit }).toArray();
  const flagged = await collection
    .find(pending, { projection: { _id: 1 }, limit: limit + passed.size })
    .toArray();
  const ids = flagged.map((doc) => doc._id).filter((id) => !passed.has(id));
  if (ids.length === 0) return [];
  return collection.find({ ...pending, _id: { $in: ids.slice(0, limit) } }).toArray();
}

/**
 * Removes relayed events from their document's outbox and clears the
 * pending flag once it is empty. Only the relay removes entries, and others
 * only append, so an outbox still as long as when it was read holds
 * exactly the relayed entries (see {@link removeEntries}).
 */
export function removeFromOutbox(
  collection: HolderCollection,
  holder: OutboxHolder,
  eventIds: readonly string[],
): Promise<void> {
  return removeEntries(collection, holder, holder._id, outboxList, eventIds, {
    wholeListRead: true,
  });
}

/**
 * A list of entries a document carries until they are dealt with, and the
 * flag set while it holds any: the sparse index on the flag is how the
 * documents with entries are found.
 */
export interface EntryList {
  readonly list: string;
  readonly flag: string;
  /** The path of an entry's id inside the entry. */
  readonly idPath: string;
}

/** A document's webhook events, until the relay moves them (see `OutboxHolder`). */
export const outboxList: EntryList = { list: "outbox", flag: "outboxPending", idPath: "id" };

/**
 * Removes entries from a document's list (the document matched by its
 * tenant as well as its id) and clears its flag once the list is empty. With `wholeListRead`, the caller read the list and removes all
 * of what it read, and nobody else removes entries: then a list still of
 * that length holds exactly them, and one write empties it. Otherwise (or
 * when an entry was appended meanwhile) they are pulled, and the flag is
 * cleared only if nothing is left, so a new entry is never stranded.
 */
export async function removeEntries(
  collection: HolderCollection,
  tenant: Tenant,
  holderId: string,
  entries: EntryList,
  ids: readonly string[],
  options: { wholeListRead: boolean },
): Promise<void> {
  if (options.wholeListRead) {
    const [filter, update] = emptying(tenant, holderId, entries, ids.length);
    const emptied = await collection.updateOne(filter as never, update as never);
    if (emptied.matchedCount === 1) return;
  }
  await pullEntries(collection, tenant, holderId, entries, ids);
}

/**
 * The update that empties a list its caller read whole, and clears its
 * flag: it matches only while the list still holds the `count` entries
 * read (see {@link removeEntries}).
 */
function emptying(
  tenant: Tenant,
  holderId: string,
  entries: EntryList,
  count: number,
): [Record<string, unknown>, Record<string, unknown>] {
  return [
    { ...ownedBy(tenant), _id: holderId, [entries.list]: { $size: count } },
    { $unset: { [entries.list]: "", [entries.flag]: "" } },
  ];
}

/** Removes entries by id, then the flag if nothing is left (see {@link removeEntries}). */
async function pullEntries(
  collection: HolderCollection,
  tenant: Tenant,
  holderId: string,
  entries: EntryList,
  ids: readonly string[],
): Promise<void> {
  const { list, flag, idPath } = entries;
  const holder = { ...ownedBy(tenant), _id: holderId };
  await collection.updateOne(holder, { $pull: { [list]: { [idPath]: { $in: [...ids] } } } });
  await collection.updateOne({ ...holder, [list]: { $size: 0 } }, { $unset: { [flag]: "" } });
}

/** The collections whose documents hold an outbox, by name (see {@link HolderCollection}). */
export type HolderName = "customers" | "referrals" | "checkpoints" | "rewardGrants";

/** What the relay did with one document's events (see {@link storeRelayed}). */
export interface Relayed {
  readonly collection: HolderName;
  readonly holder: OutboxHolder;
  /** The ids of the outbox entries relayed: all of the outbox as it was read. */
  readonly entryIds: readonly string[];
  /** Its events not stored yet, their payloads as JSON. */
  readonly events: readonly EventDoc[];
  /** Deliveries attempted before they were stored. */
  readonly attempts: readonly FirstAttempt[];
  /** Whether every delivery was attempted or stored, so the outbox is emptied. */
  readonly done: boolean;
}

/**
 * Stores what the relay did with a document's events whose deliveries it
 * attempted before storing anything: the events not stored yet, each
 * keeping its first delivery that succeeded at once (see
 * `EventDoc.delivered`), the other deliveries with their attempt, and the
 * outbox emptied once every delivery is attempted or stored (`done`). One
 * write where the engine makes writes together (`together`), so a
 * delivery that succeeds costs no write of its own; a crash before it
 * leaves the events in the outbox, to be relayed and sent again. Resolves
 * with whether the outbox may still hold entries: not all were dealt with,
 * or some were appended meanwhile.
 */
export async function storeRelayed(
  db: Collections,
  together: WriteTogether | undefined,
  relayed: Relayed,
  now: Date,
): Promise<boolean> {
  const { holder, entryIds, events, attempts } = relayed;
  const collection = db[relayed.collection] as HolderCollection;
  if (together) {
    // Each event keeps the first of its deliveries that succeeded.
    const keptAttempts = new Set<FirstAttempt>();
    const writes: JointWrite[] = [
      ...events.map((event): JointWrite => {
        let delivered: KeptDeliveryDoc | undefined;
        for (const attempt of attempts) {
          if (attempt.delivery.eventId !== event._id) continue;
          delivered = keptDeliveryOf(attempt.delivery, attempt.outcome);
          if (delivered) {
            keptAttempts.add(attempt);
            break;
          }
        }
        return {
          collection: "events",
          operation: "insertOne",
          args: [{ ...packed(event), ...(delivered ? { delivered } : {}) }],
        };
      }),
      ...attempts
        .filter((attempt) => !keptAttempts.has(attempt))
        .map(
          ({ delivery, outcome }): JointWrite => ({
            collection: "deliveries",
            operation: "insertOne",
            args: [attemptedDelivery(delivery, outcome, now)],
          }),
        ),
    ];
    if (relayed.done) {
      writes.push({
        collection: relayed.collection,
        operation: "updateOne",
        args: emptying(holder, holder._id, outboxList, entryIds.length),
      });
    }
    try {
      const { results } = await together(writes);
      const emptied = results?.at(-1) as UpdateResult | undefined;
      if (!relayed.done) return true;
      if (emptied?.matchedCount === 1) return false;
      // An event appended meanwhile stays: only the relayed ones are removed.
      await pullEntries(collection, holder, holder._id, outboxList, entryIds);
      return true;
    } catch (error) {
      // Stored in part already (relayed again): each is stored once, below.
      if (!isDuplicateKeyError(error)) throw error;
    }
  }
  for (const event of events) await storeEventOnce(db, event);
  await Promise.all(
    attempts.map(({ delivery, outcome }) => storeAttempted(db, delivery, outcome, now)),
  );
  if (relayed.done) await removeFromOutbox(collection, holder, entryIds);
  return true;
}

/**
 * Stores a relayed event, or returns the one stored by an earlier relay of
 * it (a crash after storing and before clearing the outbox): the first
 * payload wins, so every delivery of an event carries the same bytes.
 */
export async function storeEvent(db: Collections, event: EventDoc): Promise<EventDoc> {
  return (await storeEventOnce(db, event)).event;
}

/**
 * {@link storeEvent}, and whether this call stored it (`first`): an event
 * stored only now has no delivery stored yet.
 */
export async function storeEventOnce(
  db: Collections,
  event: EventDoc,
): Promise<{ event: EventDoc; first: boolean }> {
  try {
    await db.events.insertOne(packed(event));
    return { event, first: true };
  } catch (error) {
    if (!isDuplicateKeyError(error)) throw error;
    return { event: (await findEvent(db, event._id)) ?? event, first: false };
  }
}

/** An event as it is stored, its payload packed (see `packPayload`). */
function packed(event: EventDoc): EventDoc {
  return { ...event, payload: packPayload(event.payload, event) };
}

/** One event by id, its payload as JSON (see `packPayload` for how it is stored). */
export async function findEvent(db: Collections, id: string): Promise<EventDoc | null> {
  const event = await db.events.findOne({ _id: id });
  return event && { ...event, payload: unpackPayload(event.payload, event) };
}

/**
 * A page of the stored events whose payload holds a customer's data, newest
 * first, their payloads as JSON, and whether more follow (ExportCustomer).
 */
export async function findEventsAboutCustomer(
  db: Collections,
  tenant: Tenant,
  customerId: string,
  page: PageRequest,
): Promise<{ docs: EventDoc[]; more: boolean }> {
  const docs = await db.events
    .find(
      { customerId, applicationId: tenant.applicationId },
      { sort: { createdAt: -1, _id: -1 }, skip: page.offset, limit: page.limit + 1 },
    )
    .toArray();
  return {
    docs: docs
      .slice(0, page.limit)
      .map((event) => ({ ...event, payload: unpackPayload(event.payload, event) })),
    more: docs.length > page.limit,
  };
}
