import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { PlacementCheckpoint } from "../../gen/referral/v1/admin_pb.js";
import {
  AttributionModel,
  type Campaign,
  CampaignAttributionSchema,
  type CampaignCheckpoint,
  CampaignCheckpointSchema,
  CampaignCheckpointTrigger,
  type CampaignFraudPolicy,
  CampaignFraudPolicySchema,
  CampaignPublicCheckpoints,
  CampaignSchema,
  CurrencySchema,
  type Reward,
  RewardApproval,
  RewardLimitUnit,
  RewardParty,
  RewardType,
} from "../../gen/referral/v1/resources_pb.js";
import { enumWords } from "../contract/options.js";
import { fromPlain, type PlainObject, toPlain } from "../contract/plain-codec.js";
import { docFieldsFromMessage, messageFromDoc } from "../contract/records.js";
import { rewardTriggerOf } from "../domain/conversion.js";
import { completePolicy, type FraudPolicyDoc } from "../domain/fraud-policy.js";
import { newId } from "../domain/ids.js";
import { limits } from "../domain/limits.js";
import { defaultWindowDays, maxWindowDays } from "../domain/links.js";
import { type CurrencyName, rewardAmountMinor } from "../domain/money.js";
import { parseDuration } from "../domain/reward-ledger.js";
import { canonicalTimeZone, StatsPeriodProblem } from "../domain/stats-time.js";
import type { EnvironmentName, Tenant } from "../domain/tenancy.js";
import type { CampaignCheckpointDoc, CampaignDoc } from "../store/documents.js";
import { checkCampaignContent } from "./campaign-content.js";
import { checkpointName } from "./checkpoint-names.js";
import { invalidArgument } from "./errors.js";
import { requiredEnvironment, requiredText } from "./validate.js";

/**
 * Fields a caller may not set: the service owns them. The ping fields are
 * written by PingCampaign alone, so an operator's update never undoes a ping.
 */
const serviceOwnedFields = new Set([
  "id",
  "organization_id",
  "application_id",
  "environment",
  "created_at",
  "updated_at",
  "deleted_at",
  "last_ping_at",
  "last_ping_origin",
]);

/** The campaign fields an update may replace, by proto and JSON name. */
export const editableCampaignFields: ReadonlyMap<string, string> = new Map(
  CampaignSchema.fields
    .filter((field) => !serviceOwnedFields.has(field.name))
    .flatMap((field) => [
      [field.name, field.localName],
      [field.jsonName, field.localName],
    ]),
);

/**
 * A new campaign document from a caller's campaign: checks it (see
 * {@link checkCampaign}), assigns ids, ownership and times to it and to its
 * rewards, emails, pages and FAQs.
 */
export function newCampaignDoc(
  tenant: Tenant,
  input: MessageInitShape<typeof CampaignSchema>,
  now: Date,
): CampaignDoc {
  const campaign = create(CampaignSchema, input);
  const environment = requiredEnvironment(campaign.environment, "campaign.environment");
  checkCampaign(campaign, environment);
  campaign.id = newId("cmp", now);
  campaign.organizationId = tenant.organizationId;
  campaign.applicationId = tenant.applicationId;
  campaign.createdAt = timestampFromDate(now);
  campaign.updatedAt = timestampFromDate(now);
  campaign.deletedAt = undefined;
  campaign.lastPingAt = undefined;
  campaign.lastPingOrigin = undefined;
  stampChildren(campaign, now, null);
  const doc = docFieldsFromMessage<CampaignDoc>(CampaignSchema, campaign);
  doc.rewardCheckpoint = nextRewardCheckpoint(null, rewardTriggerOf(campaign), now);
  doc.placementCheckpoints = [];
  return doc;
}

/**
 * The fields an update writes: the editable fields named in `mask` (all
 * when empty), taken from `input`, with the children re-stamped.
 */
export function campaignUpdateFields(
  current: CampaignDoc,
  input: Campaign,
  mask: readonly string[],
  now: Date,
): Partial<CampaignDoc> {
  const names = mask.length > 0 ? mask : [...new Set(editableCampaignFields.values())];
  const merged = messageFromDoc(CampaignSchema, current);
  for (const name of names) {
    const localName = editableCampaignFields.get(name);
    if (!localName)
      throw invalidArgument("updateMask", `names no editable campaign field: ${name}`);
    (merged as unknown as Record<string, unknown>)[localName] = (
      input as unknown as Record<string, unknown>
    )[localName];
  }
  checkCampaign(merged, current.environment);
  stampChildren(merged, now, messageFromDoc(CampaignSchema, current));
  // The ping fields are left out: a ping between the read and this write stays.
  const {
    _id,
    lastPingAt: _lastPingAt,
    lastPingOrigin: _lastPingOrigin,
    ...fields
  } = docFieldsFromMessage<CampaignDoc>(CampaignSchema, merged);
  return {
    ...fields,
    rewardCheckpoint: nextRewardCheckpoint(
      rewardCheckpointOf(current),
      rewardTriggerOf(merged),
      now,
    ),
  };
}

