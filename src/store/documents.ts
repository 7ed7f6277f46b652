/**
 * The stored documents. Every document's `_id` is its public id (a prefixed
 * random string); tenant-owned documents carry `organizationId` and
 * `applicationId`, and every update sets `updatedAt`.
 */

import type { CheckpointRecord } from "../domain/checkpoint.js";
import type { PublicCheckpointsName } from "../domain/conversion.js";
import type { NetworkEvidence } from "../domain/fraud-evidence.js";
import type { FraudPolicyDoc } from "../domain/fraud-policy.js";
import type { IdentityVerificationName } from "../domain/identity.js";
import type { ReferralRecord } from "../domain/referral-transitions.js";
import type { GrantRecord, PlannedGrant } from "../domain/reward-grant.js";
import type { LimitUnitName } from "../domain/reward-ledger.js";
import type { RewardTerms } from "../domain/reward-plan.js";
import type { ApiKeyKindName, EnvironmentName } from "../domain/tenancy.js";
import type { WebhookEventType } from "../domain/webhook-events.js";

/** An organization: owns applications. */
export interface OrganizationDoc {
  /** Public id, prefix `org_`. */
  _id: string;
  name: string;
  createdAt: Date;
  updatedAt: Date;
}

/** An application: the tenant every record belongs to. */
export interface ApplicationDoc {
  /** Public id, prefix `app_`. */
  _id: string;
  name: string;
  organizationId: string;
  createdAt: Date;
  updatedAt: Date;
  /** What public-key calls must prove (docs/trust.md); protect when unset. */
  identityVerification?: IdentityVerificationName;
  /** The identity secret, sealed with the secret box; unset until one is made. */
  identitySecretSealed?: string;
  /** When the current identity secret was made. */
  identitySecretCreatedAt?: Date;
  /** The previous identity secret, sealed, verifying until `previousIdentitySecretExpiresAt`. */
  previousIdentitySecretSealed?: string | null;
  previousIdentitySecretExpiresAt?: Date | null;
  /** Whether referrals keep network facts (docs/fraud.md); collect when unset. */
  networkFacts?: NetworkFactsName;
  /**
   * The key of the network facts' keyed hashes, sealed with the secret box;
   * made at the first need. Never shown.
   */
  networkKeySealed?: string;
}

/** The REST words of `referral.v1.NetworkFacts`. */
export type NetworkFactsName = "collect" | "off";

/** An API key, stored as a hash; the key itself is shown once at creation. */
export interface ApiKeyDoc {
  /** Public id, prefix `key_`. */
  _id: string;
  organizationId: string;
  applicationId: string;
  kind: ApiKeyKindName;
  /** SHA-256 of the key, hex; unique. Keys are 256-bit random, so a fast hash is enough. */
  hash: string;
  /** The first characters of the key, to recognise it. */
  prefix: string;
  name: string | null;
  createdAt: Date;
  updatedAt: Date;
  /** When revoked; null while valid. */
  revokedAt: Date | null;
}

/** A customer: an end user of the application. */
export interface CustomerDoc {
  /** Public id, prefix `cus_`. */
  _id: string;
  organizationId: string;
  applicationId: string;
  environment: EnvironmentName;
  /** The id in the application's own system; unique per application and environment. */
  externalUserId: string;
  email: string | null;
  /** The email lowercased and trimmed, for case-insensitive lookup. */
  emailNormalized: string | null;
  /** The mailbox the email reaches (see `canonicalEmail`), for the fraud rules. */
  emailCanonical: string | null;
  name: string;
  /** The code the customer shares; unique per application and environment. */
  referralCode: string;
  customProperties: Record<string, unknown>;
  /**
   * The end user's network as its last identify that could change the
   * customer saw it, as keyed hashes (fraud evidence, docs/fraud.md);
   * absent without one, and erased with the customer.
   */
  network?: NetworkEvidence | null;
  /** Events not yet relayed. */
  outbox?: OutboxEntryDoc[];
  /** Set while the outbox holds events: the relay's indexed way to find them. */
  outboxPending?: true;
  /** Manual grants being made for the customer (see {@link GrantPlanHolder}). */
  grantPlan?: PlannedGrant[];
  grantPlanPending?: true;
  createdAt: Date;
  updatedAt: Date;
  /** Deletion time; null while the customer exists. */
  deletedAt: Date | null;
}

