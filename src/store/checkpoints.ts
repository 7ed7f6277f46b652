import type { Tenant } from "../domain/tenancy.js";
import type { Collections, JointWrite } from "./collection.js";
import type { CheckpointDoc, CustomerDoc, OutboxEntryDoc } from "./documents.js";
import { outboxOf } from "./events.js";
import type { PageRequest } from "./paging.js";
import { ownedBy } from "./tenant.js";

/** Stores a checkpoint with the events it raises, in one write. */
export async function insertCheckpoint(
  db: Collections,
  tenant: Tenant,
  doc: CheckpointDoc,
  outbox: readonly OutboxEntryDoc[],
): Promise<CheckpointDoc> {
  const [stored] = checkpointWrite(tenant, doc, outbox).args;
  await db.checkpoints.insertOne(stored);
  return doc;
}

/** {@link insertCheckpoint}'s write, to make with others (see `WriteTogether`). */
export function checkpointWrite(
  tenant: Tenant,
  doc: CheckpointDoc,
  outbox: readonly OutboxEntryDoc[],
): JointWrite & { readonly args: readonly [CheckpointDoc] } {
  return {
    collection: "checkpoints",
    operation: "insertOne",
    args: [{ ...doc, ...ownedBy(tenant), ...outboxOf(outbox) }],
  };
}

/**
 * A page of a customer's checkpoints, newest first, and whether more
 * follow (ExportCustomer).
 */
export async function findCheckpointsOfCustomer(
  db: Collections,
  tenant: Tenant,
  customer: Pick<CustomerDoc, "_id" | "environment">,
  page: PageRequest,
): Promise<{ docs: CheckpointDoc[]; more: boolean }> {
  const docs = await db.checkpoints
    .find(
      { ...ownedBy(tenant), environment: customer.environment, customerId: customer._id },
      { sort: { createdAt: -1, _id: -1 }, skip: page.offset, limit: page.limit + 1 },
    )
    .toArray();
  return { docs: docs.slice(0, page.limit), more: docs.length > page.limit };
}
