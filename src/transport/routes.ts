import { AdminService } from "../../gen/referral/v1/admin_pb.js";
import { CampaignsService } from "../../gen/referral/v1/campaigns_pb.js";
import { CheckpointsService } from "../../gen/referral/v1/checkpoints_pb.js";
import { CustomersService } from "../../gen/referral/v1/customers_pb.js";
import { InsightsService } from "../../gen/referral/v1/insights_pb.js";
import { ReferralsService } from "../../gen/referral/v1/referrals_pb.js";
import { RewardsService } from "../../gen/referral/v1/rewards_pb.js";
import { WebhooksService } from "../../gen/referral/v1/webhooks_pb.js";
import type { DisposableDomains } from "../domain/fraud-evidence.js";
import type { FraudPolicy } from "../domain/fraud-rules.js";
import type { Clock, Ticker } from "../domain/tenancy.js";
import { createAdminService, type KeyRevokedListener } from "../services/admin.js";
import { createCampaignsService } from "../services/campaigns.js";
import { createCheckpointsService } from "../services/checkpoints.js";
import { createCustomersService } from "../services/customers.js";
import { createInsightsService } from "../services/insights.js";
import { createReferralsService } from "../services/referrals.js";
import { createRewardsService } from "../services/rewards.js";
import { createWebhooksService } from "../services/webhooks.js";
import type { SecretBox } from "../store/secret-box.js";
import type { Store } from "../store/store.js";
import { type Rpc, register, type ServiceRegistration } from "./pipeline.js";

/** What the services need. */
export interface ServiceDeps {
  /** For the admin service only: tenant services get their tenant's repositories per call. */
  readonly store: Store;
  readonly clock: Clock;
  /** When open streams look again for writes nobody told them of (STREAM_POLL_INTERVAL). */
  readonly streamTicks: Ticker;
  readonly fraudPolicy: FraudPolicy;
  /** The disposable-domain list of the fraud evidence (see `disposableDomains`). */
  readonly disposableDomains: DisposableDomains;
  readonly secretBox: SecretBox;
  readonly allowPrivateWebhooks: boolean;
  /** The base of the share links (PUBLIC_URL). */
  readonly publicUrl: string;
  /** Says events were written or a delivery is due: the webhook runtime acts now. */
  readonly notifyWebhooks: () => void;
  readonly onKeyRevoked?: KeyRevokedListener;
}

/**
 * Every service, once. The Connect router, the grpc-js server and the REST
 * routes all walk this list, so an RPC has exactly one implementation.
 */
export function createServiceRegistrations(deps: ServiceDeps): ServiceRegistration[] {
  return [
    register(CustomersService, createCustomersService(deps)),
    register(ReferralsService, createReferralsService(deps)),
    register(RewardsService, createRewardsService(deps)),
    register(CheckpointsService, createCheckpointsService(deps)),
    register(CampaignsService, createCampaignsService(deps)),
    register(WebhooksService, createWebhooksService(deps)),
    register(InsightsService, createInsightsService(deps)),
    register(AdminService, createAdminService(deps)),
  ];
}

/** Every RPC of the registrations, flattened. */
export function rpcsOf(registrations: readonly ServiceRegistration[]): Rpc[] {
  return registrations.flatMap((registration) => registration.rpcs);
}
