import { hash } from "node:crypto";
import { limitWindowOf, timeZoneOfCampaign } from "../domain/campaign-time.js";
import { newId } from "../domain/ids.js";
import { type CurrencyName, digitsOf, fromMinorUnits, toMinorUnits } from "../domain/money.js";
import type { StatusChange } from "../domain/referral-transitions.js";
import {
  clawbackGrantId,
  earnedGrantId,
  holdsRoom,
  type LimitIntervalName,
  type LimitUnitName,
  parseDuration,
  type RewardGrantCauseName,
  type RewardGrantStatusName,
  reversalOf,
} from "../domain/reward-ledger.js";
import type { EnvironmentName, Tenant } from "../domain/tenancy.js";
import { grantCreated, grantMoved, grantView } from "../events/events.js";
import type {
  CampaignDoc,
  FulfillmentDoc,
  GrantStatusChangeDoc,
  PlannedGrantDoc,
  PlannedLimitDoc,
  ReferralDoc,
  RewardGrantDoc,
  RewardValueDoc,
} from "../store/documents.js";
import { isDuplicateKeyError } from "../store/errors.js";
import { movedGrant, referralGrants } from "../store/reward-grants.js";
import type { TenantStore } from "../store/tenant-store.js";

/**
 * The reward ledger's steps, each written once for the calls that take them
 * (a conversion, a review, a reversal, CreateRewardGrant) and for the
 * reward sweep, which finishes what a crash interrupted.
 */

/** A campaign reward as its campaign document stores it: the plain form of `referral.v1.Reward`. */
export interface StoredReward {
  readonly id: string;
  readonly type: "payout" | "discount" | null;
  readonly party: "referrer" | "referee" | null;
  readonly method: string | null;
  readonly currency: CurrencyName | null;
  readonly payoutAmount: number | null;
  readonly discountAmount: number | null;
  readonly discountPercentage: number | null;
  readonly discountDurationInMonth: number | null;
  readonly limit: number | null;
  readonly limitUnit: LimitUnitName | null;
  readonly limitInterval: LimitIntervalName | null;
  readonly disabled: boolean;
  readonly approval: "automatic" | "manual" | null;
  readonly holdPeriod: string | null;
  readonly expiresAfter: string | null;
}

/** The actor of what the service does by itself (an approval at the end of a hold, an expiry). */
export const serviceActor = "service";

/** The rewards of a campaign, as stored. */
export function rewardsOf(campaign: CampaignDoc): readonly StoredReward[] {
  return (campaign.rewards as StoredReward[] | undefined) ?? [];
}

/**
 * The grants a referral's acceptance earns (see {@link planEarnedGrants}),
 * once the snapshots of the rewards they are made from are stored: a plan
 * names its rewards by snapshot.
 */
export async function prepareEarnedGrants(
  store: TenantStore,
  campaign: CampaignDoc,
  referral: ReferralDoc,
  acceptance: StatusChange,
): Promise<PlannedGrantDoc[]> {
  const planned = planEarnedGrants(campaign, referral, acceptance);
  for (const reward of rewardsOf(campaign)) {
    const id = rewardSnapshotId(reward);
    if (planned.some((entry) => entry.grant.rewardSnapshotId === id)) {
      await store.rewards.storeSnapshot(
        id,
        reward as unknown as Record<string, unknown>,
        acceptance.changedAt,
      );
    }
  }
  return planned;
}

/**
 * The grants a referral's acceptance earns: one per enabled reward of its
 * campaign, to the reward's party. Written into the referral in the
 * accepting write, then made by {@link makePlannedGrants}.
 */
export function planEarnedGrants(
  campaign: CampaignDoc,
  referral: ReferralDoc,
  acceptance: StatusChange,
): PlannedGrantDoc[] {
  return rewardsOf(campaign)
    .filter((reward) => !reward.disabled && reward.party && reward.type)
    .map((reward) => earnedGrant(campaign, referral, reward, acceptance));
}

/** The grant one reward of a campaign earns its party when `referral` is accepted. */
export function earnedGrant(
  campaign: CampaignDoc,
  referral: Pick<
    ReferralDoc,
    "_id" | "organizationId" | "applicationId" | "environment" | "referrerId" | "refereeId"
  >,
  reward: StoredReward,
  acceptance: Pick<StatusChange, "changedAt" | "actorId">,
): PlannedGrantDoc {
  const at = acceptance.changedAt;
  const party = reward.party as "referrer" | "referee";
  const customerId = party === "referrer" ? referral.referrerId : referral.refereeId;
  const limit = limitOf(reward, customerId, at, timeZoneOfCampaign(campaign));
  const grant = newGrant({
    id: earnedGrantId(referral._id, reward.id, party, at),
    tenant: referral,
    environment: referral.environment,
    customerId,
    kind: "earned",
    campaignId: campaign._id,
    referralId: referral._id,
    reward,
    ...valueOfReward(reward),
    limitWindow: limit?.window ?? null,
    ignoresLimit: false,
    at,
    cause: "earned",
    actorId: acceptance.actorId,
    reason: null,
  });
  return { grant, limit };
}

