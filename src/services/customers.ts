import { create, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  type CustomersService,
  GetCustomerResponseSchema,
} from "../../gen/referral/v1/customers_pb.js";
import {
  CheckpointSchema,
  type Customer,
  CustomerSummarySchema,
  Environment,
  type Referral,
  ReferralSchema,
} from "../../gen/referral/v1/resources_pb.js";
import { messageFromDoc } from "../contract/records.js";
import { isShared, sharedFrom } from "../contract/shared-messages.js";
import { changedCustomerFields, redactedCustomer } from "../domain/identity.js";
import { newId } from "../domain/ids.js";
import { limits } from "../domain/limits.js";
import { shareLinksOf } from "../domain/links.js";
import type { Clock } from "../domain/tenancy.js";
import { cleanText } from "../domain/text.js";
import { customerErased, customerIdentified } from "../events/events.js";
import { newCustomerMessage } from "../store/customer-records.js";
import type { ReferralDoc } from "../store/documents.js";
import type { SecretBox } from "../store/secret-box.js";
import type { TenantStore } from "../store/tenant-store.js";
import { clickAttribution } from "./click-attribution.js";
import { callerOf, codeLookupsKey } from "./context.js";
import { invalidArgument, notFound } from "./errors.js";
import { checkedContext, type EvidenceDeps, endUserOf, networkOfCall } from "./evidence.js";
import { optionalUserHash, userHashNeeded, verificationOf } from "./identity.js";
import { attributeReferral } from "./referral-lifecycle.js";
import { grantMessages } from "./rewards.js";
import {
  environmentName,
  environmentOrProduction,
  optionalEmail,
  optionalText,
  pageOf,
  requiredText,
} from "./validate.js";

/**
 * Erases a customer of the tenant (EraseCustomer, and the admin API's
 * EraseApplicationCustomer) and answers its tombstone as the API shows it.
 */
export async function eraseCustomerOf(
  store: TenantStore,
  rawId: string,
  field: string,
  deps: { clock: Clock; notifyWebhooks: () => void; secretBox: SecretBox },
): Promise<Customer> {
  const id = requiredText(rawId, field);
  const at = deps.clock();
  const erased = await store.customers.erase(id, at, [customerErased(id, at)]);
  if (!erased) throw notFound(`customer ${id}`);
  await forgetOutcomesAbout(store, id, deps.secretBox);
  if (erased.erasedNow) deps.notifyWebhooks();
  const [customer] = await store.customers.messages([erased.tombstone]);
  if (!customer) throw notFound(`customer ${id}`);
  return customer;
}

/**
 * Forgets the calls kept for replay (sealed, for a day) whose outcome
 * names the erased customer, whatever the call: its own identify, a
 * referee's identify whose `referredBy` was this customer, a referral.
 * Found by what holds it: the customer's id in the outcome's bytes (a
 * protobuf string is its UTF-8 bytes, and ids are unique), not by who
 * refers whom today. A retry with such a key then runs again, and answers
 * what the service holds now.
 */
async function forgetOutcomesAbout(
  store: TenantStore,
  id: string,
  secretBox: SecretBox,
): Promise<void> {
  const mark = Buffer.from(id);
  for (const record of await store.idempotency.records()) {
    const outcome = record.outcome;
    if (!outcome) continue;
    const held =
      "responseSealed" in outcome
        ? [Buffer.from(secretBox.open(outcome.responseSealed), "base64")]
        : [
            Buffer.from(outcome.message),
            ...outcome.details.map((detail) => Buffer.from(detail.value, "base64")),
          ];
    if (held.some((bytes) => bytes.includes(mark))) await store.idempotency.forget(record);
  }
}

