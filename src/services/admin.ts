import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  type AdminService,
  type ApiKey,
  ApiKeyKindSchema,
  ApiKeySchema,
  type Application,
  ApplicationSchema,
  IdentityVerificationSchema,
  NetworkFactsSchema,
} from "../../gen/referral/v1/admin_pb.js";
import { type Campaign, CampaignSchema } from "../../gen/referral/v1/resources_pb.js";
import { messageFromDoc } from "../contract/records.js";
import {
  generateIdentitySecret,
  type IdentityVerificationName,
  previousIdentitySecretMs,
} from "../domain/identity.js";
import type { ApiKeyKindName, Clock } from "../domain/tenancy.js";
import {
  findCampaignById,
  insertCampaign,
  markCampaignDeleted,
  replaceCampaignFields,
} from "../store/campaigns.js";
import type {
  ApiKeyDoc,
  ApplicationDoc,
  CampaignDoc,
  NetworkFactsName,
} from "../store/documents.js";
import type { SecretBox } from "../store/secret-box.js";
import { differencesOf, recountStats, withKeptClickCounts } from "../store/stats-recount.js";
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
  rotateIdentitySecret,
  setIdentityVerification,
  setNetworkFacts,
  tenantOfApplication,
} from "../store/tenants.js";
import {
  campaignCheckpointsOf,
  campaignUpdateFields,
  newCampaignDoc,
  placementCheckpointsFor,
} from "./campaign-records.js";
import { eraseCustomerOf } from "./customers.js";
import { invalidArgument, notFound } from "./errors.js";
import { enumWord, environmentName, optionalText, requiredText } from "./validate.js";

/** Notified when a key is revoked, so caches of authenticated keys can drop it. */
export type KeyRevokedListener = (hash: string) => void;

