/**
 * The stored documents. Every document's `_id` is its public id (a prefixed
 * random string); tenant-owned documents carry `organizationId` and
 * `applicationId`, and every update sets `updatedAt`.
 */

import type { FraudRuleName } from "../domain/fraud-rules.js";
import type { ReferralStatusName, StatusChangeCauseName } from "../domain/referral-status.js";

/** `production` or `test`: the REST words of `referral.v1.Environment`. */
export type EnvironmentName = "production" | "test";

/** The REST words of `referral.v1.ApiKeyKind`. */
export type ApiKeyKindName = "public" | "secret";

/** An organization: owns applications. */
export interface OrganizationDoc {
  /** Public id, prefix `org_`. */
  _id: string;
  /** Display name. */
  name: string;
  /** Creation time. */
  createdAt: Date;
  /** Last change. */
  updatedAt: Date;
}

/** An application: the tenant every record belongs to. */
export interface ApplicationDoc {
  /** Public id, prefix `app_`. */
  _id: string;
  /** Display name. */
  name: string;
  /** The owning organization. */
  organizationId: string;
  /** Creation time. */
  createdAt: Date;
  /** Last change. */
  updatedAt: Date;
}

/** An API key, stored as a hash; the key itself is shown once at creation. */
export interface ApiKeyDoc {
  /** Public id, prefix `key_`. */
  _id: string;
  /** The owning organization. */
  organizationId: string;
  /** The application the key acts for. */
  applicationId: string;
  /** What the key may do. */
  kind: ApiKeyKindName;
  /** SHA-256 of the key, hex; unique. Keys are 256-bit random, so a fast hash is enough. */
  hash: string;
  /** The first characters of the key, to recognise it. */
  prefix: string;
  /** A note for humans. */
  name: string | null;
  /** Creation time. */
  createdAt: Date;
  /** Last change. */
  updatedAt: Date;
  /** When revoked; null while valid. */
  revokedAt: Date | null;
}

/** A customer: an end user of the application. */
export interface CustomerDoc {
  /** Public id, prefix `cus_`. */
  _id: string;
  /** The owning organization. */
  organizationId: string;
  /** The owning application. */
  applicationId: string;
  /** The customer's environment. */
  environment: EnvironmentName;
  /** The id in the application's own system; unique per application and environment. */
  externalUserId: string;
  /** The email as given. */
  email: string | null;
  /** The email lowercased and trimmed, for case-insensitive lookup. */
  emailNormalized: string | null;
  /** The mailbox the email reaches (see `canonicalEmail`), for the fraud rules. */
  emailCanonical: string | null;
  /** The name. */
  name: string;
  /** The code the customer shares; unique per application and environment. */
  referralCode: string;
  /** Free-form data. */
  customProperties: Record<string, unknown>;
  /** Creation time. */
  createdAt: Date;
  /** Last change. */
  updatedAt: Date;
  /** Deletion time; null while the customer exists. */
  deletedAt: Date | null;
}

/** One reason a referral was flagged. */
export interface SuspectedFraudDoc {
  /** Rule name. */
  type: FraudRuleName;
  /** Explanation. */
  message: string;
}

/** One entry of a referral's status history. */
export interface StatusChangeDoc {
  /** The status before; null for the entry written at creation. */
  fromStatus: ReferralStatusName | null;
  /** The status after. */
  toStatus: ReferralStatusName;
  /** What made the change. */
  cause: StatusChangeCauseName;
  /** The API key (creation, re-attribution, review) or checkpoint (conversion). */
  actorId: string;
  /** The reviewer's reason or the rules that fired; null for none. */
  reason: string | null;
  /** When. */
  changedAt: Date;
}

/** A referral: referrer, referee and campaign. */
export interface ReferralDoc {
  /** Public id, prefix `ref_`. */
  _id: string;
  /** The owning organization. */
  organizationId: string;
  /** The owning application. */
  applicationId: string;
  /** The campaign's environment. */
  environment: EnvironmentName;
  /** The campaign. */
  campaignId: string;
  /** The customer whose code was used. */
  referrerId: string;
  /** The referred customer; unique per campaign. */
  refereeId: string;
  /** Lifecycle status. */
  status: ReferralStatusName;
  /** Why the referral was flagged. */
  suspectedFrauds: SuspectedFraudDoc[];
  /** Every status it has had, oldest first. */
  statusHistory: StatusChangeDoc[];
  /** When the current referrer was attributed (creation or re-attribution); the velocity rule counts by it. */
  attributedAt: Date;
  /** Creation time. */
  createdAt: Date;
  /** Last change. */
  updatedAt: Date;
  /** Deletion time; null while the referral exists. */
  deletedAt: Date | null;
}

/** A checkpoint: a named event of a customer. */
export interface CheckpointDoc {
  /** Public id, prefix `chk_`. */
  _id: string;
  /** The owning organization. */
  organizationId: string;
  /** The owning application. */
  applicationId: string;
  /** The customer's environment. */
  environment: EnvironmentName;
  /** The customer. */
  customerId: string;
  /** The customer's external user id, as sent. */
  externalUserId: string;
  /** The checkpoint's name. */
  name: string;
  /** When it was ingested. */
  createdAt: Date;
}

/**
 * A campaign with its rewards, emails, pages and FAQs embedded, so a campaign
 * is read and written as one document. Apart from `_id` its fields are the
 * plain form of `referral.v1.Campaign` (see `src/contract/plain-codec.ts`).
 */
export interface CampaignDoc {
  /** Public id, prefix `cmp_`. */
  _id: string;
  /** The owning organization. */
  organizationId: string;
  /** The owning application. */
  applicationId: string;
  /** The campaign's environment. */
  environment: EnvironmentName;
  /** Accepts referrals. */
  isLive: boolean;
  /** The environment's default campaign. */
  isDefault: boolean;
  /** The reward trigger set by hand (a checkpoint name); wins over the proposed one. */
  manualRewardTrigger?: string | null;
  /** The proposed reward trigger (a checkpoint name). */
  proposedRewardTrigger?: string | null;
  /** Creation time. */
  createdAt: Date;
  /** Last change. */
  updatedAt: Date;
  /** Deletion time; null while the campaign exists. */
  deletedAt: Date | null;
  /** The remaining plain fields of `referral.v1.Campaign`. */
  [field: string]: unknown;
}

/** A webhook endpoint; the signing secret is stored encrypted. */
export interface WebhookDoc {
  /** Public id, prefix `whk_`. */
  _id: string;
  /** The owning organization. */
  organizationId: string;
  /** The owning application. */
  applicationId: string;
  /** Delivery URL. */
  url: string;
  /** A note for humans. */
  description: string | null;
  /** Event types delivered; empty for all. */
  eventTypes: string[];
  /** False while paused. */
  enabled: boolean;
  /** The environment whose events are delivered; null for both. */
  environment: EnvironmentName | null;
  /** Creation time. */
  createdAt: Date;
  /** Last change. */
  updatedAt: Date;
}
