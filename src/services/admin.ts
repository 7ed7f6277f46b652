import type { ServiceImpl } from "@connectrpc/connect";
import {
  type AdminService,
  type ApiKey,
  ApiKeyKindSchema,
  ApiKeySchema,
  ApplicationSchema,
} from "../../gen/referral/v1/admin_pb.js";
import { type Campaign, CampaignSchema } from "../../gen/referral/v1/resources_pb.js";
import {
  findCampaignById,
  insertCampaign,
  markCampaignDeleted,
  replaceCampaignFields,
} from "../store/campaigns.js";
import type { ApiKeyDoc, ApiKeyKindName, ApplicationDoc, CampaignDoc } from "../store/documents.js";
import type { Store } from "../store/store.js";
import {
  findApiKeys,
  findApplication,
  findApplications,
  findOrganization,
  insertApiKey,
  insertApplication,
  insertOrganization,
  revokeApiKey,
} from "../store/tenants.js";
import { campaignUpdateFields, newCampaignDoc } from "./campaign-records.js";
import { invalidArgument, notFound } from "./errors.js";
import { type Clock, messageFromDoc } from "./records.js";
import { enumWord, optionalText, requiredText } from "./validate.js";

/** Notified when a key is revoked, so caches of authenticated keys can drop it. */
export type KeyRevokedListener = (hash: string) => void;

/** Creates the AdminService implementation. */
export function createAdminService(deps: {
  store: Store;
  clock: Clock;
  onKeyRevoked?: KeyRevokedListener;
}): ServiceImpl<typeof AdminService> {
  const { store, clock } = deps;

  async function applicationOrNotFound(id: string): Promise<ApplicationDoc> {
    const application = await findApplication(store, requiredText(id, "applicationId"));
    if (!application) throw notFound(`application ${id}`);
    return application;
  }

  async function campaignOrNotFound(id: string): Promise<CampaignDoc> {
    requiredText(id, "id");
    const doc = await findCampaignById(store, id);
    if (!doc) throw notFound(`campaign ${id}`);
    return doc;
  }

  return {
    async createApplication(request) {
      const name = requiredText(request.name, "name");
      const now = clock();
      const organizationId = optionalText(request.organizationId, "organizationId");
      const organization = organizationId
        ? await findOrganization(store, organizationId)
        : await insertOrganization(store, name, now);
      if (!organization) throw notFound(`organization ${organizationId}`);
      const application = await insertApplication(store, organization._id, name, now);
      const secret = await insertApiKey(store, application, "secret", now, {
        name: "default secret key",
      });
      const publicKey = await insertApiKey(store, application, "public", now, {
        name: "default public key",
      });
      return {
        application: messageFromDoc(ApplicationSchema, application),
        secretKey: secret.key,
        publicKey: publicKey.key,
      };
    },

    async listApplications() {
      const docs = await findApplications(store);
      return { applications: docs.map((doc) => messageFromDoc(ApplicationSchema, doc)) };
    },

    async createApiKey(request) {
      const application = await applicationOrNotFound(request.applicationId);
      const kind = enumWord<ApiKeyKindName>(ApiKeyKindSchema, request.kind, "kind");
      if (!kind) throw invalidArgument("kind", "is required: public or secret");
      const { doc, key } = await insertApiKey(store, application, kind, clock(), {
        name: optionalText(request.name, "name"),
      });
      return { apiKey: apiKeyMessage(doc), key };
    },

    async listApiKeys(request) {
      const application = await applicationOrNotFound(request.applicationId);
      const docs = await findApiKeys(store, application._id);
      return { apiKeys: docs.map(apiKeyMessage) };
    },

    async revokeApiKey(request) {
      const id = requiredText(request.id, "id");
      const doc = await revokeApiKey(store, id, clock());
      if (!doc) throw notFound(`API key ${id}`);
      deps.onKeyRevoked?.(doc.hash);
      return { apiKey: apiKeyMessage(doc) };
    },

    async createCampaign(request) {
      const application = await applicationOrNotFound(request.applicationId);
      if (!request.campaign) throw invalidArgument("campaign", "is required");
      const tenant = { organizationId: application.organizationId, applicationId: application._id };
      const doc = newCampaignDoc(tenant, request.campaign, clock());
      await insertCampaign(store, doc);
      return { campaign: campaignMessage(doc) };
    },

    async updateCampaign(request) {
      const current = await campaignOrNotFound(request.id);
      if (!request.campaign) throw invalidArgument("campaign", "is required");
      const now = clock();
      const fields = campaignUpdateFields(current, request.campaign, request.updateMask, now);
      const updated = await replaceCampaignFields(store, current, fields, now);
      if (!updated) throw notFound(`campaign ${request.id}`);
      return { campaign: campaignMessage(updated) };
    },

    async deleteCampaign(request) {
      const current = await campaignOrNotFound(request.id);
      const deleted = await markCampaignDeleted(store, current, clock());
      if (!deleted) throw notFound(`campaign ${request.id}`);
      return { campaign: campaignMessage(deleted) };
    },
  };
}

function apiKeyMessage(doc: ApiKeyDoc): ApiKey {
  // The hash never leaves the store.
  const { hash: _hash, ...visible } = doc;
  return messageFromDoc(ApiKeySchema, visible);
}

function campaignMessage(doc: CampaignDoc): Campaign {
  return messageFromDoc(CampaignSchema, doc);
}