/**
 * A referral as stored: the referral its rules make and move (see
 * `domain/referral-transitions.ts`), and the work its writes leave.
 */
export interface ReferralDoc extends ReferralRecord {
  /** Events not yet relayed. */
  outbox?: OutboxEntryDoc[];
  /** Set while the outbox holds events: the relay's indexed way to find them. */
  outboxPending?: true;
  /** The grants its acceptance earned, until they are stored (see {@link GrantPlanHolder}). */
  grantPlan?: PlannedGrant[];
  grantPlanPending?: true;
  /**
   * Set by the reversal, until its grants are voided or clawed back: the
   * sweep finishes a reversal a crash interrupted.
   */
  reversalPending?: true;
}

/** A checkpoint as stored: the checkpoint (see `domain/checkpoint.ts`) and its outbox. */
export interface CheckpointDoc extends CheckpointRecord {
  /** Events not yet relayed. */
  outbox?: OutboxEntryDoc[];
  /** Set while the outbox holds events: the relay's indexed way to find them. */
  outboxPending?: true;
}

/**
 * A campaign with its rewards, emails, pages and FAQs embedded, so a campaign
 * is read and written as one document. Apart from `_id` and the storage
 * fields marked so, its fields are the plain form of `referral.v1.Campaign`
 * (see `src/contract/plain-codec.ts`); a field added to the message since a
 * campaign was stored is absent from it.
 */
export interface CampaignDoc {
  /** Public id, prefix `cmp_`. */
  _id: string;
  name: string;
  refereeLandingPageUrl: string | null;
  termsUrl: string | null;
  /** The proposed reward trigger (a checkpoint name). */
  proposedRewardTrigger?: string | null;
  /** The reward trigger set by hand (a checkpoint name); wins over the proposed one. */
  manualRewardTrigger?: string | null;
  inviteMessage: string | null;
  isLive: boolean;
  /** The environment's default campaign. */
  isDefault: boolean;
  environment: EnvironmentName;
  /** The campaign it was copied from, if any. */
  copiedFromCampaignId: string | null;
  createdAt: Date;
  updatedAt: Date;
  /** Deletion time; null while the campaign exists. */
  deletedAt: Date | null;
  organizationId: string;
  applicationId: string;
  /** When an app last reported the campaign shown; a ping does not move `updatedAt`. */
  lastPingAt?: Date | null;
  /** The Origin header of that report; null without one. */
  lastPingOrigin?: string | null;
  /** Its rewards, the terms the ledger grants by. */
  rewards: StoredReward[];
  emails: CampaignEmailDoc[];
  campaignPages: CampaignPageDoc[];
  faqs: CampaignFaqDoc[];
  platforms: PlatformName[];
  /** The calendar of its limit windows and its days of stats; absent on campaigns stored before it (UTC). */
  timeZone?: string;
  /** Its public leaderboard's settings; absent on campaigns stored before leaderboards. */
  leaderboard?: CampaignLeaderboardDoc | null;
  /** What an unverified public-key trigger checkpoint does; absent on campaigns stored before it (`hold`). */
  publicCheckpoints?: PublicCheckpointsName;
  /** How its share links attribute (docs/links.md); absent on campaigns stored before links. */
  attribution?: { windowDays: number; model: "first_click" | "last_click" } | null;
  /** Its fraud policy (completed with the defaults when saved); absent or null for the environment's. */
  fraudPolicy?: FraudPolicyDoc | null;
  /**
   * Storage: the reward trigger as a checkpoint setting: its id and times,
   * kept in step with the trigger by every update; null without a trigger.
   * Absent on campaigns stored before checkpoints existed (its id is then
   * derived from the campaign's, see `rewardCheckpointOf` in
   * services/campaign-records.ts).
   */
  rewardCheckpoint?: CampaignCheckpointDoc | null;
  /** Storage: the placement checkpoints the operator set, in their order; absent means none. */
  placementCheckpoints?: CampaignCheckpointDoc[];
}

