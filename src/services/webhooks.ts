import type { ServiceImpl } from "@connectrpc/connect";
import { WebhookEndpointSchema } from "../../gen/referral/v1/resources_pb.js";
import type { WebhooksService } from "../../gen/referral/v1/webhooks_pb.js";
import type { Store } from "../store/store.js";
import { findWebhooks } from "../store/webhooks.js";
import { tenantOf } from "./context.js";
import { messageFromDoc } from "./records.js";

/** Creates the WebhooksService implementation. */
export function createWebhooksService(deps: { store: Store }): ServiceImpl<typeof WebhooksService> {
  const { store } = deps;
  return {
    async listWebhooks(_request, context) {
      const docs = await findWebhooks(store, tenantOf(context));
      return { webhooks: docs.map((doc) => messageFromDoc(WebhookEndpointSchema, doc)) };
    },
  };
}
