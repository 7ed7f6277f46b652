import { CheckpointSchema, ReferralSchema } from "../../gen/referral/v1/resources_pb.js";
import { toPlain } from "../contract/plain-codec.js";
import { newId } from "../domain/ids.js";
import { referralStatusEvent, type WebhookEventType } from "../domain/webhook-events.js";
import type { CheckpointDoc, OutboxEntryDoc, ReferralDoc } from "../store/documents.js";
import { messageFromDoc } from "./records.js";

/**
 * The outbox entries of each change, built from the record as the change
 * leaves it; the repositories write them in the same atomic update.
 */

/** The referral's REST JSON, with its environment, as events carry it. */
function referralData(referral: ReferralDoc): Record<string, unknown> {
  return toPlain(ReferralSchema, messageFromDoc(ReferralSchema, referral));
}

function entries(
  types: readonly WebhookEventType[],
  at: Date,
  data: Record<string, unknown>,
): OutboxEntryDoc[] {
  return types.map((type) => ({ id: newId("evt", at), type, occurredAt: at, data }));
}

/** A new referral: `referral.created`, and `referral.flagged` when a rule fired. */
export function referralCreatedEvents(after: ReferralDoc): OutboxEntryDoc[] {
  const types: WebhookEventType[] = ["referral.created"];
  if (after.status === "flagged") types.push("referral.flagged");
  return entries(types, after.updatedAt, referralData(after));
}

/** A re-attribution: `referral.updated`, and `referral.flagged` when it newly flags. */
export function referralReattributedEvents(
  before: ReferralDoc,
): (after: ReferralDoc) => OutboxEntryDoc[] {
  return (after) => {
    const types: WebhookEventType[] = ["referral.updated"];
    if (after.status === "flagged" && before.status !== "flagged") types.push("referral.flagged");
    return entries(types, after.updatedAt, referralData(after));
  };
}

/** A status change by review or conversion: the event of the new status. */
export function referralStatusEvents(after: ReferralDoc): OutboxEntryDoc[] {
  return entries([referralStatusEvent(after.status)], after.updatedAt, referralData(after));
}

/** An ingested checkpoint: `checkpoint.ingested`. */
export function checkpointEvents(checkpoint: CheckpointDoc): OutboxEntryDoc[] {
  const data = toPlain(CheckpointSchema, messageFromDoc(CheckpointSchema, checkpoint));
  return entries(["checkpoint.ingested"], checkpoint.createdAt, data);
}