/** A new grant, not yet stored, before any limit: what {@link newGrant} takes. */
export interface GrantRequest {
  readonly id: string;
  readonly tenant: Tenant;
  readonly environment: EnvironmentName;
  readonly customerId: string;
  readonly kind: "earned" | "manual";
  readonly campaignId: string | null;
  readonly referralId: string | null;
  /** The campaign reward granted (its terms and snapshot); null for a value of the grant's own. */
  readonly reward: StoredReward | null;
  readonly value: RewardValueDoc;
  readonly amountMinor: number | null;
  readonly limitWindow: string | null;
  readonly ignoresLimit: boolean;
  readonly at: Date;
  readonly cause: RewardGrantCauseName;
  readonly actorId: string;
  readonly reason: string | null;
}

/**
 * A grant as it is made, before any limit: held until the reward's hold
 * period ends, then approved automatically (at once without a hold) or
 * left for a reviewer. A value of its own is approved at once.
 */
export function newGrant(request: GrantRequest): RewardGrantDoc {
  const { reward, at } = request;
  const holdMs = durationOf(reward?.holdPeriod) ?? 0;
  const automatic = reward?.approval !== "manual";
  const availableAt = new Date(at.getTime() + holdMs);
  const status: RewardGrantStatusName = holdMs === 0 && automatic ? "approved" : "pending";
  const expiresAt = status === "approved" ? expiryFrom(reward, at) : null;
  return {
    _id: request.id,
    organizationId: request.tenant.organizationId,
    applicationId: request.tenant.applicationId,
    environment: request.environment,
    campaignId: request.campaignId,
    rewardId: reward?.id ?? null,
    referralId: request.referralId,
    customerId: request.customerId,
    party: reward?.party ?? null,
    kind: request.kind,
    status,
    statusReason: request.reason,
    value: request.value,
    amountMinor: request.amountMinor,
    requestedAmount: request.value.amount,
    rewardSnapshotId: reward ? rewardSnapshotId(reward) : null,
    limitWindow: request.limitWindow,
    ignoresLimit: request.ignoresLimit,
    allowanceId: null,
    availableAt,
    expiresAt,
    ...(status === "pending" && automatic ? { approvalDueAt: availableAt } : {}),
    ...(expiresAt ? { expiryDueAt: expiresAt } : {}),
    fulfillment: null,
    reversalOf: null,
    statusHistory: [
      {
        fromStatus: null,
        toStatus: status,
        cause: request.cause,
        actorId: request.actorId,
        reason: request.reason,
        changedAt: at,
      },
    ],
    createdAt: at,
    updatedAt: at,
  };
}

/** A reward's value, with its amount in minor units. */
export function valueOfReward(reward: StoredReward): {
  value: RewardValueDoc;
  amountMinor: number | null;
} {
  const amount = reward.type === "payout" ? reward.payoutAmount : reward.discountAmount;
  const percentage =
    reward.type === "discount" && amount === null ? reward.discountPercentage : null;
  const amountMinor = amount === null ? null : minorUnitsOf(amount, reward.currency);
  return {
    value: {
      type: reward.type ?? "payout",
      method: reward.method,
      currency: reward.currency,
      amount: amountMinor === null ? null : fromMinorUnits(amountMinor, reward.currency),
      discountPercentage: percentage,
      discountDurationInMonth: reward.type === "discount" ? reward.discountDurationInMonth : null,
    },
    amountMinor,
  };
}

/**
 * Minor units of a reward's amount. Campaigns are checked when saved, so
 * the amount is exact; one saved before the check is rounded to the minor
 * unit rather than refused at the moment a referral converts.
 */
function minorUnitsOf(amount: number, currency: CurrencyName | null): number {
  const exact = toMinorUnits(amount, currency);
  if ("minor" in exact) return exact.minor;
  return Number.isFinite(amount) ? Math.round(amount * 10 ** digitsOf(currency)) : 0;
}

/**
 * The limit a reward puts on a recipient's grants at an instant: the
 * allowance of (reward, recipient, unit, window), and for an amount, its
 * currency. Null for a reward without a limit.
 */