/**
 * The reward checkpoint after a write that leaves the reward trigger
 * `trigger`: unchanged while the trigger is, renamed (same id, new
 * `updatedAt`) when it changes, gone without a trigger.
 */
function nextRewardCheckpoint(
  current: CampaignCheckpointDoc | null,
  trigger: string | null,
  now: Date,
): CampaignCheckpointDoc | null {
  if (!trigger) return null;
  if (current?.checkpointName === trigger) return current;
  return {
    id: current?.id ?? newId("ccp", now),
    checkpointName: trigger,
    placementId: null,
    createdAt: current?.createdAt ?? now,
    updatedAt: now,
  };
}

/**
 * The campaign's reward checkpoint as stored; for a campaign stored before
 * checkpoints existed, one derived from the campaign (an id made from the
 * campaign's, the campaign's times), so its id is the same on every read
 * and is kept by the next update.
 */
function rewardCheckpointOf(doc: CampaignDoc): CampaignCheckpointDoc | null {
  const trigger = rewardTriggerOf(doc);
  if (!trigger) return null;
  if (doc.rewardCheckpoint) return { ...doc.rewardCheckpoint, checkpointName: trigger };
  return {
    id: doc._id.replace(/^cmp_/, "ccp_"),
    checkpointName: trigger,
    placementId: null,
    createdAt: doc.createdAt,
    updatedAt: doc.updatedAt,
  };
}

/**
 * The placement checkpoints an operator's list makes: each name at most
 * once; a name the campaign already has keeps its id and creation time
 * (and its `updatedAt` unless the placement changes).
 */
export function placementCheckpointsFor(
  current: CampaignDoc,
  placements: readonly Pick<PlacementCheckpoint, "checkpointName" | "placementId">[],
  now: Date,
): CampaignCheckpointDoc[] {
  const max = limits.campaign.placementCheckpoints;
  if (placements.length > max) {
    throw invalidArgument("placements", `must have at most ${max} entries`);
  }
  const existing = new Map(
    (current.placementCheckpoints ?? []).map((entry) => [entry.checkpointName, entry]),
  );
  const seen = new Set<string>();
  return placements.map((placement, index) => {
    const field = `placements[${index}]`;
    const name = checkpointName(placement.checkpointName, `${field}.checkpointName`);
    const placementId = requiredText(placement.placementId, `${field}.placementId`);
    if (seen.has(name)) {
      throw invalidArgument(`${field}.checkpointName`, `repeats ${JSON.stringify(name)}`);
    }
    seen.add(name);
    const before = existing.get(name);
    if (before?.placementId === placementId) return before;
    return {
      id: before?.id ?? newId("ccp", now),
      checkpointName: name,
      placementId,
      createdAt: before?.createdAt ?? now,
      updatedAt: now,
    };
  });
}

/** A campaign's checkpoints as the API shows them: the reward one first, then the placements. */
export function campaignCheckpointsOf(doc: CampaignDoc): CampaignCheckpoint[] {
  const message = (entry: CampaignCheckpointDoc, trigger: CampaignCheckpointTrigger) =>
    create(CampaignCheckpointSchema, {
      id: entry.id,
      campaignId: doc._id,
      checkpointName: entry.checkpointName,
      trigger,
      placementId: entry.placementId ?? undefined,
      createdAt: timestampFromDate(entry.createdAt),
      updatedAt: timestampFromDate(entry.updatedAt),
    });
  const reward = rewardCheckpointOf(doc);
  return [
    ...(reward ? [message(reward, CampaignCheckpointTrigger.REWARD)] : []),
    ...(doc.placementCheckpoints ?? []).map((entry) =>
      message(entry, CampaignCheckpointTrigger.PLACEMENT),
    ),
  ];
}

