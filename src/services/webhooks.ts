import { lookup } from "node:dns/promises";
import { isIP } from "node:net";
import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import {
  WebhookDeliverySchema,
  WebhookDeliveryStatusSchema,
  WebhookEndpointSchema,
} from "../../gen/referral/v1/resources_pb.js";
import type { WebhooksService } from "../../gen/referral/v1/webhooks_pb.js";
import { messageFromDoc } from "../contract/records.js";
import { newId } from "../domain/ids.js";
import { limits } from "../domain/limits.js";
import type { Clock, EnvironmentName } from "../domain/tenancy.js";
import {
  hostOf,
  isPublicAddress,
  privateAddressRefused,
  webhookUrlProblem,
} from "../domain/webhook-delivery.js";
import { isWebhookEventType, webhookEventTypes } from "../domain/webhook-events.js";
import { generateWebhookSecret } from "../domain/webhook-secret.js";
import type { DeliveryStatusName, WebhookDoc } from "../store/documents.js";
import type { SecretBox } from "../store/secret-box.js";
import type { TenantStore } from "../store/tenant-store.js";
import { healthyWebhook } from "../store/webhooks.js";
import { callerOf } from "./context.js";
import { invalidArgument, notFound } from "./errors.js";
import { enumWord, environmentName, optionalText, pageOf, requiredText } from "./validate.js";

/** What WebhooksService needs. */
export interface WebhooksServiceDeps {
  readonly clock: Clock;
  readonly secretBox: SecretBox;
  /** WEBHOOK_ALLOW_PRIVATE: skip the address checks. */
  readonly allowPrivateWebhooks: boolean;
  /** Wakes the delivery workers (a redelivery is due now). */
  readonly notifyWebhooks: () => void;
}

/** How long a rotated-out secret keeps signing. */
const previousSecretGraceMs = 24 * 3_600_000;

const editableFields = ["url", "description", "eventTypes", "enabled"] as const;
type EditableField = (typeof editableFields)[number];

/** Creates the WebhooksService implementation. */
export function createWebhooksService(
  deps: WebhooksServiceDeps,
): ServiceImpl<typeof WebhooksService> {
  const { clock, secretBox } = deps;
  const endpointMessage = (doc: WebhookDoc) => messageFromDoc(WebhookEndpointSchema, doc);

  async function existing(store: TenantStore, id: string): Promise<WebhookDoc> {
    const doc = await store.webhooks.find(requiredText(id, "id"));
    if (!doc) throw notFound(`webhook ${id}`);
    return doc;
  }

  async function checkedUrl(value: string, environment: EnvironmentName | null): Promise<string> {
    const url = requiredText(value, "url", limits.url).trim();
    const problem = webhookUrlProblem(url, {
      requireHttps: environment !== "test",
      allowPrivate: deps.allowPrivateWebhooks,
    });
    if (problem) throw invalidArgument("url", problem);
    if (!deps.allowPrivateWebhooks) await checkResolvesPublic(url);
    return url;
  }

  return {
    async listWebhooks(_request, context) {
      const docs = await callerOf(context).store.webhooks.findMany();
      return { webhooks: docs.map(endpointMessage) };
    },

    async createWebhook(request, context) {
      const { store, tenant } = callerOf(context);
      const environment = environmentName(request.environment) ?? null;
      const url = await checkedUrl(request.url, environment);
      const now = clock();
      const secret = generateWebhookSecret();
      const doc: WebhookDoc = {
        _id: newId("whk", now),
        organizationId: tenant.organizationId,
        applicationId: tenant.applicationId,
        url,
        description: optionalText(request.description, "description", limits.note) ?? null,
        eventTypes: checkedEventTypes(request.eventTypes),
        enabled: request.enabled ?? true,
        environment,
        secretSealed: secretBox.seal(secret),
        previousSecretSealed: null,
        previousSecretExpiresAt: null,
        health: healthyWebhook(),
        createdAt: now,
        updatedAt: now,
        deletedAt: null,
      };
      await store.webhooks.insert(doc);
      return { webhook: endpointMessage(doc), secret };
    },

    async updateWebhook(request, context) {
      const { store } = callerOf(context);
      const current = await existing(store, request.id);
      const fields = fieldsToUpdate(request.updateMask, {
        url: request.url !== undefined,
        description: request.description !== undefined,
        eventTypes: request.eventTypes.length > 0,
        enabled: request.enabled !== undefined,
      });
      const now = clock();
      const changes: Partial<WebhookDoc> & Record<string, unknown> = {};
      if (fields.has("url")) changes.url = await checkedUrl(request.url ?? "", current.environment);
      if (fields.has("description")) {
        const description = request.description ?? "";
        changes.description =
          description === ""
            ? null
            : (optionalText(description, "description", limits.note) ?? null);
      }
      if (fields.has("eventTypes")) changes.eventTypes = checkedEventTypes(request.eventTypes);
      if (fields.has("enabled")) {
        changes.enabled = request.enabled ?? false;
        if (changes.enabled) {
          // Resuming starts a fresh record: the failure streak that disabled it is over.
          changes["health.disabledAt"] = null;
          changes["health.disabledReason"] = null;
          changes["health.failingSince"] = null;
          changes["health.consecutiveFailures"] = 0;
        }
      }
      const updated = await store.webhooks.update(current, changes, now);
      if (!updated) throw notFound(`webhook ${request.id}`);
      return { webhook: endpointMessage(updated) };
    },

    async deleteWebhook(request, context) {
      const { store } = callerOf(context);
      const current = await existing(store, request.id);
      const now = clock();
      const deleted = await store.webhooks.update(current, { deletedAt: now, enabled: false }, now);
      if (!deleted) throw notFound(`webhook ${request.id}`);
      return { webhook: endpointMessage(current) };
    },

    async rotateWebhookSecret(request, context) {
      const { store } = callerOf(context);
      const current = await existing(store, request.id);
      const now = clock();
      const secret = generateWebhookSecret();
      const rotated = await store.webhooks.update(
        current,
        {
          secretSealed: secretBox.seal(secret),
          previousSecretSealed: current.secretSealed,
          previousSecretExpiresAt: new Date(now.getTime() + previousSecretGraceMs),
        },
        now,
      );
      if (!rotated) throw notFound(`webhook ${request.id}`);
      return { webhook: endpointMessage(rotated), secret };
    },

    async listWebhookDeliveries(request, context) {
      const { store } = callerOf(context);
      const webhook = await existing(store, request.id);
      const page = pageOf(request.limit, request.offset);
      const status = enumWord<DeliveryStatusName>(
        WebhookDeliveryStatusSchema,
        request.status,
        "status",
      );
      const { total, docs } = await store.deliveries.findMany(webhook._id, status, page);
      return {
        total,
        ...page,
        data: docs.map((doc) => messageFromDoc(WebhookDeliverySchema, doc)),
      };
    },

    async redeliverWebhookEvent(request, context) {
      const { store } = callerOf(context);
      const webhook = await existing(store, request.id);
      const deliveryId = requiredText(request.deliveryId, "deliveryId");
      const delivery = await store.deliveries.find(webhook._id, deliveryId);
      if (!delivery) throw notFound(`delivery ${deliveryId}`);
      const queued = await store.deliveries.requeue(delivery, clock());
      if (!queued) throw notFound(`delivery ${deliveryId}`);
      deps.notifyWebhooks();
      return { delivery: messageFromDoc(WebhookDeliverySchema, queued) };
    },
  };
}

