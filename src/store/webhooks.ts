import type { Tenant } from "../domain/tenancy.js";
import type { Collections } from "./collection.js";
import type { WebhookDoc, WebhookHealthDoc } from "./documents.js";
import { ownedBy } from "./tenant.js";

/** The application's webhook endpoints, newest first. */
export function findWebhooks(db: Collections, tenant: Tenant): Promise<WebhookDoc[]> {
  return db.webhooks
    .find({ ...ownedBy(tenant), deletedAt: null }, { sort: { createdAt: -1, _id: -1 } })
    .toArray();
}

/** One endpoint of the application. */
export function findWebhook(
  db: Collections,
  tenant: Tenant,
  id: string,
): Promise<WebhookDoc | null> {
  return db.webhooks.findOne({ ...ownedBy(tenant), _id: id, deletedAt: null });
}

/** One endpoint by id, for the delivery workers; deleted ones included. */
export function findWebhookById(db: Collections, id: string): Promise<WebhookDoc | null> {
  return db.webhooks.findOne({ _id: id });
}

/** The enabled endpoints of an application, which the relay matches events against. */
export function findEnabledWebhooks(db: Collections, applicationId: string): Promise<WebhookDoc[]> {
  return db.webhooks.find({ applicationId, enabled: true, deletedAt: null }).toArray();
}

/** Stores a new endpoint. */
export async function insertWebhook(
  db: Collections,
  tenant: Tenant,
  doc: WebhookDoc,
): Promise<void> {
  await db.webhooks.insertOne({
    ...doc,
    ...ownedBy(tenant),
    organizationId: tenant.organizationId,
  });
}

/** Sets fields of an endpoint that still exists; null when it does not. */
export function updateWebhook(
  db: Collections,
  tenant: Tenant,
  current: WebhookDoc,
  fields: Partial<WebhookDoc>,
  now: Date,
): Promise<WebhookDoc | null> {
  return db.webhooks.findOneAndUpdate(
    { ...ownedBy(tenant), _id: current._id, deletedAt: null },
    { $set: { ...fields, updatedAt: now } },
    { returnDocument: "after" },
  );
}

/** A healthy endpoint: no failures, not disabled. */
export function healthyWebhook(): WebhookHealthDoc {
  return {
    lastSuccessAt: null,
    lastFailureAt: null,
    consecutiveFailures: 0,
    failingSince: null,
    disabledAt: null,
    disabledReason: null,
  };
}

/** Records a successful attempt: the failure streak ends. */
export async function recordWebhookSuccess(db: Collections, id: string, at: Date): Promise<void> {
  await db.webhooks.updateOne(
    { _id: id },
    {
      $set: {
        "health.lastSuccessAt": at,
        "health.consecutiveFailures": 0,
        "health.failingSince": null,
      },
    },
  );
}

/**
 * Records a failed attempt and returns the endpoint after it: the streak
 * grows, and its start is kept (set only when the streak begins).
 */
export async function recordWebhookFailure(
  db: Collections,
  id: string,
  at: Date,
): Promise<WebhookDoc | null> {
  await db.webhooks.updateOne(
    { _id: id, "health.failingSince": null },
    { $set: { "health.failingSince": at } },
  );
  return db.webhooks.findOneAndUpdate(
    { _id: id },
    { $set: { "health.lastFailureAt": at }, $inc: { "health.consecutiveFailures": 1 } },
    { returnDocument: "after" },
  );
}

/** Disables an endpoint that has been failing too long, saying why. */
export async function disableFailingWebhook(
  db: Collections,
  id: string,
  at: Date,
  reason: string,
): Promise<void> {
  await db.webhooks.updateOne(
    { _id: id, enabled: true },
    {
      $set: {
        enabled: false,
        "health.disabledAt": at,
        "health.disabledReason": reason,
        updatedAt: at,
      },
    },
  );
}
