import type { ServiceImpl } from "@connectrpc/connect";
import type { CheckpointsService } from "../../gen/referral/v1/checkpoints_pb.js";
import { insertCheckpoint } from "../store/checkpoints.js";
import { findCustomerByExternalId } from "../store/customers.js";
import { tenantOf } from "./context.js";
import { notFound } from "./errors.js";
import { checkpointEvents } from "./events.js";
import { convertReferrals, type LifecycleDeps } from "./referral-lifecycle.js";
import { requiredEnvironment, requiredText } from "./validate.js";

/** Creates the CheckpointsService implementation. */
export function createCheckpointsService(
  deps: LifecycleDeps,
): ServiceImpl<typeof CheckpointsService> {
  const { store, clock } = deps;
  return {
    async ingestCheckpoint(request, context) {
      const tenant = tenantOf(context);
      const name = requiredText(request.name, "name", 128);
      const externalUserId = requiredText(request.externalUserId, "externalUserId");
      const environment = requiredEnvironment(request.environment, "environment");
      const customer = await findCustomerByExternalId(store, tenant, environment, externalUserId);
      if (!customer)
        throw notFound(`customer with external user id ${externalUserId} in ${environment}`);
      // Stored first: a failure after this point is retried by the client,
      // and conversion is idempotent, so the checkpoint's effect is never lost.
      const checkpoint = await insertCheckpoint(store, customer, name, clock(), checkpointEvents);
      await convertReferrals(deps, customer, checkpoint);
      deps.notifyWebhooks();
      return { success: true };
    },
  };
}