/**
 * Gives the rewards, emails, pages and FAQs of a campaign being saved their
 * ids, ownership and times. An item keeps its id (and `createdAt`) only when
 * `current`, the campaign as stored, has an item of that id in the same
 * list; any other gets a new one, so a campaign created from another's JSON
 * shares no ids with it (a reward's id keys its limits and grants).
 */
function stampChildren(campaign: Campaign, now: Date, current: Campaign | null): void {
  const owner = {
    organizationId: campaign.organizationId,
    applicationId: campaign.applicationId,
    campaignId: campaign.id,
  };
  const stamp = <T extends { id: string }>(
    items: T[],
    stored: readonly T[],
    prefix: string,
  ): Map<string, T> => {
    const known = new Map(stored.map((item) => [item.id, item]));
    for (const item of items) {
      if (!known.has(item.id)) item.id = newId(prefix, now);
    }
    return known;
  };
  const rewards = stamp(campaign.rewards, current?.rewards ?? [], "rwd");
  const emails = stamp(campaign.emails, current?.emails ?? [], "eml");
  stamp(campaign.campaignPages, current?.campaignPages ?? [], "pag");
  stamp(campaign.faqs, current?.faqs ?? [], "faq");
  for (const [item, stored] of [
    ...campaign.rewards.map((reward) => [reward, rewards.get(reward.id)] as const),
    ...campaign.emails.map((email) => [email, emails.get(email.id)] as const),
  ]) {
    Object.assign(item, owner);
    item.createdAt = stored?.createdAt ?? timestampFromDate(now);
    item.updatedAt = timestampFromDate(now);
  }
}

/**
 * A campaign as it is about to be saved, created or updated (the whole
 * campaign, not only the fields an update changes): its name, what it shows
 * (texts, links, lists) and its reward terms. `environment` is the
 * campaign's, which its links' schemes depend on.
 */
function checkCampaign(campaign: Campaign, environment: EnvironmentName): void {
  checkCampaignContent(campaign, environment);
  checkRewardTerms(campaign);
  // Written as its default, so a campaign says what it does with a public key's checkpoint.
  if (campaign.publicCheckpoints === CampaignPublicCheckpoints.UNSPECIFIED) {
    campaign.publicCheckpoints = CampaignPublicCheckpoints.HOLD;
  }
  if (campaign.fraudPolicy) {
    campaign.fraudPolicy = checkedFraudPolicy(campaign.fraudPolicy, "campaign.fraudPolicy");
  }
  // Written with its defaults, so a campaign says how its links attribute.
  const attribution = campaign.attribution ?? create(CampaignAttributionSchema, {});
  const windowDays = attribution.windowDays || defaultWindowDays;
  if (windowDays < 1 || windowDays > maxWindowDays) {
    throw invalidArgument(
      "campaign.attribution.windowDays",
      `must be a whole number of days from 1 to ${maxWindowDays}`,
    );
  }
  attribution.windowDays = windowDays;
  if (attribution.model === AttributionModel.UNSPECIFIED) {
    attribution.model = AttributionModel.FIRST_CLICK;
  }
  campaign.attribution = attribution;
}

/**
 * A fraud policy checked (see `completePolicy`) and completed with its
 * defaults, so it says everything it does; INVALID_ARGUMENT naming the
 * field below `path` otherwise.
 */
export function checkedFraudPolicy(policy: CampaignFraudPolicy, path: string): CampaignFraudPolicy {
  const plain = toPlain(CampaignFraudPolicySchema, policy) as FraudPolicyDoc;
  const problem = completePolicy(plain);
  if (problem) throw invalidArgument(`${path}.${problem.field}`, problem.message);
  return fromPlain(CampaignFraudPolicySchema, plain as PlainObject);
}

/**
 * The terms the reward ledger relies on, checked when a campaign is saved:
 * who gets what, amounts exact to the currency's minor unit and within
 * {@link limits.campaign.maxAmount}, a limit of at least one with its unit
 * and window (an amount limit only on an amount), holds and expiries as
 * positive durations, a time zone the calendar knows. Unset approval and
 * time zone are written as their defaults (automatic, UTC).
 */
function checkRewardTerms(campaign: Campaign): void {
  const timeZone = requiredText(campaign.timeZone || "UTC", "campaign.timeZone");
  try {
    // One spelling per zone: its counters and calendars are kept under it.
    campaign.timeZone = canonicalTimeZone(timeZone, "campaign.timeZone");
  } catch (error) {
    if (error instanceof StatsPeriodProblem) throw invalidArgument(error.field, error.message);
    throw error;
  }
  for (const [index, reward] of campaign.rewards.entries()) {
    checkReward(reward, `campaign.rewards[${index}]`);
  }
  const minimum = campaign.leaderboard?.minimumAccepted ?? 0;
  if (minimum < 0 || minimum > limits.campaign.maxAmount) {
    throw invalidArgument(
      "campaign.leaderboard.minimumAccepted",
      `must be between 0 and ${limits.campaign.maxAmount.toLocaleString("en")}`,
    );
  }
}

