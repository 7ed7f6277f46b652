import { newId } from "../domain/ids.js";
import type { Tenant } from "../domain/tenancy.js";
import type { Collections } from "./collection.js";
import type { CheckpointDoc, CustomerDoc, OutboxEntryDoc } from "./documents.js";
import { outboxOf } from "./events.js";
import { ownedBy } from "./tenant.js";

/** A new checkpoint of a customer, not yet stored. */
export function newCheckpoint(
  tenant: Tenant,
  customer: CustomerDoc,
  name: string,
  now: Date,
): CheckpointDoc {
  return {
    _id: newId("chk", now),
    organizationId: tenant.organizationId,
    applicationId: tenant.applicationId,
    environment: customer.environment,
    customerId: customer._id,
    externalUserId: customer.externalUserId,
    name,
    createdAt: now,
  };
}

/** Stores a checkpoint with the events it raises, in one write. */
export async function insertCheckpoint(
  db: Collections,
  tenant: Tenant,
  doc: CheckpointDoc,
  outbox: readonly OutboxEntryDoc[],
): Promise<CheckpointDoc> {
  await db.checkpoints.insertOne({ ...doc, ...ownedBy(tenant), ...outboxOf(outbox) });
  return doc;
}