/** The REST words of `referral.v1.Platform`. */
export type PlatformName = "mobile" | "web";

/**
 * A campaign reward as its campaign stores it: the plain form of
 * `referral.v1.Reward`, the ledger's terms (see `RewardTerms`) with the
 * reward's ids and times.
 */
export interface StoredReward extends RewardTerms {
  readonly name: string | null;
  readonly description: string | null;
  readonly campaignId: string;
  readonly organizationId: string;
  readonly applicationId: string;
  readonly createdAt: Date;
  readonly updatedAt: Date;
  readonly deletedAt: Date | null;
}

/** An email of a campaign, the plain form of `referral.v1.Email`. */
export interface CampaignEmailDoc {
  id: string;
  organizationId: string;
  applicationId: string;
  campaignId: string;
  message: string;
  subjectLine: string;
  buttonText: string;
  buttonColor: string;
  /** The REST word of `referral.v1.EmailType`. */
  type: "referrer:reward" | "invitee:reward" | null;
  createdAt: Date;
  updatedAt: Date;
  deletedAt: Date | null;
  logoUrl: string | null;
  logoSize: number | null;
}

/** A page of a campaign, the plain form of `referral.v1.CampaignPage`. */
export interface CampaignPageDoc {
  id: string;
  path: string;
  isEmpty: boolean;
  name: string | null;
  placementId: string | null;
  platform: PlatformName | null;
}

/** A question and answer of a campaign, the plain form of `referral.v1.Faq`. */
export interface CampaignFaqDoc {
  id: string;
  question: string;
  answer: string;
}

/** A campaign's leaderboard settings, the plain form of `referral.v1.CampaignLeaderboard`. */
export interface CampaignLeaderboardDoc {
  public: boolean;
  minimumAccepted: number;
}

/**
 * A checkpoint setting of a campaign, embedded in it (a campaign has a few),
 * so it is read with the campaign and written in the same update as the
 * trigger it follows.
 */
export interface CampaignCheckpointDoc {
  /** Public id, prefix `ccp_`. */
  id: string;
  checkpointName: string;
  /** The placement shown; null for the reward checkpoint. */
  placementId: string | null;
  createdAt: Date;
  /** When the name or the placement last changed. */
  updatedAt: Date;
}

/** A webhook endpoint; the signing secret is stored encrypted. */
export interface WebhookDoc {
  /** Public id, prefix `whk_`. */
  _id: string;
  organizationId: string;
  applicationId: string;
  url: string;
  description: string | null;
  /** Event types delivered; empty for all. */
  eventTypes: string[];
  /** False while paused (by the application, or by the service after continuous failure). */
  enabled: boolean;
  /** The environment whose events are delivered; null for both. */
  environment: EnvironmentName | null;
  /** The signing secret, sealed by the secret box. */
  secretSealed: string;
  /** The secret before the last rotation, still signing until `previousSecretExpiresAt`. */
  previousSecretSealed: string | null;
  /** When the previous secret stops signing. */
  previousSecretExpiresAt: Date | null;
  /** Delivery health, shown as `health`. */
  health: WebhookHealthDoc;
  createdAt: Date;
  updatedAt: Date;
  /** Deletion time; null while the endpoint exists. */
  deletedAt: Date | null;
}

/** How deliveries to an endpoint are going. */
export interface WebhookHealthDoc {
  lastSuccessAt: Date | null;
  lastFailureAt: Date | null;
  consecutiveFailures: number;
  failingSince: Date | null;
  disabledAt: Date | null;
  disabledReason: string | null;
}

/**
 * An event waiting in a document's outbox: written in the same atomic
 * update as the change it describes, moved to `events` by the relay.
 */
export interface OutboxEntryDoc {
  /** The event's id, prefix `evt_`: the `webhook-id` receivers deduplicate by. */
  id: string;
  /** The event type; for an identify, decided by the relay (see `newCustomerId`). */
  type: WebhookEventType | "customer.identified";
  /** When the change happened. */
  occurredAt: Date;
  /** The resource as REST shows it, captured with the change; absent when the relay reads it. */
  data?: Record<string, unknown>;
  /** For an identify: the id the customer gets if the upsert inserts it, so created vs updated is known. */
  newCustomerId?: string;
}