export function limitOf(
  reward: StoredReward,
  customerId: string,
  at: Date,
  timeZone: string,
): PlannedLimitDoc | null {
  if (reward.limit === null || reward.limit === undefined) return null;
  const unit = reward.limitUnit ?? "rewards";
  const window = limitWindowOf(at, reward.limitInterval ?? "lifetime", timeZone);
  const max = unit === "rewards" ? reward.limit : minorUnitsOf(reward.limit, reward.currency);
  const key = [
    reward.id,
    customerId,
    unit,
    window,
    ...(unit === "amount" ? [reward.currency ?? ""] : []),
  ].join("|");
  return { key, unit, max, rewardId: reward.id, window };
}

/**
 * Makes planned grants: each takes its room under its limit (see
 * `takeRoom`), then is stored with its `reward_grant.created` event; then
 * they leave the plan of their holder (none for a grant made in one write).
 * Every step may run again (the sweep after a crash, two callers at once)
 * and changes nothing the second time.
 */
export async function makePlannedGrants(
  store: TenantStore,
  holder: { readonly referralId: string } | { readonly customerId: string } | null,
  planned: readonly PlannedGrantDoc[],
  now: Date,
): Promise<RewardGrantDoc[]> {
  const rewards = await store.rewards.snapshots(
    planned.map((entry) => entry.grant.rewardSnapshotId),
  );
  const made = await Promise.all(
    planned.map((entry) =>
      makeGrant(store, entry, rewards.get(entry.grant.rewardSnapshotId ?? "") ?? null, now),
    ),
  );
  const ids = planned.map((entry) => entry.grant._id);
  if (holder && "referralId" in holder) {
    await store.rewards.removeFromReferralPlan(holder.referralId, ids);
  } else if (holder) {
    await store.rewards.removeFromCustomerPlan(holder.customerId, ids);
  }
  return made;
}

async function makeGrant(
  store: TenantStore,
  planned: PlannedGrantDoc,
  reward: Record<string, unknown> | null,
  now: Date,
): Promise<RewardGrantDoc> {
  const { grant, limit } = planned;
  const insert = (made: RewardGrantDoc) =>
    store.rewards.insert(made, () => grantCreated(made, grantView(made, reward)));
  if (!limit) return (await insert(grant)).doc;
  if (limit.unit === "rewards") return makeInSlot(store, grant, limit, insert);
  const room = await store.rewards.takeRoom(limit, grant, grant.amountMinor ?? 0, now);
  const { doc, created } = await insert(withRoom(grant, limit, room));
  // Made already, and holding no room (capped, or voided by a reversal that
  // raced this call): room this call took under its id would never be
  // given back.
  if (!created && !holdsRoom(doc.status)) {
    await store.rewards.giveRoomBack(limit.key, grant._id, now);
  }
  return doc;
}

/**
 * Stores a grant under a count limit in the lowest free slot, or capped
 * when none is free: slots are one grant's each (a unique index), so of
 * grants racing for a slot one is stored and the others try the next. The
 * first try assumes the slots are held from the first (none given back).
 */
async function makeInSlot(
  store: TenantStore,
  grant: RewardGrantDoc,
  limit: PlannedLimitDoc,
  insert: (made: RewardGrantDoc) => Promise<{ doc: RewardGrantDoc }>,
): Promise<RewardGrantDoc> {
  for (let round = 0; round < slotRounds; round++) {
    let slot: number | undefined;
    if (round === 0) {
      const held = await store.rewards.countSlotsHeld(limit.key);
      slot = held < limit.max ? held + 1 : undefined;
    } else {
      const held = await store.rewards.findSlotsHeld(limit.key);
      slot = Array.from({ length: limit.max }, (_, i) => i + 1).find(
        (n) => !held.has(`${limit.key}#${n}`),
      );
    }
    const candidate =
      slot === undefined
        ? withRoom(grant, limit, 0)
        : { ...grant, limitSlot: `${limit.key}#${slot}` };
    try {
      return (await insert(candidate)).doc;
    } catch (error) {
      // Another grant took the slot (the grant itself would have been found).
      if (!isDuplicateKeyError(error)) throw error;
    }
  }
  throw new Error(`the slots of ${limit.key} kept changing`);
}

// A round is lost only to a grant that took the slot, so a few rounds more
// than the grants racing always suffice; the bound only stops a bug.
const slotRounds = 1000;

/**
 * A grant as an amount limit leaves it: nothing let through makes it
 * capped (worth nothing, `limit_reached`); less than requested clamps its
 * amount (`requestedAmount` keeps the full one); either way it records the
 * allowance it holds room in. A count limit's nothing-left is the same
 * capped grant.
 */