/** Event types: each from the catalogue, duplicates dropped; empty means every type. */
function checkedEventTypes(types: readonly string[]): string[] {
  types.forEach((type, index) => {
    if (!isWebhookEventType(type)) {
      throw invalidArgument(
        `eventTypes[${index}]`,
        `is not an event type; one of: ${webhookEventTypes.join(", ")}`,
      );
    }
  });
  return [...new Set(types)];
}

/** The fields an update changes: the mask's, or else those the request sets. */
function fieldsToUpdate(
  mask: readonly string[],
  set: Record<EditableField, boolean>,
): Set<EditableField> {
  const camel = (name: string) =>
    name.replace(/_([a-z])/g, (_m, letter: string) => letter.toUpperCase());
  const fields = new Set<EditableField>();
  if (mask.length > 0) {
    for (const name of mask) {
      const field = camel(name) as EditableField;
      if (!editableFields.includes(field)) {
        throw invalidArgument(
          "updateMask",
          `names no editable field: ${name} (one of: ${editableFields.join(", ")})`,
        );
      }
      fields.add(field);
    }
    return fields;
  }
  for (const field of editableFields) if (set[field]) fields.add(field);
  if (fields.size === 0) {
    throw invalidArgument(
      "updateMask",
      `nothing to update: set one of ${editableFields.join(", ")}`,
    );
  }
  return fields;
}

/** Refuses a host name whose addresses include a private one (checked again at delivery). */
async function checkResolvesPublic(url: string): Promise<void> {
  const host = hostOf(new URL(url));
  if (isIP(host) !== 0) return;
  let addresses: { address: string }[];
  try {
    addresses = await lookup(host, { all: true });
  } catch (error) {
    const { code } = error as NodeJS.ErrnoException;
    if (code === "ENOTFOUND" || code === "ENODATA") {
      throw invalidArgument("url", `host ${host} does not resolve`);
    }
    // The resolver failed, not the host: UNAVAILABLE, which an idempotent
    // retry runs again instead of replaying for a day.
    throw new ConnectError(
      `host ${host} could not be resolved now (${code ?? "no answer"}): retry later`,
      Code.Unavailable,
    );
  }
  if (addresses.some((entry) => !isPublicAddress(entry.address))) {
    throw invalidArgument("url", privateAddressRefused);
  }
}