/** A relayed event: its payload is fixed, so every delivery and retry sends the same bytes. */
export interface EventDoc {
  /** The event id, prefix `evt_`. */
  _id: string;
  organizationId: string;
  applicationId: string;
  /** The environment of the resource. */
  environment: EnvironmentName;
  type: WebhookEventType;
  /** The JSON body sent: `{ type, timestamp, data }` (stored packed, see `packPayload`). */
  payload: string;
  /** When the change happened. */
  createdAt: Date;
  /** The customer whose personal data the payload holds, if any: what erasure rewrites. */
  customerId?: string;
  /**
   * The referrer whose data the payload's `referredBy` holds (a customer's
   * events), as it was when the event was stored: what erasure rewrites
   * too, whoever refers the customer since.
   */
  referredById?: string;
  /**
   * Its delivery to one endpoint, kept here rather than in a delivery
   * document of its own when it succeeded at its first attempt (see
   * `deliveryKeptIn`): nearly every event is delivered so, and the
   * delivery's own document and index entries took more room than the event.
   */
  delivered?: KeptDeliveryDoc;
}

/** A delivery that succeeded at its first attempt, kept in its event (see `EventDoc.delivered`). */
export interface KeptDeliveryDoc {
  /** The endpoint. */
  webhookId: string;
  /** When it was attempted, the one attempt. */
  at: Date;
  statusCode: number;
  durationMs: number;
}

/** The REST words of `referral.v1.WebhookDeliveryStatus`. */
export type DeliveryStatusName = "pending" | "succeeded" | "failed" | "skipped";

/** One HTTP request to an endpoint. */
export interface AttemptDoc {
  attemptedAt: Date;
  statusCode: number | null;
  durationMs: number;
  error: string | null;
}

/** The delivery of one event to one endpoint; also the queue entry of its next attempt. */
export interface DeliveryDoc {
  /** Public id, prefix `whd_`. */
  _id: string;
  organizationId: string;
  applicationId: string;
  /** The endpoint. */
  webhookId: string;
  /** The event. */
  eventId: string;
  /** The event's type. */
  eventType: WebhookEventType;
  /** Where the delivery stands. */
  status: DeliveryStatusName;
  /** Every attempt, oldest first. */
  attempts: AttemptDoc[];
  /** Attempts made in the current run of the schedule (a redelivery starts over). */
  scheduleAttempts: number;
  /** When the next attempt is due; null unless pending. */
  nextAttemptAt: Date | null;
  /**
   * The due time a catch-up gave it when its endpoint answered again, its
   * retry waiting (see `bringForwardWaitingDeliveries`); absent until then.
   * Once per run of the schedule: brought forward and failed again, it
   * keeps to its schedule until a redelivery clears this.
   */
  broughtForwardTo?: Date | null;
  /** Until when a worker holds the delivery; the epoch when nobody does. */
  leaseUntil: Date;
  /** The worker holding the lease. */
  leaseOwner: string | null;
  createdAt: Date;
  updatedAt: Date;
}

/**
 * A write RPC sent with an idempotency key: while it runs, a lease; once it
 * has finished, its outcome, replayed to every retry with the same key
 * until `expiresAt`. Unique per tenant and key.
 */
export interface IdempotencyKeyDoc {
  /** Prefix `idk_`. */
  _id: string;
  /** The application whose key this is, or `admin` for the admin API's calls. */
  tenantId: string;
  /** The client's `Idempotency-Key`. */
  key: string;
  /** The RPC the key was first sent with (`Service/Method`). */
  rpc: string;
  /** SHA-256 of the RPC and its request message: a retry must send the same. */
  requestHash: string;
  /** The call running under the key; a new one when a call takes over an abandoned key. */
  leaseOwner: string;
  /** Until when a running call holds the key: a call that crashed frees it then. */
  leaseUntil: Date;
  /** How the call ended; null while it runs. */
  outcome: IdempotentOutcomeDoc | null;
  createdAt: Date;
  updatedAt: Date;
  /** When the key is forgotten (MongoDB's TTL index removes it, the embedded engine a sweep). */
  expiresAt: Date;
}

