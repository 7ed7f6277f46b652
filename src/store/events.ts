import type { Tenant } from "../domain/tenancy.js";
import type { Collections, StoreCollection } from "./collection.js";
import type {
  CheckpointDoc,
  CustomerDoc,
  EventDoc,
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

/** Documents with events waiting, a few at a time. */
export function findOutboxHolders(
  collection: HolderCollection,
  limit: number,
): Promise<HolderDoc[]> {
  return collection.find({ outboxPending: true }, { limit }).toArray();
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
  const { list, flag, idPath } = entries;
  const holder = { ...ownedBy(tenant), _id: holderId };
  if (options.wholeListRead) {
    const emptied = await collection.updateOne(
      { ...holder, [list]: { $size: ids.length } },
      { $unset: { [list]: "", [flag]: "" } },
    );
    if (emptied.matchedCount === 1) return;
  }
  await collection.updateOne(holder, { $pull: { [list]: { [idPath]: { $in: [...ids] } } } });
  await collection.updateOne({ ...holder, [list]: { $size: 0 } }, { $unset: { [flag]: "" } });
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
    await db.events.insertOne({ ...event, payload: packPayload(event.payload, event.type) });
    return { event, first: true };
  } catch (error) {
    if (!isDuplicateKeyError(error)) throw error;
    return { event: (await findEvent(db, event._id)) ?? event, first: false };
  }
}

/** One event by id, its payload as JSON (see `packPayload` for how it is stored). */
export async function findEvent(db: Collections, id: string): Promise<EventDoc | null> {
  const event = await db.events.findOne({ _id: id });
  return event && { ...event, payload: unpackPayload(event.payload, event.type) };
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
      .map((event) => ({ ...event, payload: unpackPayload(event.payload, event.type) })),
    more: docs.length > page.limit,
  };
}
