import type { WebhookDoc } from "./documents.js";
import type { Store } from "./store.js";
import { ownedBy, type TenantScope } from "./tenant.js";

/** The application's webhook endpoints, newest first. */
export function findWebhooks(store: Store, tenant: TenantScope): Promise<WebhookDoc[]> {
  return store.webhooks.find(ownedBy(tenant), { sort: { createdAt: -1, _id: -1 } }).toArray();
}