/** Creates the CustomersService implementation. */
export function createCustomersService(
  deps: EvidenceDeps & {
    notifyWebhooks: () => void;
    /** The base of the share links (PUBLIC_URL). */
    publicUrl: string;
  },
): ServiceImpl<typeof CustomersService> {
  const { clock } = deps;
  return {
    async identifyCustomer(request, context) {
      const caller = callerOf(context);
      const { store } = caller;
      const externalUserId = requiredText(request.externalUserId, "externalUserId");
      const name = requiredText(request.name, "name");
      // A click to attach a new customer to is checked before anything is
      // written; it names its campaign's environment when the call names none.
      const clickId = optionalText(request.clickId, "clickId");
      const byClick =
        clickId === undefined
          ? null
          : await clickAttribution(store, context.values.get(codeLookupsKey), clickId, clock);
      const environment =
        byClick && request.environment === Environment.UNSPECIFIED
          ? byClick.campaign.environment
          : environmentOrProduction(request.environment);
      if (byClick && byClick.campaign.environment !== environment) {
        throw invalidArgument(
          "clickId",
          `is a click on a ${byClick.campaign.environment} campaign`,
        );
      }
      const input = {
        externalUserId,
        name,
        email: optionalEmail(request.email, "email"),
        environment,
        customProperties: request.customProperties
          ? checkedCustomProperties(request.customProperties)
          : undefined,
      };
      const sentContext = checkedContext(caller, request.context);
      const verification = await verificationOf(
        caller,
        deps,
        input.externalUserId,
        optionalUserHash(request.userHash),
      );
      if (verification === "unverified") {
        // Without proof of who calls, an existing customer is not changed.
        const existing = await store.customers.findByExternalId(
          input.environment,
          input.externalUserId,
        );
        const changed = existing ? changedCustomerFields(existing, input) : [];
        if (changed.length > 0) {
          throw userHashNeeded(
            `is required to change an existing customer's ${changed.join(", ")} with a public key`,
          );
        }
      }
      const at = clock();
      const id = newId("cus", at);
      const network = await networkOfCall(store, deps, endUserOf(caller, context, sentContext));
      const doc = await store.customers.identify(input, {
        newId: id,
        at,
        outbox: [customerIdentified(id, at)],
        profileOnCreateOnly: verification === "unverified",
        network,
      });
      if (byClick && doc._id === id && byClick.campaign.isLive) {
        // The new customer is the click's referee (docs/links.md).
        await attributeReferral(
          deps,
          caller,
          byClick.campaign,
          byClick.referrer,
          doc,
          false,
          network,
          byClick.record,
        );
        deps.notifyWebhooks();
        const [customer] = await store.customers.messages([doc]);
        return { customer };
      }
      deps.notifyWebhooks();
      if (doc._id === id) return { customer: newCustomerMessage(doc) };
      const [customer] = await store.customers.messages([doc]);
      if (!customer || verification !== "unverified") return { customer };
      // An unverified caller sees what it sent or created, not what is stored.
      return {
        customer: redactedCustomer(customer, (referrerId) =>
          create(CustomerSummarySchema, { id: referrerId }),
        ),
      };
    },

    async listShareLinks(request, context) {
      const caller = callerOf(context);
      const { store } = caller;
      const id = requiredText(request.id, "id");
      const campaignId = optionalText(request.campaignId, "campaignId");
      const userHash = optionalUserHash(request.userHash);
      const customer = await store.customers.find(id);
      if (!customer || customer.deletedAt !== null) throw notFound(`customer ${id}`);
      // A customer's links are its own: an app shows them with its backend's proof (docs/trust.md).
      const verification = await verificationOf(caller, deps, customer.externalUserId, userHash);
      if (verification === "unverified") {
        throw userHashNeeded("is required to read a customer's share links with a public key");
      }
      const campaign = campaignId
        ? await store.campaigns.find(campaignId)
        : await store.campaigns.findDefault(customer.environment);
      if (!campaign) throw notFound(campaignId ? `campaign ${campaignId}` : "default campaign");
      if (campaign.environment !== customer.environment) {
        throw invalidArgument(
          "campaignId",
          `is a ${campaign.environment} campaign, and the customer is a ${customer.environment} one`,
        );
      }
      const { links, qrCodeUrl } = shareLinksOf(
        deps.publicUrl,
        customer.referralCode,
        campaign._id,
      );
      return { campaignId: campaign._id, referralCode: customer.referralCode, links, qrCodeUrl };
    },

    async getCustomer(request, context) {
      const { store } = callerOf(context);
      const id = requiredText(request.id, "id");
      const customer = await store.customers.view(id);
      if (!customer) throw notFound(`customer ${id}`);
      // A kept view answers with one shared response, encoded once.
      return isShared(customer)
        ? sharedFrom(customer, GetCustomerResponseSchema, () => ({ customer }))
        : { customer };
    },

    async eraseCustomer(request, context) {
      const customer = await eraseCustomerOf(callerOf(context).store, request.id, "id", deps);
      return { customer };
    },

    async exportCustomer(request, context) {
      const { store } = callerOf(context);
      const id = requiredText(request.id, "id");
      const page = pageOf(request.limit ?? limits.maxPageSize, request.offset);
      const exportedAt = clock();
      const customer = await store.customers.view(id);
      if (!customer) throw notFound(`customer ${id}`);
      const environment = environmentName(customer.environment) ?? "production";
      const [asReferrer, asReferee, checkpoints, grants, events] = await Promise.all([
        store.referrals.findMany({ referrerId: id }, page),
        store.referrals.findMany({ refereeId: id }, page),
        store.checkpoints.findOfCustomer({ _id: id, environment }, page),
        store.rewards.findMany({ customerId: id }, page),
        store.events.aboutCustomer(id, page),
      ]);
      const pageEnds = page.offset + page.limit;
      return {
        exportedAt: timestampFromDate(exportedAt),
        customer,
        referralsAsReferrer: asReferrer.docs.map((doc) => exportedReferral(doc, "referrer")),
        referralsAsReferee: asReferee.docs.map((doc) => exportedReferral(doc, "referee")),
        checkpoints: checkpoints.docs.map((doc) => messageFromDoc(CheckpointSchema, doc)),
        rewardGrants: await grantMessages(store, grants.docs),
        events: events.docs.map((event) => ({
          id: event._id,
          type: event.type,
          createdAt: timestampFromDate(event.createdAt),
          payload: JSON.parse(event.payload) as JsonObject,
        })),
        limit: page.limit,
        offset: page.offset,
        hasMore:
          [asReferrer, asReferee, grants].some(({ total }) => total > pageEnds) ||
          checkpoints.more ||
          events.more,
      };
    },

    async listCustomers(request, context) {
      const { store } = callerOf(context);
      const page = pageOf(request.limit, request.offset);
      const { total, customers } = await store.customers.page(
        {
          environment: environmentName(request.environment),
          externalUserId: optionalText(request.externalUserId, "externalUserId"),
          email: optionalText(request.email, "email", limits.email),
          referralCode: optionalText(request.referralCode, "referralCode"),
          deleted: request.deleted === true,
        },
        page,
      );
      return { total, ...page, data: customers };
    },
  };
}

