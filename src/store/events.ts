import type { Collections, StoreCollection } from "./collection.js";
import type { EventDoc, OutboxEntryDoc } from "./documents.js";
import { isDuplicateKeyError } from "./errors.js";

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

/** Documents with events waiting, a few at a time. */
export function findOutboxHolders<T extends OutboxHolder>(
  collection: StoreCollection<T>,
  limit: number,
): Promise<T[]> {
  return collection.find({ outboxPending: true } as never, { limit }).toArray() as Promise<T[]>;
}

/**
 * Removes relayed events from their document's outbox and clears the
 * pending flag once it is empty. Entries are only ever appended, so an
 * outbox still as long as when it was read holds exactly the relayed
 * entries: then one write empties it. Otherwise (an event was pushed
 * meanwhile) the relayed ones are pulled and the flag stays, so the new
 * event is never stranded.
 */
export async function removeFromOutbox<T extends OutboxHolder>(
  collection: StoreCollection<T>,
  holderId: string,
  eventIds: readonly string[],
): Promise<void> {
  const emptied = await collection.updateOne(
    { _id: holderId, outbox: { $size: eventIds.length } } as never,
    { $unset: { outbox: "", outboxPending: "" } } as never,
  );
  if (emptied.matchedCount === 1) return;
  await collection.updateOne(
    { _id: holderId } as never,
    {
      $pull: { outbox: { id: { $in: [...eventIds] } } },
    } as never,
  );
  await collection.updateOne(
    { _id: holderId, outbox: { $size: 0 } } as never,
    {
      $unset: { outboxPending: "" },
    } as never,
  );
}

/**
 * Stores a relayed event, or returns the one stored by an earlier relay of
 * it (a crash after storing and before clearing the outbox): the first
 * payload wins, so every delivery of an event carries the same bytes.
 */
export async function storeEvent(db: Collections, event: EventDoc): Promise<EventDoc> {
  try {
    await db.events.insertOne(event);
    return event;
  } catch (error) {
    if (!isDuplicateKeyError(error)) throw error;
    return (await db.events.findOne({ _id: event._id })) ?? event;
  }
}

/** One event by id. */
export function findEvent(db: Collections, id: string): Promise<EventDoc | null> {
  return db.events.findOne({ _id: id });
}
