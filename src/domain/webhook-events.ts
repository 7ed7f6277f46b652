import type { RewardGrantStatusName } from "./reward-ledger.js";
import type { EnvironmentName } from "./tenancy.js";

/** Every event type, in catalogue order. */
export const webhookEventTypes = [
  "customer.created",
  "customer.updated",
  "customer.erased",
  "referral.created",
  "referral.updated",
  "referral.flagged",
  "referral.accepted",
  "referral.rejected",
  "referral.reversed",
  "fraud_review.resolved",
  "checkpoint.ingested",
  "reward_grant.created",
  "reward_grant.approved",
  "reward_grant.fulfilled",
  "reward_grant.rejected",
  "reward_grant.voided",
  "reward_grant.expired",
] as const;

/** One event type, for example `referral.accepted`. */
export type WebhookEventType = (typeof webhookEventTypes)[number];

/** True when the string names an event type of the catalogue. */
export function isWebhookEventType(value: string): value is WebhookEventType {
  return (webhookEventTypes as readonly string[]).includes(value);
}

/** What decides whether an endpoint receives an event. */
export interface EndpointInterest {
  readonly enabled: boolean;
  /** Empty for every type. */
  readonly eventTypes: readonly string[];
  /** Null for both environments. */
  readonly environment: EnvironmentName | null;
}

/** Whether an enabled endpoint wants an event of this type and environment. */
export function endpointWants(
  endpoint: EndpointInterest,
  event: { readonly type: WebhookEventType; readonly environment: EnvironmentName },
): boolean {
  if (!endpoint.enabled) return false;
  if (endpoint.environment !== null && endpoint.environment !== event.environment) return false;
  return endpoint.eventTypes.length === 0 || endpoint.eventTypes.includes(event.type);
}

/**
 * The referral events a status change raises: entering `flagged`,
 * `accepted`, `rejected` or `reversed` has its own event; any other move (a
 * reviewer clearing a flag) is a `referral.updated`.
 */
export function referralStatusEvent(toStatus: string): WebhookEventType {
  switch (toStatus) {
    case "flagged":
      return "referral.flagged";
    case "accepted":
      return "referral.accepted";
    case "rejected":
      return "referral.rejected";
    case "reversed":
      return "referral.reversed";
    default:
      return "referral.updated";
  }
}

/** The event of each status a grant can move to; a grant is created in the others. */
const grantStatusEvents: Partial<Record<RewardGrantStatusName, WebhookEventType>> = {
  approved: "reward_grant.approved",
  fulfilled: "reward_grant.fulfilled",
  rejected: "reward_grant.rejected",
  voided: "reward_grant.voided",
  expired: "reward_grant.expired",
};

/** The event a grant's move to `toStatus` raises. */
export function grantStatusEvent(toStatus: RewardGrantStatusName): WebhookEventType {
  const type = grantStatusEvents[toStatus];
  if (!type) throw new Error(`no grant moves to ${toStatus}`);
  return type;
}