/** Creates the AdminService implementation. */
export function createAdminService(deps: {
  store: Store;
  clock: Clock;
  onKeyRevoked?: KeyRevokedListener;
  /** Wakes the webhook relay: an erasure raises customer.erased. */
  notifyWebhooks?: () => void;
  /** Opens kept responses, for erasure. */
  secretBox: SecretBox;
}): ServiceImpl<typeof AdminService> {
  const { clock } = deps;
  // Admin works across tenants: the system paths, named as such.
  const db = deps.store.system;

  async function applicationOrNotFound(id: string): Promise<ApplicationDoc> {
    const application = await findApplication(db, requiredText(id, "applicationId"));
    if (!application) throw notFound(`application ${id}`);
    return application;
  }

  async function campaignOrNotFound(id: string): Promise<CampaignDoc> {
    requiredText(id, "id");
    const doc = await findCampaignById(db, id);
    if (!doc) throw notFound(`campaign ${id}`);
    return doc;
  }

  return {
    async createApplication(request) {
      const name = requiredText(request.name, "name");
      const now = clock();
      const organizationId = optionalText(request.organizationId, "organizationId");
      const organization = organizationId
        ? await findOrganization(db, organizationId)
        : await insertOrganization(db, name, now);
      if (!organization) throw notFound(`organization ${organizationId}`);
      const application = await insertApplication(db, organization._id, name, now);
      const secret = await insertApiKey(db, application, "secret", now, {
        name: "default secret key",
      });
      const publicKey = await insertApiKey(db, application, "public", now, {
        name: "default public key",
      });
      return {
        application: applicationMessage(application),
        secretKey: secret.key,
        publicKey: publicKey.key,
      };
    },

    async listApplications() {
      const docs = await findApplications(db);
      return { applications: docs.map(applicationMessage) };
    },

    async rotateIdentitySecret(request) {
      const application = await applicationOrNotFound(request.applicationId);
      const now = clock();
      const identitySecret = generateIdentitySecret();
      const previousUntil = new Date(now.getTime() + previousIdentitySecretMs);
      const updated = await rotateIdentitySecret(
        db,
        application,
        deps.secretBox.seal(identitySecret),
        now,
        previousUntil,
      );
      if (!updated) throw notFound(`application ${request.applicationId}`);
      return {
        identitySecret,
        previousSecretExpiresAt: updated.previousIdentitySecretExpiresAt
          ? timestampFromDate(updated.previousIdentitySecretExpiresAt)
          : undefined,
      };
    },

    async updateApplication(request) {
      const application = await applicationOrNotFound(request.id);
      const paths = request.updateMask
        .flatMap((path) => path.split(","))
        .map((path) => path.trim());
      if (paths.length === 0) {
        throw invalidArgument("updateMask", "is required: identityVerification or networkFacts");
      }
      const fields = paths.map((path) => {
        const field = applicationUpdateFields.get(path);
        if (!field) {
          throw invalidArgument(
            "updateMask",
            `names ${JSON.stringify(path)}: only identityVerification and networkFacts can be changed`,
          );
        }
        return field;
      });
      let updated: ApplicationDoc | null = application;
      if (fields.includes("identityVerification")) {
        const mode = enumWord<IdentityVerificationName>(
          IdentityVerificationSchema,
          request.application?.identityVerification ?? 0,
          "application.identityVerification",
        );
        if (!mode) {
          throw invalidArgument(
            "application.identityVerification",
            "is required: protect or required",
          );
        }
        updated = await setIdentityVerification(db, application._id, mode, clock());
      }
      if (fields.includes("networkFacts")) {
        const networkFacts = enumWord<NetworkFactsName>(
          NetworkFactsSchema,
          request.application?.networkFacts ?? 0,
          "application.networkFacts",
        );
        if (!networkFacts) {
          throw invalidArgument("application.networkFacts", "is required: collect or off");
        }
        updated = await setNetworkFacts(db, application._id, networkFacts, clock());
      }
      if (!updated) throw notFound(`application ${request.id}`);
      return { application: applicationMessage(updated) };
    },

    async createApiKey(request) {
      const application = await applicationOrNotFound(request.applicationId);
      const kind = enumWord<ApiKeyKindName>(ApiKeyKindSchema, request.kind, "kind");
      if (!kind) throw invalidArgument("kind", "is required: public or secret");
      const { doc, key } = await insertApiKey(db, application, kind, clock(), {
        name: optionalText(request.name, "name"),
      });
      return { apiKey: apiKeyMessage(doc), key };
    },

    async listApiKeys(request) {
      const application = await applicationOrNotFound(request.applicationId);
      const docs = await findApiKeys(db, application._id);
      return { apiKeys: docs.map(apiKeyMessage) };
    },

    async revokeApiKey(request) {
      const id = requiredText(request.id, "id");
      const doc = await revokeApiKey(db, id, clock());
      if (!doc) throw notFound(`API key ${id}`);
      deps.onKeyRevoked?.(doc.hash);
      return { apiKey: apiKeyMessage(doc) };
    },

    async createCampaign(request) {
      const application = await applicationOrNotFound(request.applicationId);
      if (!request.campaign) throw invalidArgument("campaign", "is required");
      const tenant = tenantOfApplication(application);
      const doc = newCampaignDoc(tenant, request.campaign, clock());
      await insertCampaign(db, doc);
      return { campaign: campaignMessage(doc) };
    },

    async listApplicationCampaigns(request) {
      const application = await applicationOrNotFound(request.applicationId);
      const environment = environmentName(request.environment);
      const docs = await deps.store
        .forTenant(tenantOfApplication(application))
        .campaigns.findMany({ ...(environment ? { environment } : {}), order: "desc" });
      return { campaigns: docs.map(campaignMessage) };
    },

    async updateCampaign(request) {
      const current = await campaignOrNotFound(request.id);
      if (!request.campaign) throw invalidArgument("campaign", "is required");
      const now = clock();
      const fields = campaignUpdateFields(current, request.campaign, request.updateMask, now);
      const updated = await replaceCampaignFields(db, current, fields, now);
      if (!updated) throw notFound(`campaign ${request.id}`);
      return { campaign: campaignMessage(updated) };
    },

    async setCampaignCheckpoints(request) {
      const current = await campaignOrNotFound(request.id);
      const now = clock();
      const placementCheckpoints = placementCheckpointsFor(current, request.placements, now);
      const updated = await replaceCampaignFields(db, current, { placementCheckpoints }, now);
      if (!updated) throw notFound(`campaign ${request.id}`);
      return { data: campaignCheckpointsOf(updated) };
    },

    async eraseApplicationCustomer(request) {
      const application = await applicationOrNotFound(request.applicationId);
      const store = deps.store.forTenant(tenantOfApplication(application));
      const customer = await eraseCustomerOf(store, request.customerId, "customerId", {
        clock,
        notifyWebhooks: deps.notifyWebhooks ?? (() => {}),
        secretBox: deps.secretBox,
      });
      return { customer };
    },

    async verifyApplicationStats(request) {
      const application = await applicationOrNotFound(request.applicationId);
      const { scopes, wanted: recounted, recordsRead } = await recountStats(db, application._id);
      const kept = await deps.store.stats.snapshot(scopes);
      // Clicks leave when their window ends: their counters stay as kept.
      const wanted = withKeptClickCounts(kept, recounted);
      const differences = differencesOf(kept, wanted);
      if (request.repair && differences.length > 0) await deps.store.stats.replace(scopes, wanted);
      return {
        recordsRead: BigInt(recordsRead),
        differenceCount: BigInt(differences.length),
        differences: differences.slice(0, 100).map((difference) => ({
          kind: difference.kind,
          key: difference.key,
          ...(difference.kept === null ? {} : { kept: difference.kept }),
          ...(difference.recounted === null ? {} : { recounted: difference.recounted }),
        })),
        repaired: request.repair && differences.length > 0,
      };
    },

    async deleteCampaign(request) {
      const current = await campaignOrNotFound(request.id);
      const deleted = await markCampaignDeleted(db, current, clock());
      if (!deleted) throw notFound(`campaign ${request.id}`);
      return { campaign: campaignMessage(deleted) };
    },
  };
}

/** The fields UpdateApplication changes, by their names in an update mask. */
const applicationUpdateFields: ReadonlyMap<string, "identityVerification" | "networkFacts"> =
  new Map([
    ["identityVerification", "identityVerification"],
    ["identity_verification", "identityVerification"],
    ["networkFacts", "networkFacts"],
    ["network_facts", "networkFacts"],
  ]);

function applicationMessage(doc: ApplicationDoc): Application {
  // The identity secrets and the network key never leave the store.
  const {
    identitySecretSealed: _current,
    previousIdentitySecretSealed: _previous,
    previousIdentitySecretExpiresAt: _until,
    networkKeySealed: _networkKey,
    ...visible
  } = doc;
  return messageFromDoc(ApplicationSchema, visible, {
    identityVerification: doc.identityVerification ?? "protect",
    networkFacts: doc.networkFacts ?? "collect",
  });
}

function apiKeyMessage(doc: ApiKeyDoc): ApiKey {
  // The hash never leaves the store.
  const { hash: _hash, ...visible } = doc;
  return messageFromDoc(ApiKeySchema, visible);
}

function campaignMessage(doc: CampaignDoc): Campaign {
  return messageFromDoc(CampaignSchema, doc);
}
