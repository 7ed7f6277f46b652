import type { DescMethod, DescService, Message, MessageShape } from "@bufbuild/protobuf";
import { create } from "@bufbuild/protobuf";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { AdminService } from "../../gen/referral/v1/admin_pb.js";
import { CampaignsService } from "../../gen/referral/v1/campaigns_pb.js";
import { CheckpointsService } from "../../gen/referral/v1/checkpoints_pb.js";
import { CustomersService } from "../../gen/referral/v1/customers_pb.js";
import { ReferralsService } from "../../gen/referral/v1/referrals_pb.js";
import { WebhooksService } from "../../gen/referral/v1/webhooks_pb.js";
import type { FraudPolicy } from "../domain/fraud-rules.js";
import { createAdminService, type KeyRevokedListener } from "../services/admin.js";
import { createCampaignsService } from "../services/campaigns.js";
import { createCheckpointsService } from "../services/checkpoints.js";
import { createCustomersService } from "../services/customers.js";
import type { Clock } from "../services/records.js";
import { createReferralsService } from "../services/referrals.js";
import { createWebhooksService } from "../services/webhooks.js";
import type { SecretBox } from "../store/secret-box.js";
import type { Store } from "../store/store.js";
import { type ErrorLogger, toConnectError } from "./errors.js";

/** A service and its implementation. */
export interface ServiceRegistration {
  readonly service: DescService;
  readonly impl: ServiceImpl<DescService>;
}

/** What the services need. */
export interface ServiceDeps {
  readonly store: Store;
  readonly clock: Clock;
  readonly fraudPolicy: FraudPolicy;
  readonly secretBox: SecretBox;
  readonly allowPrivateWebhooks: boolean;
  /** Says events were written or a delivery is due: the webhook runtime acts now. */
  readonly notifyWebhooks: () => void;
  readonly onKeyRevoked?: KeyRevokedListener;
}

/**
 * Every service, once. The Connect router, the grpc-js server and the REST
 * routes all walk this list, so an RPC has exactly one implementation.
 */
export function createServiceRegistrations(
  deps: ServiceDeps,
  log: ErrorLogger,
): ServiceRegistration[] {
  const registrations = [
    { service: CustomersService, impl: createCustomersService(deps) },
    { service: ReferralsService, impl: createReferralsService(deps) },
    { service: CheckpointsService, impl: createCheckpointsService(deps) },
    { service: CampaignsService, impl: createCampaignsService(deps) },
    { service: WebhooksService, impl: createWebhooksService(deps) },
    { service: AdminService, impl: createAdminService(deps) },
  ] as unknown as ServiceRegistration[];
  return registrations.map(({ service, impl }) => ({ service, impl: guarded(service, impl, log) }));
}

/** A unary RPC as the transports call it. */
export type UnaryHandler = (request: Message, context: HandlerContext) => Promise<Message>;

/** One RPC: its descriptors and its (guarded) implementation. */
export interface Rpc {
  readonly service: DescService;
  readonly method: DescMethod;
  readonly handler: UnaryHandler;
}

/** Every RPC of the registrations, flattened. */
export function rpcsOf(registrations: readonly ServiceRegistration[]): Rpc[] {
  return registrations.flatMap(({ service, impl }) =>
    service.methods.map((method) => {
      const implementation = (impl as unknown as Record<string, UnaryHandler>)[method.localName];
      if (!implementation)
        throw new Error(`${service.typeName}.${method.name} has no implementation`);
      return { service, method, handler: implementation };
    }),
  );
}

/**
 * Wraps each method so unexpected errors become INTERNAL (see
 * `toConnectError`) and results are full messages of the output type.
 */
function guarded(service: DescService, impl: ServiceImpl<DescService>, log: ErrorLogger) {
  const wrapped: Record<string, UnaryHandler> = {};
  for (const method of service.methods) {
    const implementation = (impl as unknown as Record<string, UnaryHandler>)[method.localName];
    if (!implementation) continue;
    const rpc = `${service.typeName}/${method.name}`;
    wrapped[method.localName] = async (request, context) => {
      try {
        const result = await implementation.call(impl, request, context);
        return create(method.output, result as MessageShape<typeof method.output>);
      } catch (error) {
        throw toConnectError(error, rpc, log);
      }
    };
  }
  return wrapped as unknown as ServiceImpl<DescService>;
}
