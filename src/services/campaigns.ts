import type { ServiceImpl } from "@connectrpc/connect";
import {
  CampaignSortBy,
  type CampaignsService,
  GetLiveCampaignResponseSchema,
  ListCampaignsResponseSchema,
  SortOrder,
} from "../../gen/referral/v1/campaigns_pb.js";
import { type Campaign, CampaignSchema } from "../../gen/referral/v1/resources_pb.js";
import { messageFromDoc } from "../contract/records.js";
import { sharedFrom } from "../contract/shared-messages.js";
import { limits } from "../domain/limits.js";
import type { ApiKeyKindName, Clock } from "../domain/tenancy.js";
import type { CampaignDoc } from "../store/documents.js";
import { campaignCheckpointsOf } from "./campaign-records.js";
import { callerOf, requestOriginOf } from "./context.js";
import { invalidArgument, notFound } from "./errors.js";
import { environmentName, environmentOrProduction, requiredText } from "./validate.js";

/**
 * A campaign as a key sees it: a public key is anyone's, so it never sees
 * the fraud policy (docs/fraud.md).
 */
function campaignFor(doc: CampaignDoc, keyKind: ApiKeyKindName): Campaign {
  const campaign = messageFromDoc(CampaignSchema, doc);
  if (keyKind !== "secret") campaign.fraudPolicy = undefined;
  return campaign;
}

// Public keys' responses are shared apart from secret keys': each audience
// has its own token per source, living as long as the source.
const publicAudience = new WeakMap<object, object>();

function audienceOf(source: object, keyKind: ApiKeyKindName): object {
  if (keyKind === "secret") return source;
  let token = publicAudience.get(source);
  if (!token) {
    token = {};
    publicAudience.set(source, token);
  }
  return token;
}

/** Creates the CampaignsService implementation. */
export function createCampaignsService(deps: {
  clock: Clock;
}): ServiceImpl<typeof CampaignsService> {
  return {
    async listCampaigns(request, context) {
      const { store, keyKind } = callerOf(context);
      if (
        request.sortBy !== CampaignSortBy.UNSPECIFIED &&
        request.sortBy !== CampaignSortBy.CREATED_AT
      ) {
        throw invalidArgument("sortBy", "must be createdAt");
      }
      if (!(request.sortOrder in SortOrder))
        throw invalidArgument("sortOrder", "must be one of: asc, desc");
      // A public key is anyone's: it sees live campaigns only (docs/trust.md).
      const liveOnly = keyKind === "public";
      if (liveOnly && request.isLive === false) {
        return { campaigns: [] };
      }
      const docs = await store.campaigns.findMany({
        environment: environmentName(request.environment),
        isLive: liveOnly ? true : request.isLive,
        isDefault: request.isDefault,
        order: request.sortOrder === SortOrder.ASC ? "asc" : "desc",
      });
      // The store hands out one frozen list per query while its campaigns
      // are current: one response per audience, encoded once per protocol.
      return sharedFrom(audienceOf(docs, keyKind), ListCampaignsResponseSchema, () => ({
        campaigns: docs.map((doc) => campaignFor(doc, keyKind)),
      }));
    },

    async getLiveCampaign(request, context) {
      const { store, keyKind } = callerOf(context);
      const environment = environmentOrProduction(request.environment);
      const live = await store.campaigns.findMany({ environment, isLive: true, order: "desc" });
      // The default campaign is where referrals naming no campaign go, so an
      // app shows that one; else the newest live one (the list is newest first).
      const campaign = live.find((doc) => doc.isDefault) ?? live[0];
      if (!campaign) throw notFound(`live campaign in ${environment}`);
      return sharedFrom(audienceOf(campaign, keyKind), GetLiveCampaignResponseSchema, () => ({
        campaign: campaignFor(campaign, keyKind),
      }));
    },

    async pingCampaign(request, context) {
      const { store } = callerOf(context);
      const id = requiredText(request.id, "id");
      const origin = requestOriginOf(context);
      if (origin !== null && origin.length > limits.url) {
        throw invalidArgument("Origin", `must be at most ${limits.url} characters`);
      }
      const pinged = await store.campaigns.updatePing(id, { at: deps.clock(), origin });
      if (!pinged) throw notFound(`campaign ${id}`);
      return { id: pinged._id };
    },

    async listCampaignCheckpoints(request, context) {
      const { store } = callerOf(context);
      const id = requiredText(request.campaignId, "campaignId");
      const campaign = await store.campaigns.find(id);
      if (!campaign) throw notFound(`campaign ${id}`);
      return { data: campaignCheckpointsOf(campaign) };
    },
  };
}
