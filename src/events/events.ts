/**
 * Webhook events, in one place: which change raises which event, the
 * payload each carries, and whether an identify created or updated its
 * customer. Services call the builders as they write (the entries ride in
 * the same atomic write, the outbox); the relay calls `eventOf` to turn an
 * entry into the stored event, and only moves and queues.
 */
import {
  CampaignSchema,
  CheckpointSchema,
  CustomerSchema,
  type Referral,
  ReferralSchema,
  type Reward,
  type RewardGrant,
  RewardGrantSchema,
  RewardParty,
  RewardSchema,
} from "../../gen/referral/v1/resources_pb.js";
import { toPlain } from "../contract/plain-codec.js";
import { messageFromDoc } from "../contract/records.js";
import { newId } from "../domain/ids.js";
import type { EnvironmentName } from "../domain/tenancy.js";
import {
  grantStatusEvent,
  referralStatusEvent,
  type WebhookEventType,
} from "../domain/webhook-events.js";
import { findCampaignById } from "../store/campaigns.js";
import type { Collections } from "../store/collection.js";
import { customerMessages } from "../store/customer-records.js";
import type {
  CheckpointDoc,
  CustomerDoc,
  EventDoc,
  OutboxEntryDoc,
  ReferralDoc,
  RewardGrantDoc,
  StoredReward,
} from "../store/documents.js";
import type { OutboxHolder } from "../store/events.js";

/**
 * An identify: `customer.created` or `customer.updated`, decided when relayed
 * by whether the upsert kept `customerId`, the id this identify proposed.
 * Its payload is built then too, from the customer as stored.
 */
export function customerIdentified(customerId: string, at: Date): OutboxEntryDoc {
  return {
    id: newId("evt", at),
    type: "customer.identified",
    occurredAt: at,
    newCustomerId: customerId,
  };
}

/**
 * An erasure: the id and when, nothing else, so the company's other
 * systems can erase the customer too.
 */
export function customerErased(customerId: string, at: Date): OutboxEntryDoc {
  return {
    id: newId("evt", at),
    type: "customer.erased",
    occurredAt: at,
    data: { id: customerId, deletedAt: at.toISOString() },
  };
}

/**
 * A referral as the API shows it, from the document a change leaves. Built
 * once per change: its events carry it, and the response is the same message.
 */
export function referralView(after: ReferralDoc): Referral {
  return messageFromDoc(ReferralSchema, after);
}

/**
 * A referral as its events carry it: without its fraud evidence, which the
 * API answers to secret keys (docs/fraud.md). Events stay small, and an
 * erasure has no evidence to find in them.
 */
function referralPayload(view: Referral): Record<string, unknown> {
  const { evidence: _evidence, ...data } = toPlain(ReferralSchema, view);
  return data;
}

/**
 * A new referral: `referral.created`, and `referral.flagged` or
 * `referral.rejected` when a rule's verdict made it so.
 */
export function referralCreated(after: ReferralDoc, view: Referral): OutboxEntryDoc[] {
  const types: WebhookEventType[] = ["referral.created"];
  if (after.status === "flagged") types.push("referral.flagged");
  if (after.status === "rejected") types.push("referral.rejected");
  return entries(types, after.updatedAt, referralPayload(view));
}

/**
 * A re-attribution: `referral.updated`, and `referral.flagged` or
 * `referral.rejected` when its verdicts newly make it so.
 */
export function referralReattributed(
  before: ReferralDoc,
  after: ReferralDoc,
  view: Referral,
): OutboxEntryDoc[] {
  const types: WebhookEventType[] = ["referral.updated"];
  if (after.status === "flagged" && before.status !== "flagged") types.push("referral.flagged");
  if (after.status === "rejected") types.push("referral.rejected");
  return entries(types, after.updatedAt, referralPayload(view));
}

/**
 * A status change by review or conversion: the event of the new status. An
 * acceptance's event names the grants it earned (`rewardGrantIds`).
 */
export function referralStatusChanged(
  after: ReferralDoc,
  view: Referral,
  rewardGrantIds?: readonly string[],
): OutboxEntryDoc[] {
  const type = referralStatusEvent(after.status);
  const data = referralPayload(view);
  if (rewardGrantIds) data.rewardGrantIds = [...rewardGrantIds];
  return entries([type], after.updatedAt, data);
}

/** A fraud review's decision: its group, the decision and the referrals it moved. */
export function fraudReviewResolved(
  data: {
    readonly id: string;
    readonly campaignId: string;
    readonly referrerId: string;
    readonly ruleType: string;
    readonly decision: string;
    readonly reason: string | null;
    readonly referralIds: readonly string[];
    readonly releasedGrants: number;
    readonly voidedGrants: number;
  },
  at: Date,
): OutboxEntryDoc[] {
  return entries(["fraud_review.resolved"], at, { ...data, referralIds: [...data.referralIds] });
}