/**
 * customProperties as both engines store them faithfully: at most 50 keys,
 * 16 levels of objects and arrays and 16 KiB serialized; at any depth, keys
 * of 1 to 256 characters that do not start with `$` and contain no `.` or
 * NUL, and are not `__proto__`; numbers finite. (MongoDB reads `$` and `.`
 * as operators and paths and ends BSON keys at NUL; `__proto__` is
 * JavaScript's prototype; binary protobuf can carry NaN, which JSON has no
 * word for.) The walk is iterative and checks depth as it goes, so nothing
 * recurses into an unchecked value.
 */
function checkedCustomProperties(properties: JsonObject): JsonObject {
  if (Object.keys(properties).length > limits.customPropertyKeys) {
    throw invalidArgument(
      "customProperties",
      `must have at most ${limits.customPropertyKeys} keys`,
    );
  }
  const pending: Array<{ value: JsonValue; path: string; depth: number }> = [
    { value: properties, path: "customProperties", depth: 1 },
  ];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const { value, path, depth } = next;
    if (typeof value === "number" && !Number.isFinite(value)) {
      throw invalidArgument(path, "must be a finite number");
    }
    // Values are the app's own data, kept as sent; only what no text may hold is refused.
    if (typeof value === "string") {
      const text = cleanText(value, "multiline");
      if ("refused" in text) throw invalidArgument(path, text.refused);
    }
    if (typeof value !== "object" || value === null) continue;
    if (depth > limits.customPropertiesDepth) {
      throw invalidArgument(
        "customProperties",
        `must not nest more than ${limits.customPropertiesDepth} levels of objects and arrays`,
      );
    }
    if (Array.isArray(value)) {
      value.forEach((item, index) => {
        pending.push({ value: item, path: `${path}[${index}]`, depth: depth + 1 });
      });
      continue;
    }
    for (const key of Object.keys(value)) {
      const problem = propertyKeyProblem(key);
      if (problem) throw invalidArgument(path, problem);
      pending.push({ value: value[key] as JsonValue, path: `${path}.${key}`, depth: depth + 1 });
    }
  }
  if (Buffer.byteLength(JSON.stringify(properties)) > limits.customPropertiesBytes) {
    throw invalidArgument(
      "customProperties",
      `must be at most ${limits.customPropertiesBytes} bytes serialized`,
    );
  }
  return properties;
}

/** Why a customProperties key cannot be stored as it is, or undefined when it can. */
function propertyKeyProblem(key: string): string | undefined {
  if (key === "") return "has an empty key";
  if (key.length > limits.shortText) {
    return `has a key longer than ${limits.shortText} characters`;
  }
  const quoted = JSON.stringify(key);
  if (key.startsWith("$")) return `has the key ${quoted}: keys must not start with '$'`;
  if (key.includes(".")) return `has the key ${quoted}: keys must not contain '.'`;
  const text = cleanText(key, "line");
  if ("refused" in text) return `has the key ${quoted}: keys ${text.refused}`;
  if (key === "__proto__") return `has the key ${quoted}: keys must not be __proto__`;
  return undefined;
}

/**
 * A referral as a customer's export shows it: its fraud evidence holds the
 * customer's own email and network, never the other party's (the export
 * names other customers by id only, docs/privacy.md).
 */
function exportedReferral(doc: ReferralDoc, side: "referrer" | "referee"): Referral {
  const { evidence } = doc;
  if (!evidence) return messageFromDoc(ReferralSchema, doc);
  const other =
    side === "referrer"
      ? { refereeEmail: null, refereeNetwork: null }
      : { referrerEmail: null, referrerNetwork: null };
  const shown: ReferralDoc = { ...doc, evidence: { ...evidence, ...other } };
  return messageFromDoc(ReferralSchema, shown);
}