const maxAmount = limits.campaign.maxAmount;

function checkReward(reward: Reward, path: string): void {
  if (reward.type === RewardType.UNSPECIFIED) {
    throw invalidArgument(`${path}.type`, "is required: payout or discount");
  }
  if (reward.party === RewardParty.UNSPECIFIED) {
    throw invalidArgument(`${path}.party`, "is required: referrer or referee");
  }
  const currency = enumWords(CurrencySchema).byNumber.get(reward.currency) as
    | CurrencyName
    | undefined;
  const amount = (field: "payoutAmount" | "discountAmount") => {
    const value = reward[field];
    if (value === undefined) return;
    if (!currency) throw invalidArgument(`${path}.currency`, `is required with ${field}`);
    const exact = rewardAmountMinor(value, currency);
    if ("refused" in exact) throw invalidArgument(`${path}.${field}`, exact.refused);
  };
  if (reward.type === RewardType.PAYOUT) {
    if (reward.payoutAmount === undefined) {
      throw invalidArgument(`${path}.payoutAmount`, "is required for a payout");
    }
    for (const field of [
      "discountAmount",
      "discountPercentage",
      "discountDurationInMonth",
    ] as const) {
      if (reward[field] !== undefined)
        throw invalidArgument(`${path}.${field}`, "is for a discount only");
    }
    amount("payoutAmount");
  } else {
    if (reward.payoutAmount !== undefined) {
      throw invalidArgument(`${path}.payoutAmount`, "is for a payout only");
    }
    const percentage = reward.discountPercentage;
    if ((reward.discountAmount === undefined) === (percentage === undefined)) {
      throw invalidArgument(
        `${path}.discountAmount`,
        "or discountPercentage is required for a discount, not both",
      );
    }
    amount("discountAmount");
    if (percentage !== undefined && !(percentage > 0 && percentage <= 100)) {
      throw invalidArgument(`${path}.discountPercentage`, "must be more than 0 and at most 100");
    }
    const months = reward.discountDurationInMonth;
    if (months !== undefined && (months < 1 || months > 120)) {
      throw invalidArgument(`${path}.discountDurationInMonth`, "must be 1 to 120");
    }
  }
  const limited = [reward.limit, reward.limitUnit, reward.limitInterval];
  if (limited.some((value) => value !== undefined)) {
    for (const [field, value] of [
      ["limit", reward.limit],
      ["limitUnit", reward.limitUnit],
      ["limitInterval", reward.limitInterval],
    ] as const) {
      if (value === undefined) {
        throw invalidArgument(`${path}.${field}`, "is required with the other limit fields");
      }
    }
    const limit = reward.limit as number;
    // A limit of 0 would grant nothing, which is what `disabled` says.
    if (!(Number.isInteger(limit) && limit >= 1 && limit <= maxAmount)) {
      throw invalidArgument(
        `${path}.limit`,
        `must be a whole number from 1 to ${maxAmount.toLocaleString("en")} (to grant nothing, set disabled)`,
      );
    }
    if (reward.limitUnit === RewardLimitUnit.AMOUNT && percentage(reward)) {
      throw invalidArgument(
        `${path}.limitUnit`,
        "cannot be amount for a percentage discount: limit the number of rewards",
      );
    }
  }
  for (const field of ["holdPeriod", "expiresAfter"] as const) {
    const text = reward[field];
    if (text === undefined) continue;
    const ms = parseDuration(text);
    if (ms === undefined) {
      throw invalidArgument(
        `${path}.${field}`,
        'must be a whole number and a unit (s, m, h, d, w), such as "30d", at most 3650 days',
      );
    }
    // Zero would read as a hold or an expiry that is not there: leave the field out instead.
    if (ms === 0)
      throw invalidArgument(`${path}.${field}`, "must be more than 0 (leave it out for none)");
  }
  if (reward.approval === RewardApproval.UNSPECIFIED) reward.approval = RewardApproval.AUTOMATIC;
}

function percentage(reward: Reward): boolean {
  return reward.type === RewardType.DISCOUNT && reward.discountPercentage !== undefined;
}
