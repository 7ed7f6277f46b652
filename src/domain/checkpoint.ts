import { newId } from "./ids.js";
import type { EnvironmentName, Tenant } from "./tenancy.js";

/** A checkpoint: a named event of a customer. The store keeps it as `CheckpointDoc`. */
export interface CheckpointRecord {
  /** Public id, prefix `chk_`. */
  _id: string;
  organizationId: string;
  applicationId: string;
  environment: EnvironmentName;
  customerId: string;
  /** The customer's external user id, as sent. */
  externalUserId: string;
  name: string;
  createdAt: Date;
}

/** A new checkpoint of a customer, not yet stored. */
export function newCheckpoint(
  tenant: Tenant,
  customer: {
    readonly _id: string;
    readonly environment: EnvironmentName;
    readonly externalUserId: string;
  },
  name: string,
  now: Date,
): CheckpointRecord {
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
