import type { ServiceImpl } from "@connectrpc/connect";
import {
  CampaignSortBy,
  type CampaignsService,
  SortOrder,
} from "../../gen/referral/v1/campaigns_pb.js";
import { CampaignSchema } from "../../gen/referral/v1/resources_pb.js";
import { messageFromDoc } from "../contract/records.js";
import { callerOf } from "./context.js";
import { invalidArgument } from "./errors.js";
import { environmentName } from "./validate.js";

/** Creates the CampaignsService implementation. */
export function createCampaignsService(): ServiceImpl<typeof CampaignsService> {
  return {
    async listCampaigns(request, context) {
      const { store } = callerOf(context);
      if (
        request.sortBy !== CampaignSortBy.UNSPECIFIED &&
        request.sortBy !== CampaignSortBy.CREATED_AT
      ) {
        throw invalidArgument("sortBy", "must be createdAt");
      }
      if (!(request.sortOrder in SortOrder))
        throw invalidArgument("sortOrder", "must be one of: asc, desc");
      const docs = await store.campaigns.findMany({
        environment: environmentName(request.environment),
        isLive: request.isLive,
        isDefault: request.isDefault,
        order: request.sortOrder === SortOrder.ASC ? "asc" : "desc",
      });
      return { campaigns: docs.map((doc) => messageFromDoc(CampaignSchema, doc)) };
    },
  };
}
