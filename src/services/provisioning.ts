import type { MessageInitShape } from "@bufbuild/protobuf";
import {
  type CampaignSchema,
  Currency,
  EmailType,
  Platform,
  RewardLimitInterval,
  RewardLimitUnit,
  RewardMethod,
  RewardParty,
  RewardType,
} from "../../gen/referral/v1/resources_pb.js";
import { apiKeyKindOf } from "../domain/api-keys.js";
import type { Clock, EnvironmentName } from "../domain/tenancy.js";
import { insertCampaign } from "../store/campaigns.js";
import type { Store } from "../store/store.js";
import {
  insertApiKey,
  insertApplication,
  insertOrganization,
  tenantOfApplication,
} from "../store/tenants.js";
import { newCampaignDoc, placementCheckpointsFor } from "./campaign-records.js";

/** What first start-up provisions, and the keys it was given. */
export interface ProvisionOptions {
  readonly clock: Clock;
  /** Used as the demo secret key when set (so scripts know it). */
  readonly bootstrapSecretKey?: string;
  /** Used as the demo public key when set. */
  readonly bootstrapPublicKey?: string;
}

/** The demo tenant created on first start, with its keys in plain text (shown once). */
export interface ProvisionedDemo {
  readonly organizationId: string;
  readonly applicationId: string;
  readonly secretKey: string;
  readonly publicKey: string;
}

/**
 * On an empty store (no application yet), creates a demo organization and
 * application, a default live campaign in each environment and one secret
 * and one public key. Returns undefined when the store already has data.
 */
export async function provisionDemo(
  store: Store,
  options: ProvisionOptions,
): Promise<ProvisionedDemo | undefined> {
  const db = store.system;
  if ((await db.applications.countDocuments({})) > 0) return undefined;
  for (const [name, key, kind] of [
    ["BOOTSTRAP_SECRET_KEY", options.bootstrapSecretKey, "secret"],
    ["BOOTSTRAP_PUBLIC_KEY", options.bootstrapPublicKey, "public"],
  ] as const) {
    if (key !== undefined && apiKeyKindOf(key) !== kind) {
      throw new Error(`${name} must start with ${kind === "secret" ? "sk_" : "pk_"}`);
    }
  }
  const now = options.clock();
  const organization = await insertOrganization(db, "Demo Organization", now);
  const application = await insertApplication(db, organization._id, "Demo App", now);
  const tenant = tenantOfApplication(application);
  for (const environment of ["production", "test"] as const) {
    const campaign = newCampaignDoc(tenant, demoCampaign(environment), now);
    campaign.placementCheckpoints = placementCheckpointsFor(campaign, demoPlacements, now);
    await insertCampaign(db, campaign);
  }
  const secret = await insertApiKey(db, application, "secret", now, {
    name: "demo secret key",
    key: options.bootstrapSecretKey,
  });
  const publicKey = await insertApiKey(db, application, "public", now, {
    name: "demo public key",
    key: options.bootstrapPublicKey,
  });
  return {
    organizationId: organization._id,
    applicationId: application._id,
    secretKey: secret.key,
    publicKey: publicKey.key,
  };
}

/** The demo campaigns' placement checkpoint: the welcome page's banner once onboarding is done. */
const demoPlacements = [{ checkpointName: "onboarding_complete", placementId: "home_banner" }];

/** A realistic default campaign: give $20, get $20, converting on "purchase". */
export function demoCampaign(
  environment: EnvironmentName,
): MessageInitShape<typeof CampaignSchema> {
  return {
    name: environment === "production" ? "Give $20, get $20" : "Give $20, get $20 (test)",
    environment: environment === "production" ? 1 : 2,
    isLive: true,
    isDefault: true,
    refereeLandingPageUrl: "https://example.com/welcome",
    termsUrl: "https://example.com/referral-terms",
    proposedRewardTrigger: "purchase",
    inviteMessage: "I love this app. Sign up with my code and we both get $20!",
    platforms: [Platform.MOBILE, Platform.WEB],
    rewards: [
      {
        name: "$20 for every friend who buys",
        description: "Paid by PayPal when your friend completes a first purchase.",
        type: RewardType.PAYOUT,
        party: RewardParty.REFERRER,
        method: RewardMethod.PAYPAL,
        currency: Currency.USD,
        payoutAmount: 20,
        limit: 10,
        limitUnit: RewardLimitUnit.REWARDS,
        limitInterval: RewardLimitInterval.YEAR,
      },
      {
        name: "$20 off your first order",
        description: "A one-off discount on your first purchase.",
        type: RewardType.DISCOUNT,
        party: RewardParty.REFEREE,
        method: RewardMethod.MOBILE_COUPON,
        currency: Currency.USD,
        discountAmount: 20,
        limit: 1,
        limitUnit: RewardLimitUnit.REWARDS,
        limitInterval: RewardLimitInterval.LIFETIME,
      },
    ],
    emails: [
      {
        type: EmailType.REFERRER_REWARD,
        subjectLine: "You earned $20!",
        message: "Your friend just made a first purchase. Your $20 is on its way.",
        buttonText: "Invite more friends",
        buttonColor: "#4f46e5",
      },
      {
        type: EmailType.INVITEE_REWARD,
        subjectLine: "Welcome! Here is $20 off",
        message: "A friend invited you. Enjoy $20 off your first order.",
        buttonText: "Shop now",
        buttonColor: "#4f46e5",
      },
    ],
    campaignPages: [
      { path: "/invite", isEmpty: false, name: "Invite friends", platform: Platform.WEB },
      { path: "/welcome", isEmpty: false, name: "Welcome", placementId: "home_banner" },
    ],
    faqs: [
      {
        question: "When do I get my reward?",
        answer: "As soon as your friend completes a first purchase.",
      },
      {
        question: "How many friends can I invite?",
        answer: "As many as you like; rewards are capped at 10 a year.",
      },
    ],
  };
}
