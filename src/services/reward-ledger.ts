import { type GrantHoldReason, unverifiedConversion } from "../domain/conversion.js";
import type { ReferralStatusName } from "../domain/referral-status.js";
import type { StatusChange } from "../domain/referral-transitions.js";
import {
  type GrantFulfillment,
  type GrantRecord,
  movedGrant,
  type PlannedGrant,
  type PlannedLimit,
} from "../domain/reward-grant.js";
import {
  holdsRoom,
  type RewardGrantCauseName,
  type RewardGrantStatusName,
  reversalOf,
} from "../domain/reward-ledger.js";
import {
  clawbackOf,
  expiryFrom,
  planEarnedGrants,
  rewardSnapshotId,
  rewardsOf,
  withRoom,
} from "../domain/reward-plan.js";
import { grantCreated, grantMoved, grantView } from "../events/events.js";
import type { CampaignDoc, ReferralDoc, RewardGrantDoc, StoredReward } from "../store/documents.js";
import { isDuplicateKeyError } from "../store/errors.js";
import type { ReferralRewardWork } from "../store/referrals.js";
import { type PlacedGrant, referralGrants } from "../store/reward-grants.js";
import type { Outbox, TenantStore, UnstoredCheckpoint } from "../store/tenant-store.js";

/**
 * The reward ledger's steps, each written once for the calls that take them
 * (a conversion, a review, a reversal, CreateRewardGrant) and for the
 * reward sweep, which finishes what a crash interrupted.
 */

/** The actor of what the service does by itself (an approval at the end of a hold, an expiry). */
export const serviceActor = "service";

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
  heldFor: GrantHoldReason | null = null,
): Promise<PlannedGrant[]> {
  const planned = planEarnedGrants(campaign, referral, acceptance, heldFor);
  for (const reward of rewardsOf(campaign)) {
    const id = rewardSnapshotId(reward);
    if (planned.some((entry) => entry.grant.rewardSnapshotId === id)) {
      await store.rewards.storeSnapshot(id, reward, acceptance.changedAt);
    }
  }
  return planned;
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
  planned: readonly PlannedGrant[],
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
  planned: PlannedGrant,
  reward: StoredReward | null,
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
  limit: PlannedLimit,
  insert: (made: RewardGrantDoc) => Promise<{ doc: RewardGrantDoc }>,
): Promise<RewardGrantDoc> {
  for (let round = 0; round < slotRounds; round++) {
    try {
      return (await insert(await inFreeSlot(store, grant, limit, round))).doc;
    } catch (error) {
      // Another grant took the slot (the grant itself would have been found).
      if (!isDuplicateKeyError(error)) throw error;
    }
  }
  throw new Error(`the slots of ${limit.key} kept changing`);
}

/**
 * The grant in the lowest slot of its count limit free as read now, or
 * capped when none is: the first round assumes the slots are held from
 * the first (none given back), and reads which are when that lost a race.
 */
async function inFreeSlot(
  store: TenantStore,
  grant: RewardGrantDoc,
  limit: PlannedLimit,
  round: number,
): Promise<RewardGrantDoc> {
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
  return slot === undefined
    ? withRoom(grant, limit, 0)
    : { ...grant, limitSlot: `${limit.key}#${slot}` };
}

/**
 * Accepts a referral and stores the grants it earns in one atomic write,
 * where the engine writes several documents together (see
 * `transitionWithGrants`): each grant is placed (its slot or room read),
 * then the acceptance, the rooms taken and the grants are written as one;
 * a grant that lost its slot or room to another in between places them
 * all again. The grants' `reward_grant.created` events ride in the
 * referral's outbox, after its own. Null when another change to the
 * referral came first (then nothing is written, the checkpoint neither).
 */
export async function acceptWithGrants(
  store: TenantStore,
  transitionWithGrants: NonNullable<TenantStore["referrals"]["transitionWithGrants"]>,
  current: ReferralDoc,
  change: StatusChange & { fromStatus: ReferralStatusName },
  events: Outbox,
  planned: readonly PlannedGrant[],
  work: ReferralRewardWork,
  /** The checkpoint that makes the acceptance, stored in its write (see `storeCheckpointAndConvert`). */
  checkpoint?: UnstoredCheckpoint,
): Promise<ReferralDoc | null> {
  const now = change.changedAt;
  const rewards = await store.rewards.snapshots(
    planned.map((entry) => entry.grant.rewardSnapshotId),
  );
  for (let round = 0; round < slotRounds; round++) {
    const placed = await Promise.all(planned.map((entry) => placeGrant(store, entry, round, now)));
    const outbox = () => [
      ...(typeof events === "function" ? events() : events),
      ...placed.flatMap(({ doc }) =>
        grantCreated(doc, grantView(doc, rewards.get(doc.rewardSnapshotId ?? "") ?? null)),
      ),
    ];
    const outcome = await transitionWithGrants(current, change, outbox, placed, work, checkpoint);
    if (outcome === "referral changed") return null;
    if (outcome !== "room changed") return outcome;
  }
  throw new Error(`the rooms of referral ${current._id}'s grants kept changing`);
}

