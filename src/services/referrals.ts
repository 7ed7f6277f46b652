import type { ConnectError, ServiceImpl } from "@connectrpc/connect";
import type { ReferralsService } from "../../gen/referral/v1/referrals_pb.js";
import { ReferralSchema, ReferralStatusSchema } from "../../gen/referral/v1/resources_pb.js";
import { messageFromDoc } from "../contract/records.js";
import { limits } from "../domain/limits.js";
import type { ReferralStatusName } from "../domain/referral-status.js";
import type { EnvironmentName } from "../domain/tenancy.js";
import type { CustomerDoc } from "../store/documents.js";
import type { TenantStore } from "../store/tenant-store.js";
import { callerOf, codeLookupsKey } from "./context.js";
import { failedPrecondition, invalidArgument, notFound } from "./errors.js";
import { checkedContext, endUserOf, networkOfCall } from "./evidence.js";
import { optionalUserHash, verificationOf } from "./identity.js";
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
  return {
    async createReferral(request, context) {
      const caller = callerOf(context);
      const { store } = caller;
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
      const userHash = optionalUserHash(request.userHash);
      const sentContext = checkedContext(caller, request.context);
      const campaign = campaignId
        ? await store.campaigns.find(campaignId)
        : await store.campaigns.findDefault(environmentOrProduction(request.environment));
      if (!campaign) {
        throw notFound(campaignId ? `campaign ${campaignId}` : "default campaign");
      }
      const environment = campaign.environment;
      // Wrong codes are limited per key and address, so codes cannot be searched (docs/trust.md).
      const lookups = context.values.get(codeLookupsKey);
      await lookups.beforeLookup();
      const referrer = await store.customers.findByReferralCode(environment, referralCode);
      if (!referrer) {
        await lookups.lookupFailed();
        throw await referralCodeNotFound(store, environment, referralCode);
      }
      const referee = await findReferee(store, environment, refereeId, refereeExternalUserId);
      // The referee is the customer the call acts for (docs/trust.md).
      const verification = await verificationOf(caller, deps, referee.externalUserId, userHash);
      if (!campaign.isLive) throw failedPrecondition(`campaign ${campaign._id} is not live`);
      const refereeNetwork = await networkOfCall(
        store,
        deps,
        endUserOf(caller, context, sentContext),
      );
      // Only a secret key or the referee's own verified call moves a referral (docs/trust.md).
      const { view } = await attributeReferral(
        deps,
        caller,
        campaign,
        referrer,
        referee,
        verification !== "unverified",
        refereeNetwork,
      );
      deps.notifyWebhooks();
      // The specification's create response has no environment field; the
      // evidence is the backend's to read (docs/fraud.md).
      return {
        referral: {
          ...view,
          environment: undefined,
          evidence: caller.keyKind === "secret" ? view.evidence : undefined,
        },
      };
    },

    async updateReferralStatus(request, context) {
      const caller = callerOf(context);
      const id = requiredText(request.id, "id");
      const status = enumWord<ReferralStatusName>(ReferralStatusSchema, request.status, "status");
      if (!status) throw invalidArgument("status", "is required");
      const reason = optionalText(request.reason, "reason", limits.note);
      const { view } = await reviewReferral(deps, caller, id, status, reason);
      deps.notifyWebhooks();
      return { referral: view };
    },

    async listReferrals(request, context) {
      const { store } = callerOf(context);
      const page = pageOf(request.limit, request.offset);
      const { total, docs } = await store.referrals.findMany(
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
  store: TenantStore,
  environment: EnvironmentName,
  refereeId: string | undefined,
  refereeExternalUserId: string | undefined,
): Promise<CustomerDoc> {
  const byId = refereeId === undefined ? undefined : await store.customers.find(refereeId);
  if (byId === null || (byId && byId.environment !== environment)) {
    throw notFound(`referee ${refereeId}`);
  }
  if (refereeExternalUserId === undefined) return byId as CustomerDoc;
  const byExternalId = await store.customers.findByExternalId(environment, refereeExternalUserId);
  if (!byExternalId) throw notFound(`referee with external user id ${refereeExternalUserId}`);
  if (byId && byId._id !== byExternalId._id) {
    throw invalidArgument("refereeExternalUserId", "names another customer than refereeId");
  }
  return byExternalId;
}

/**
 * The error for a referral code the campaign's environment does not have.
 * A code of the other environment is the usual mistake (a test app sending
 * a production code), so the error says so rather than that it is unknown.
 */
async function referralCodeNotFound(
  store: TenantStore,
  environment: EnvironmentName,
  referralCode: string,
): Promise<ConnectError> {
  const other: EnvironmentName = environment === "production" ? "test" : "production";
  if (await store.customers.findByReferralCode(other, referralCode)) {
    return notFound(
      `referral code ${referralCode}`,
      `it is a ${other} customer's code, and the campaign is a ${environment} campaign`,
    );
  }
  return notFound(`referral code ${referralCode}`);
}
