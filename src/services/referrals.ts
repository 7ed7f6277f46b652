import type { ServiceImpl } from "@connectrpc/connect";
import type { ReferralsService } from "../../gen/referral/v1/referrals_pb.js";
import { ReferralSchema, ReferralStatusSchema } from "../../gen/referral/v1/resources_pb.js";
import { limits } from "../domain/limits.js";
import type { ReferralStatusName } from "../domain/referral-status.js";
import { findCampaign, findDefaultCampaign } from "../store/campaigns.js";
import {
  findCustomer,
  findCustomerByExternalId,
  findCustomerByReferralCode,
} from "../store/customers.js";
import type { CustomerDoc, EnvironmentName } from "../store/documents.js";
import { findReferrals } from "../store/referrals.js";
import type { Store } from "../store/store.js";
import type { TenantScope } from "../store/tenant.js";
import { tenantOf } from "./context.js";
import { failedPrecondition, invalidArgument, notFound } from "./errors.js";
import { messageFromDoc } from "./records.js";
import { attributeReferral, type LifecycleDeps, reviewReferral } from "./referral-lifecycle.js";
import {
  enumWord,
  environmentName,
  environmentOrProduction,
  optionalText,
  pageOf,
  requiredText,
} from "./validate.js";

/** Creates the ReferralsService implementation. */
export function createReferralsService(deps: LifecycleDeps): ServiceImpl<typeof ReferralsService> {
  const { store } = deps;
  return {
    async createReferral(request, context) {
      const tenant = tenantOf(context);
      const referralCode = requiredText(request.referralCode, "referralCode");
      const campaignId = optionalText(request.campaignId, "campaignId");
      const refereeId = optionalText(request.refereeId, "refereeId");
      const refereeExternalUserId = optionalText(
        request.refereeExternalUserId,
        "refereeExternalUserId",
      );
      if (refereeId === undefined && refereeExternalUserId === undefined) {
        throw invalidArgument("refereeId", "or refereeExternalUserId is required");
      }
      const campaign = campaignId
        ? await findCampaign(store, tenant, campaignId)
        : await findDefaultCampaign(store, tenant, environmentOrProduction(request.environment));
      if (!campaign) {
        throw notFound(campaignId ? `campaign ${campaignId}` : "default campaign");
      }
      const environment = campaign.environment;
      const referrer = await findCustomerByReferralCode(store, tenant, environment, referralCode);
      if (!referrer) throw notFound(`referral code ${referralCode}`);
      const referee = await findReferee(
        store,
        tenant,
        environment,
        refereeId,
        refereeExternalUserId,
      );
      if (!campaign.isLive) throw failedPrecondition(`campaign ${campaign._id} is not live`);
      const doc = await attributeReferral(deps, tenant, campaign, referrer, referee);
      deps.notifyWebhooks();
      // The specification's create response has no environment field.
      return { referral: messageFromDoc(ReferralSchema, doc, { environment: null }) };
    },

    async updateReferralStatus(request, context) {
      const tenant = tenantOf(context);
      const id = requiredText(request.id, "id");
      const status = enumWord<ReferralStatusName>(ReferralStatusSchema, request.status, "status");
      if (!status) throw invalidArgument("status", "is required");
      const reason = optionalText(request.reason, "reason", limits.note);
      const doc = await reviewReferral(deps, tenant, id, status, reason);
      deps.notifyWebhooks();
      return { referral: messageFromDoc(ReferralSchema, doc) };
    },

    async listReferrals(request, context) {
      const tenant = tenantOf(context);
      const page = pageOf(request.limit, request.offset);
      const { total, docs } = await findReferrals(
        store,
        tenant,
        {
          status: enumWord<ReferralStatusName>(ReferralStatusSchema, request.status, "status"),
          campaignId: optionalText(request.campaignId, "campaignId"),
          referrerId: optionalText(request.referrerId, "referrerId"),
          refereeId: optionalText(request.refereeId, "refereeId"),
          environment: environmentName(request.environment),
        },
        page,
      );
      return { total, ...page, data: docs.map((doc) => messageFromDoc(ReferralSchema, doc)) };
    },
  };
}

/** The referee by id or external id; both given must name the same customer. */
async function findReferee(
  store: Store,
  tenant: TenantScope,
  environment: EnvironmentName,
  refereeId: string | undefined,
  refereeExternalUserId: string | undefined,
): Promise<CustomerDoc> {
  const byId = refereeId === undefined ? undefined : await findCustomer(store, tenant, refereeId);
  if (byId === null || (byId && byId.environment !== environment)) {
    throw notFound(`referee ${refereeId}`);
  }
  if (refereeExternalUserId === undefined) return byId as CustomerDoc;
  const byExternalId = await findCustomerByExternalId(
    store,
    tenant,
    environment,
    refereeExternalUserId,
  );
  if (!byExternalId) throw notFound(`referee with external user id ${refereeExternalUserId}`);
  if (byId && byId._id !== byExternalId._id) {
    throw invalidArgument("refereeExternalUserId", "names another customer than refereeId");
  }
  return byExternalId;
}