/** A planned grant placed under its limit as the store reads now (see `acceptWithGrants`). */
async function placeGrant(
  store: TenantStore,
  planned: PlannedGrant,
  round: number,
  now: Date,
): Promise<PlacedGrant> {
  const { grant, limit } = planned;
  if (!limit) return { doc: grant };
  if (limit.unit === "rewards") return { doc: await inFreeSlot(store, grant, limit, round) };
  const { take, write } = await store.rewards.roomToTake(limit, grant, grant.amountMinor ?? 0, now);
  return { doc: withRoom(grant, limit, take), ...(write ? { room: write } : {}) };
}

// A round is lost only to a grant that took the slot, so a few rounds more
// than the grants racing always suffice; the bound only stops a bug.
const slotRounds = 1000;

/** How a move is made: why, by whom, when, and a fulfilment's record. */
export interface MoveReason {
  readonly cause: RewardGrantCauseName;
  readonly actorId: string;
  readonly reason: string | null;
  readonly at: Date;
  readonly fulfillment?: Omit<GrantFulfillment, "fulfilledAt">;
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
  const set: Partial<GrantRecord> = { statusReason: how.reason };
  const unset: (keyof GrantRecord)[] = [];
  if (current.status === "pending" && to !== "pending") unset.push("approvalDueAt");
  if (current.status === "approved") unset.push("expiryDueAt");
  if (current.awaitsConfirmation) unset.push("awaitsConfirmation");
  const reward = await rewardOfGrant(store, current);
  // Confirmed while its hold runs: approved by the sweep when it ends, as
  // if it had never waited (a manual reward's stays for a reviewer).
  if (to === "pending" && reward?.approval !== "manual") set.approvalDueAt = current.availableAt;
  if (to === "approved") {
    const approvedAt = how.cause === "hold_ended" ? current.availableAt : how.at;
    const expiresAt = expiryFrom(reward, approvedAt);
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
  // A confirmation that leaves the grant pending raises no status event.
  const moved = await store.rewards.move(current, move, () =>
    to === current.status ? [] : grantMoved(after, grantView(after, reward)),
  );
  if (moved && releases) await releaseRoom(store, current, how.at);
  return moved;
}

/**
 * Confirms the grants an unverified conversion earned (see
 * `conversionByCheckpoint`): each follows its reward's approval from
 * `at` (see {@link releaseHeldGrants}); then the referral stops waiting.
 * Grants a fraud review holds stay held. Runs again safely.
 */
export async function confirmConversion(
  store: TenantStore,
  referral: ReferralDoc,
  actorId: string,
  at: Date,
): Promise<void> {
  await releaseHeldGrants(store, referral, unverifiedConversion, {
    cause: "confirmed",
    actorId,
    reason: null,
    at,
  });
  await store.referrals.clearAwaitsConfirmation(referral._id);
}

/**
 * Releases a referral's grants held for `heldFor`: each follows its
 * reward's approval from `how.at` — approved at once when approval is
 * automatic and the hold is over, else pending as any grant in its hold
 * (or left for a reviewer). Grants still planned are made first, so none
 * escapes. Runs again safely: a grant moves once. Returns how many moved.
 */
export async function releaseHeldGrants(
  store: TenantStore,
  referral: ReferralDoc,
  heldFor: GrantHoldReason,
  how: MoveReason,
): Promise<number> {
  if (referral.grantPlan?.length) {
    await makePlannedGrants(store, { referralId: referral._id }, referral.grantPlan, how.at);
  }
  const where = referralGrants(referral);
  const grants = where ? await store.rewards.findOfReferral(where) : [];
  let released = 0;
  for (const grant of grants) {
    let current: RewardGrantDoc | null = grant;
    const heldHere = (doc: RewardGrantDoc) =>
      doc.awaitsConfirmation === true && (doc.statusReason ?? unverifiedConversion) === heldFor;
    for (let attempt = 1; current && heldHere(current) && attempt <= moveAttempts; attempt++) {
      const reward = await rewardOfGrant(store, current);
      const approvesNow = reward?.approval !== "manual" && current.availableAt <= how.at;
      if (await moveGrant(store, current, approvesNow ? "approved" : "pending", how)) {
        released += 1;
        break;
      }
      current = await store.rewards.find(current._id);
    }
  }
  return released;
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

/** The reward a grant was made from, as it was then (its snapshot); null for a value of its own. */
export async function rewardOfGrant(
  store: TenantStore,
  grant: RewardGrantDoc,
): Promise<StoredReward | null> {
  if (grant.rewardSnapshotId === null) return null;
  const found = await store.rewards.snapshots([grant.rewardSnapshotId]);
  return found.get(grant.rewardSnapshotId) ?? null;
}