/**
 * A finished call as any protocol can replay it: the response message's
 * binary form, or the error's code, message and details.
 */
export type IdempotentOutcomeDoc =
  | {
      /**
       * The response message (`toBinary`, in base64), sealed by the secret
       * box: a response may hold a new API key or webhook secret.
       */
      responseSealed: string;
    }
  | {
      /** Connect's code word (`not_found`). */
      code: string;
      message: string;
      /** The error's details: message type names and their binary form in base64. */
      details: { type: string; value: string }[];
    };

/**
 * A document that carries grants about to be made: they are written into
 * it in the same atomic write as the decision that earns them (a referral's
 * acceptance; for a manual grant, on its recipient), then stored one by one
 * and removed. A crash in between leaves them there, and the reward sweep
 * makes them; grant ids are fixed in the plan, so nothing is made twice.
 */
export interface GrantPlanHolder {
  _id: string;
  organizationId: string;
  applicationId: string;
  grantPlan?: PlannedGrant[];
  grantPlanPending?: true;
}

/**
 * A reward grant as stored: the grant the ledger's rules make and move (see
 * `domain/reward-grant.ts`), and its outbox.
 */
export interface RewardGrantDoc extends GrantRecord {
  /** Events not yet relayed. */
  outbox?: OutboxEntryDoc[];
  /** Set while the outbox holds events: the relay's indexed way to find them. */
  outboxPending?: true;
}

/**
 * The amount one customer has used under one reward's amount limit in one
 * window. Grants take room here before they are stored, each under its own id, so
 * taking it again (a retry, the sweep after a crash) takes nothing more;
 * concurrent takers race on `version`, and exactly one of them wins each
 * round, so a limit is exact under any concurrency.
 */
export interface RewardAllowanceDoc {
  /** Derived: reward, recipient, unit, window (and currency for amounts). */
  _id: string;
  organizationId: string;
  applicationId: string;
  rewardId: string;
  customerId: string;
  unit: LimitUnitName;
  window: string;
  /** Minor units in use: the sum of `holds`. */
  used: number;
  /** What each grant holds, by grant id. */
  holds: Record<string, number>;
  /** Bumped by every write: writes apply only to the version they read. */
  version: number;
  createdAt: Date;
  updatedAt: Date;
}

/**
 * A campaign reward as it was at some moment, stored once per distinct
 * content and named by its hash: the grants made from it share it, so a
 * grant carries an id rather than a copy, and a campaign edited later
 * leaves it as it was.
 */
export interface RewardSnapshotDoc {
  /** `rws_` and a hash of the reward's plain form. */
  _id: string;
  organizationId: string;
  applicationId: string;
  /** The reward's plain form (`referral.v1.Reward`). */
  reward: StoredReward;
  createdAt: Date;
}

/**
 * A click on a share link (docs/links.md), or a bot's fetch of one: kept
 * with keyed hashes only (no address), until the campaign's attribution
 * window ends (`expiresAt`).
 */
export interface ClickDoc {
  /** Public id, prefix `clk_`: the `rclk` a landing page receives. */
  _id: string;
  organizationId: string;
  applicationId: string;
  environment: EnvironmentName;
  campaignId: string;
  /** The customer whose link it is. */
  referrerId: string;
  /** The referral code the link carried. */
  code: string;
  /** The channel the link named (`?ch=`); null for none. */
  channel: string | null;
  /** A bot's family (see `botReasonOf`); null for a person's click. */
  bot: string | null;
  /**
   * The visitor (keyed hash of address and User-Agent), the address and its
   * network (the fraud evidence's hashes); null while the application keeps
   * no network facts, and for a bot's fetch (its address is the sender's or
   * the platform's, not a visitor's).
   */
  visitorHash: string | null;
  addressHash: string | null;
  networkHash: string | null;
  userAgentFamily: string | null;
  /** Whether it was the visitor's first click on the campaign's links. */
  firstOfVisitor: boolean;
  createdAt: Date;
  /** When its attribution window ends, and it is removed. */
  expiresAt: Date;
}