/**
 * A grant as the API shows it, from the document a change leaves and the
 * reward it was made from (its snapshot; null for a value of its own).
 */
export function grantView(
  doc: RewardGrantDoc,
  reward: StoredReward | null | undefined,
): RewardGrant {
  return messageFromDoc(RewardGrantSchema, doc, { reward: reward ?? null });
}

/** A new grant: `reward_grant.created`, whatever its status (pending, approved or capped). */
export function grantCreated(doc: RewardGrantDoc, view: RewardGrant): OutboxEntryDoc[] {
  return entries(["reward_grant.created"], doc.createdAt, toPlain(RewardGrantSchema, view));
}

/** A grant's status change: `reward_grant.approved`, `.fulfilled`, `.rejected`, `.voided` or `.expired`. */
export function grantMoved(after: RewardGrantDoc, view: RewardGrant): OutboxEntryDoc[] {
  const type = grantStatusEvent(after.status);
  return entries([type], after.updatedAt, toPlain(RewardGrantSchema, view));
}

/** An ingested checkpoint: `checkpoint.ingested`. */
export function checkpointIngested(checkpoint: CheckpointDoc): OutboxEntryDoc[] {
  const data = toPlain(CheckpointSchema, messageFromDoc(CheckpointSchema, checkpoint));
  return entries(["checkpoint.ingested"], checkpoint.createdAt, data);
}

/** An entry's event type; an identify created the customer if it kept the proposed id. */
export function eventTypeOf(holder: OutboxHolder, entry: OutboxEntryDoc): WebhookEventType {
  if (entry.type !== "customer.identified") return entry.type;
  return holder._id === entry.newCustomerId ? "customer.created" : "customer.updated";
}

/**
 * The stored event of an outbox entry, with its final payload: a customer
 * as the API shows it, and `referral.accepted` with the campaign's rewards.
 */
export async function eventOf(
  db: Collections,
  holder: OutboxHolder & { environment: EnvironmentName },
  entry: OutboxEntryDoc,
  type: WebhookEventType,
): Promise<EventDoc> {
  let data = entry.data;
  if (entry.type === "customer.identified") {
    const [customer] = await customerMessages(db, holder, [holder as unknown as CustomerDoc]);
    data = customer ? toPlain(CustomerSchema, customer) : {};
  }
  if (type === "referral.accepted" && data) {
    data = { ...data, rewards: await rewardsOf(db, String(data.campaignId)) };
  }
  const customerId = subjectCustomerOf(holder, type);
  const referredBy = (data?.referredBy as { id?: unknown } | null | undefined)?.id;
  return {
    _id: entry.id,
    organizationId: holder.organizationId,
    applicationId: holder.applicationId,
    environment: holder.environment,
    type,
    payload: JSON.stringify({ type, timestamp: entry.occurredAt.toISOString(), data: data ?? {} }),
    createdAt: entry.occurredAt,
    ...(customerId ? { customerId } : {}),
    ...(customerId && typeof referredBy === "string" ? { referredById: referredBy } : {}),
  };
}

/**
 * The customer whose personal data an event's payload holds (a customer's
 * own events, a checkpoint's external user id), for erasure to find it.
 */
function subjectCustomerOf(holder: OutboxHolder, type: WebhookEventType): string | undefined {
  if (type === "customer.created" || type === "customer.updated") return holder._id;
  if (type === "checkpoint.ingested") return (holder as unknown as CheckpointDoc).customerId;
  return undefined;
}

function entries(
  types: readonly WebhookEventType[],
  at: Date,
  data: Record<string, unknown>,
): OutboxEntryDoc[] {
  return types.map((type) => ({ id: newId("evt", at), type, occurredAt: at, data }));
}

/** A campaign's enabled rewards for each party, as `referral.accepted` carries them. */
async function rewardsOf(
  db: Collections,
  campaignId: string,
): Promise<{ referrer: unknown[]; referee: unknown[] }> {
  const campaign = await findCampaignById(db, campaignId);
  const rewards: Reward[] = campaign ? messageFromDoc(CampaignSchema, campaign).rewards : [];
  const enabled = rewards.filter((reward) => !reward.disabled);
  const forParty = (party: RewardParty) =>
    enabled
      .filter((reward) => reward.party === party)
      .map((reward) => toPlain(RewardSchema, reward));
  return {
    referrer: forParty(RewardParty.REFERRER),
    referee: forParty(RewardParty.REFEREE),
  };
}