export function withRoom(
  grant: RewardGrantDoc,
  limit: PlannedLimitDoc,
  room: number,
): RewardGrantDoc {
  if (room === 0) {
    const { approvalDueAt: _approval, expiryDueAt: _expiry, ...rest } = grant;
    const [created] = grant.statusHistory as [GrantStatusChangeDoc];
    return {
      ...rest,
      status: "capped",
      statusReason: "limit_reached",
      value: {
        ...grant.value,
        amount: grant.value.amount === null ? null : 0,
        discountPercentage: grant.value.discountPercentage === null ? null : 0,
      },
      amountMinor: grant.amountMinor === null ? null : 0,
      expiresAt: null,
      statusHistory: [{ ...created, toStatus: "capped", reason: "limit_reached" }],
    };
  }
  if (grant.amountMinor !== null && room < grant.amountMinor) {
    return {
      ...grant,
      amountMinor: room,
      value: { ...grant.value, amount: fromMinorUnits(room, grant.value.currency) },
      allowanceId: limit.key,
    };
  }
  return { ...grant, allowanceId: limit.key };
}

/** How a move is made: why, by whom, when, and a fulfilment's record. */
export interface MoveReason {
  readonly cause: RewardGrantCauseName;
  readonly actorId: string;
  readonly reason: string | null;
  readonly at: Date;
  readonly fulfillment?: Omit<FulfillmentDoc, "fulfilledAt">;
}

/**
 * Moves a grant to `to` with its event, if it is still in the status it
 * was read in (null when another move came first). Leaving pending ends
 * its approval schedule; approval starts its expiry (counted from the end
 * of the hold for an automatic approval); a move that stops it holding
 * room gives the room back, flagged in the same write so the sweep
 * finishes it after a crash.
 */
export async function moveGrant(
  store: TenantStore,
  current: RewardGrantDoc,
  to: RewardGrantStatusName,
  how: MoveReason,
): Promise<RewardGrantDoc | null> {
  const change = {
    fromStatus: current.status,
    toStatus: to,
    cause: how.cause,
    actorId: how.actorId,
    reason: how.reason,
    changedAt: how.at,
  };
  const set: Partial<RewardGrantDoc> = { statusReason: how.reason };
  const unset: (keyof RewardGrantDoc)[] = [];
  if (current.status === "pending") unset.push("approvalDueAt");
  if (current.status === "approved") unset.push("expiryDueAt");
  const reward = await rewardOfGrant(store, current);
  if (to === "approved") {
    const approvedAt = how.cause === "hold_ended" ? current.availableAt : how.at;
    const expiresAt = expiryFrom(reward as StoredReward | null, approvedAt);
    if (expiresAt) Object.assign(set, { expiresAt, expiryDueAt: expiresAt });
  }
  if (to === "fulfilled") {
    set.fulfillment = {
      reference: how.fulfillment?.reference ?? null,
      code: how.fulfillment?.code ?? null,
      note: how.fulfillment?.note ?? null,
      fulfilledAt: how.at,
    };
  }
  // Giving a slot back is part of this write; an allowance's room is given
  // back after it, flagged here until it is.
  const stopsHolding = holdsRoom(current.status) && !holdsRoom(to);
  if (stopsHolding && current.limitSlot !== undefined) unset.push("limitSlot");
  const releases = stopsHolding && current.allowanceId !== null;
  if (releases) set.releasePending = true;
  const move = { change, set, unset };
  const after = movedGrant(current, move);
  const moved = await store.rewards.move(current, move, () =>
    grantMoved(after, grantView(after, reward)),
  );
  if (moved && releases) await releaseRoom(store, current, how.at);
  return moved;
}

/** Gives back the room a grant held, then clears its flag. */
export async function releaseRoom(
  store: TenantStore,
  grant: RewardGrantDoc,
  now: Date,
): Promise<void> {
  if (grant.allowanceId) await store.rewards.giveRoomBack(grant.allowanceId, grant._id, now);
  await store.rewards.clearReleasePending(grant._id);
}

/**
 * Finishes a referral's reversal: grants still planned are made first (so
 * none escapes), then each unpaid grant is voided and each fulfilled one
 * gains its clawback. Runs again safely: a voided grant stays voided, and a
 * clawback's id is derived from its grant.
 */
