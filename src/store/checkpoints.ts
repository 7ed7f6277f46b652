import { newId } from "../domain/ids.js";
import type { CheckpointDoc, CustomerDoc, OutboxEntryDoc } from "./documents.js";
import type { Store } from "./store.js";

/** Stores a checkpoint of a customer. */
export async function insertCheckpoint(
  store: Store,
  customer: CustomerDoc,
  name: string,
  now: Date,
  eventsFor: (checkpoint: CheckpointDoc) => OutboxEntryDoc[],
): Promise<CheckpointDoc> {
  const doc: CheckpointDoc = {
    _id: newId("chk", now),
    organizationId: customer.organizationId,
    applicationId: customer.applicationId,
    environment: customer.environment,
    customerId: customer._id,
    externalUserId: customer.externalUserId,
    name,
    createdAt: now,
  };
  await store.checkpoints.insertOne({ ...doc, outbox: eventsFor(doc), outboxPending: true });
  return doc;
}
