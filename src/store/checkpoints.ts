import { newId } from "../domain/ids.js";
import type { CheckpointDoc, CustomerDoc } from "./documents.js";
import type { Store } from "./store.js";

/** Stores a checkpoint of a customer. */
export async function insertCheckpoint(
  store: Store,
  customer: CustomerDoc,
  name: string,
  now: Date,
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
  await store.checkpoints.insertOne(doc);
  return doc;
}
