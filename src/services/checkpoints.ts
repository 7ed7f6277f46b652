import type { ServiceImpl } from "@connectrpc/connect";
import type { CheckpointsService } from "../../gen/referral/v1/checkpoints_pb.js";
import { newCheckpoint } from "../domain/checkpoint.js";
import type { SecretBox } from "../store/secret-box.js";
import { checkpointName } from "./checkpoint-names.js";
import { callerOf } from "./context.js";
import { notFound } from "./errors.js";
import { optionalUserHash, verificationOf } from "./identity.js";
import { type LifecycleDeps, storeCheckpointAndConvert } from "./referral-lifecycle.js";
import { requiredEnvironment, requiredText } from "./validate.js";

/** Creates the CheckpointsService implementation. */
export function createCheckpointsService(
  deps: LifecycleDeps & { secretBox: SecretBox },
): ServiceImpl<typeof CheckpointsService> {
  const { clock } = deps;
  return {
    async ingestCheckpoint(request, context) {
      const caller = callerOf(context);
      const { store } = caller;
      const name = checkpointName(request.name, "name");
      const externalUserId = requiredText(request.externalUserId, "externalUserId");
      const environment = requiredEnvironment(request.environment, "environment");
      // Checked before the customer is looked up: a wrong userHash says nothing of who exists.
      const verification = await verificationOf(
        caller,
        deps,
        externalUserId,
        optionalUserHash(request.userHash),
      );
      const customer = await store.customers.findByExternalId(environment, externalUserId);
      if (!customer)
        throw notFound(`customer with external user id ${externalUserId} in ${environment}`);
      const checkpoint = newCheckpoint(caller.tenant, customer, name, clock());
      await storeCheckpointAndConvert(store, customer, checkpoint, verification !== "unverified");
      deps.notifyWebhooks();
      return { success: true };
    },
  };
}