export async function settleReversal(
  store: TenantStore,
  referral: ReferralDoc,
  now: Date,
): Promise<void> {
  if (referral.grantPlan?.length) {
    await makePlannedGrants(store, { referralId: referral._id }, referral.grantPlan, now);
  }
  const reversal = referral.statusHistory.at(-1) as StatusChange;
  const where = referralGrants(referral);
  const grants = where ? await store.rewards.findOfReferral(where) : [];
  const clawedBack = new Set(grants.map((grant) => grant.reversalOf));
  for (const grant of grants) {
    if (grant.kind === "clawback") continue;
    await reverseGrant(store, grant, reversal, clawedBack.has(grant._id));
  }
  await store.rewards.clearReversalPending(referral._id);
}

// A grant moved by someone else between the read and the write is read
// again; it ends in a final status within a few moves.
const moveAttempts = 5;

async function reverseGrant(
  store: TenantStore,
  grant: RewardGrantDoc,
  reversal: StatusChange,
  hasClawback: boolean,
): Promise<void> {
  let current: RewardGrantDoc | null = grant;
  for (let attempt = 1; current && attempt <= moveAttempts; attempt++) {
    switch (reversalOf(current.status)) {
      case "nothing":
        return;
      case "claw back": {
        if (hasClawback) return;
        const clawback = clawbackOf(current, reversal);
        const reward = await rewardOfGrant(store, current);
        await store.rewards.insert(clawback, () =>
          grantCreated(clawback, grantView(clawback, reward)),
        );
        return;
      }
      case "void": {
        const moved = await moveGrant(store, current, "voided", {
          cause: "reversal",
          actorId: reversal.actorId,
          reason: reversal.reason,
          at: reversal.changedAt,
        });
        if (moved) return;
        current = await store.rewards.find(current._id);
      }
    }
  }
  if (current) throw new Error(`grant ${grant._id} kept changing during its reversal`);
}

/** The clawback of a fulfilled grant: its negative, pending, for the operator to collect or write off. */
function clawbackOf(grant: RewardGrantDoc, reversal: StatusChange): RewardGrantDoc {
  const at = reversal.changedAt;
  const negative = (value: number | null) => (value === null || value === 0 ? value : -value);
  return {
    _id: clawbackGrantId(grant._id, at),
    organizationId: grant.organizationId,
    applicationId: grant.applicationId,
    environment: grant.environment,
    campaignId: grant.campaignId,
    rewardId: grant.rewardId,
    referralId: grant.referralId,
    customerId: grant.customerId,
    party: grant.party,
    kind: "clawback",
    status: "pending",
    statusReason: reversal.reason,
    value: {
      ...grant.value,
      amount: negative(grant.value.amount),
      discountPercentage: negative(grant.value.discountPercentage),
    },
    amountMinor: negative(grant.amountMinor),
    requestedAmount: negative(grant.value.amount),
    rewardSnapshotId: grant.rewardSnapshotId,
    limitWindow: null,
    ignoresLimit: grant.ignoresLimit,
    allowanceId: null,
    availableAt: at,
    expiresAt: null,
    fulfillment: null,
    reversalOf: grant._id,
    statusHistory: [
      {
        fromStatus: null,
        toStatus: "pending",
        cause: "reversal",
        actorId: reversal.actorId,
        reason: reversal.reason,
        changedAt: at,
      },
    ],
    createdAt: at,
    updatedAt: at,
  };
}

/** The reward a grant was made from, as it was then (its snapshot); null for a value of its own. */
export async function rewardOfGrant(
  store: TenantStore,
  grant: RewardGrantDoc,
): Promise<Record<string, unknown> | null> {
  if (grant.rewardSnapshotId === null) return null;
  const found = await store.rewards.snapshots([grant.rewardSnapshotId]);
  return found.get(grant.rewardSnapshotId) ?? null;
}

// A reward object of a cached campaign is read again only when the cache
// is refreshed, so its snapshot id is hashed about once per refresh.
const snapshotIds = new WeakMap<StoredReward, string>();

/** The id of a reward's snapshot: a hash of its plain form, so the same content has one. */
export function rewardSnapshotId(reward: StoredReward): string {
  let id = snapshotIds.get(reward);
  if (!id) {
    id = `rws_${hash("sha256", JSON.stringify(reward), "hex").slice(0, 32)}`;
    snapshotIds.set(reward, id);
  }
  return id;
}

/** A new manual grant's id. */
export function manualGrantId(at: Date): string {
  return newId("grt", at);
}

function durationOf(text: string | null | undefined): number | undefined {
  return text ? parseDuration(text) : undefined;
}

/** When a grant approved at `approvedAt` expires under its reward's `expiresAfter`; null for never. */
function expiryFrom(reward: StoredReward | null, approvedAt: Date): Date | null {
  const ms = durationOf(reward?.expiresAfter);
  return ms === undefined ? null : new Date(approvedAt.getTime() + ms);
}
