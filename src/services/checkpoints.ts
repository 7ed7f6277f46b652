import type { ServiceImpl } from "@connectrpc/connect";
import type { CheckpointsService } from "../../gen/referral/v1/checkpoints_pb.js";
import { insertCheckpoint } from "../store/checkpoints.js";
import { findCustomerByExternalId } from "../store/customers.js";
import type { Store } from "../store/store.js";
import { tenantOf } from "./context.js";
import { notFound } from "./errors.js";
import type { Clock } from "./records.js";
import { requiredEnvironment, requiredText } from "./validate.js";

/** Creates the CheckpointsService implementation. */
export function createCheckpointsService(deps: {
  store: Store;
  clock: Clock;
}): ServiceImpl<typeof CheckpointsService> {
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
      await insertCheckpoint(store, customer, name, clock());
      return { success: true };
    },
  };
}
