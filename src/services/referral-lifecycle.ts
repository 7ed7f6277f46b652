import type { Referral } from "../../gen/referral/v1/resources_pb.js";
import { decideAttribution, holdsRewards, statusFromRules } from "../domain/attribution.js";
import {
  conversionByCheckpoint,
  fraudReview,
  type GrantHoldReason,
  publicCheckpointsOf,
  rewardTriggerOf,
  unverifiedConversion,
} from "../domain/conversion.js";
import type { NetworkEvidence, ReferralEvidence } from "../domain/fraud-evidence.js";
import { type CompiledPolicy, judgeWithPolicy } from "../domain/fraud-policy.js";
import { riskOf, type SuspectedFraud } from "../domain/fraud-rules.js";
import { canTransition, type ReferralStatusName } from "../domain/referral-status.js";
import {
  type AttributionRecord,
  newReferral,
  type RuledStatus,
  reattributed,
  type StatusChange,
  statusChange,
  transitioned,
} from "../domain/referral-transitions.js";
import type { PlannedGrant } from "../domain/reward-grant.js";
import {
  checkpointIngested,
  referralCreated,
  referralReattributed,
  referralStatusChanged,
  referralView,
} from "../events/events.js";
import type { CampaignDoc, CheckpointDoc, CustomerDoc, ReferralDoc } from "../store/documents.js";
import type { ReferralRewardWork } from "../store/referrals.js";
import { referralGrants } from "../store/reward-grants.js";
import type { TenantStore, UnstoredCheckpoint } from "../store/tenant-store.js";
import type { Caller } from "./context.js";
import { failedPrecondition, notFound } from "./errors.js";
import { type EvidenceDeps, gatherEvidence, policyOfCampaign } from "./evidence.js";
import {
  acceptWithGrants,
  confirmConversion,
  makePlannedGrants,
  prepareEarnedGrants,
  releaseHeldGrants,
  settleReversal,
} from "./reward-ledger.js";

/** What the lifecycle needs. */
export interface LifecycleDeps extends EvidenceDeps {
  /** Says events were written to an outbox. */
  readonly notifyWebhooks: () => void;
}

/** A referral as a call leaves it, and as the API shows it (built once, see `referralView`). */
export interface ReferralOutcome {
  readonly doc: ReferralDoc;
  readonly view: Referral;
}

// Each attempt reads the referral, decides, and writes only if nothing
// changed in between; a lost race re-reads and decides again. Races end
// quickly (a referral has one winner), so a few attempts always suffice.
const writeAttempts = 5;

/**
 * CreateReferral's rules: create the referee's referral in the campaign
 * (pending, or flagged by the fraud rules), return it unchanged for the same
 * referrer, re-attribute it to another referrer while pending or flagged,
 * and refuse that once it is final.
 */
export async function attributeReferral(
  deps: LifecycleDeps,
  caller: Caller,
  campaign: CampaignDoc,
  referrer: CustomerDoc,
  referee: CustomerDoc,
  /** Whether the caller may move the referee's existing referral (see `decideAttribution`). */
  mayReattribute: boolean,
  /** The referee's network as this call saw it (see `networkOfCall`); null without one. */
  refereeNetwork: NetworkEvidence | null,
  /** How the referrer was found: its code, unless a click on its link. */
  attribution: AttributionRecord = byCode,
): Promise<ReferralOutcome> {
  const { store, tenant } = caller;
  const parties = {
    environment: campaign.environment,
    campaignId: campaign._id,
    referrerId: referrer._id,
    refereeId: referee._id,
  };
  let existing = await store.referrals.findOfReferee(parties);
  for (let attempt = 1; attempt <= writeAttempts; attempt++) {
    const decision = decideAttribution(existing, referrer._id, mayReattribute);
    if ((decision.kind === "unchanged" || decision.kind === "kept") && existing) {
      return { doc: existing, view: referralView(existing) };
    }
    if (decision.kind === "refuse") throw failedPrecondition(decision.reason);
    const now = deps.clock();
    // A re-attribution without network facts of its own keeps the referee's from before.
    const network = refereeNetwork ?? existing?.evidence?.refereeNetwork ?? null;
    const policy = await policyOfCampaign(store, deps, campaign);
    const { frauds, evidence } = await judge(deps, store, policy, referrer, referee, network, now);
    if (decision.kind === "create") {
      const status = statusFromRules(frauds);
      const change = statusChange(null, status, "created", caller.keyId, now, rulesReason(frauds));
      const ruled = { ...ruledBy(status, frauds, evidence, policy, now), attribution };
      const fresh = newReferral(tenant, parties, ruled, change);
      const view = referralView(fresh);
      const { doc, created } = await store.referrals.insert(fresh, referralCreated(fresh, view));
      if (created) return { doc, view };
      existing = doc;
      continue;
    }
    const current = existing as ReferralDoc;
    const status = statusFromRules(frauds, {
      status: current.status,
      lastChangeCause: current.statusHistory.at(-1)?.cause,
    });
    const change = statusChange(
      current.status,
      status,
      "reattributed",
      caller.keyId,
      now,
      rulesReason(frauds),
    );
    const ruled = { ...ruledBy(status, frauds, evidence, policy, now), attribution };
    const after = reattributed(current, referrer._id, ruled, change);
    const view = referralView(after);
    const moved = await store.referrals.reattribute(
      current,
      referrer._id,
      ruled,
      change,
      referralReattributed(current, after, view),
    );
    if (moved) return { doc: moved, view };
    existing = await store.referrals.findOfReferee(parties);
  }
  throw new Error(`referral of ${referee._id} kept changing during ${writeAttempts} attempts`);
}

const byCode: AttributionRecord = { method: "code", clickId: null, clickedAt: null };

/** Gathers the evidence of a proposed attribution, and runs the campaign's policy on it. */
async function judge(
  deps: LifecycleDeps,
  store: TenantStore,
  policy: CompiledPolicy,
  referrer: CustomerDoc,
  referee: CustomerDoc,
  refereeNetwork: NetworkEvidence | null,
  now: Date,
): Promise<{ frauds: SuspectedFraud[]; evidence: ReferralEvidence }> {
  const evidence = await gatherEvidence(
    store,
    deps,
    policy,
    referrer,
    referee,
    refereeNetwork,
    now,
  );
  const facts = { referrerId: referrer._id, refereeId: referee._id, evidence };
  return { frauds: judgeWithPolicy(facts, policy), evidence };
}

/**
 * What the verdicts make of an attribution: its status, risk, whether its
 * rewards are held, and when its review lapses into an acceptance (a
 * policy whose review deadline accepts).
 */
function ruledBy(
  status: ReturnType<typeof statusFromRules>,
  frauds: SuspectedFraud[],
  evidence: ReferralEvidence,
  policy: CompiledPolicy,
  now: Date,
): RuledStatus {
  // A rejection ends the referral: nothing is left to hold.
  const rewardsHeld = holdsRewards(frauds) && status !== "rejected";
  const { deadlineDays, onLapse } = policy.review;
  const lapses = deadlineDays > 0 && onLapse === "accept" && (status === "flagged" || rewardsHeld);
  return {
    status,
    suspectedFrauds: frauds,
    evidence,
    risk: riskOf(frauds),
    ...(rewardsHeld ? { rewardsHeld: true as const } : {}),
    ...(lapses ? { reviewDueAt: new Date(now.getTime() + deadlineDays * 86_400_000) } : {}),
  };
}

/**
 * Manual review: moves a referral to `to` when the lifecycle allows it from
 * its current status; FAILED_PRECONDITION (changing nothing) otherwise. An
 * acceptance earns its campaign's rewards; a reversal voids the unpaid
 * grants and claws back the paid ones.
 */
export async function reviewReferral(
  deps: Pick<LifecycleDeps, "clock">,
  caller: Caller,
  id: string,
  to: ReferralStatusName,
  reason: string | undefined,
): Promise<ReferralOutcome> {
  const { store } = caller;
  for (let attempt = 1; attempt <= writeAttempts; attempt++) {
    const current = await store.referrals.find(id);
    if (!current) throw notFound(`referral ${id}`);
    if (!canTransition(current.status, to)) {
      const article = /^[aeiou]/.test(current.status) ? "an" : "a";
      throw failedPrecondition(`${article} ${current.status} referral cannot become ${to}`);
    }
    const now = deps.clock();
    const change = statusChange(current.status, to, "review", caller.keyId, now, reason);
    const after = transitioned(current, change);
    const view = referralView(after);
    if (to === "accepted") {
      // A reviewer's acceptance is the review a held reward waits for.
      const campaign = await store.campaigns.find(current.campaignId);
      const plan = campaign ? await prepareEarnedGrants(store, campaign, after, change) : [];
      const moved = await accept(store, current, change, after, plan);
      if (moved) return { doc: moved, view };
      continue;
    }
    const work: ReferralRewardWork = {
      ...(to === "reversed" ? { reversalPending: true as const } : {}),
      // A reviewer's move is the review a held reward waits for.
      ...(current.rewardsHeld ? { releasesRewards: true as const } : {}),
    };
    const moved = await store.referrals.transition(
      current,
      change,
      referralStatusChanged(after, view),
      work,
    );
    if (!moved) continue;
    if (to === "reversed") await settleReversal(store, moved, now);
    return { doc: moved, view };
  }
  throw new Error(`referral ${id} kept changing during ${writeAttempts} attempts`);
}

/** What a fraud review's decision did to one referral. */
export interface ReviewDecisionOutcome {
  readonly doc: ReferralDoc;
  readonly releasedGrants: number;
  readonly voidedGrants: number;
}

/**
 * A fraud review's decision on one waiting referral (docs/fraud.md).
 * Accept: a flagged referral goes back to pending, or to accepted (with
 * its grants) when the referee already sent the campaign's reward
 * trigger; held grants are released and the hold ends. Reject: a flagged
 * or pending referral is rejected, an accepted one reversed (its unpaid
 * grants voided). Each move is a review's, recorded in the history.
 */
export async function decideReview(
  deps: Pick<LifecycleDeps, "clock">,
  caller: Caller,
  referral: ReferralDoc,
  decision: "accept" | "reject",
  reason: string,
): Promise<ReviewDecisionOutcome> {
  const { store } = caller;
  const now = deps.clock();
  const heldGrants = async (doc: ReferralDoc) => {
    const where = referralGrants(doc);
    const grants = where ? await store.rewards.findOfReferral(where) : [];
    return grants.filter(
      (grant) => grant.awaitsConfirmation === true && grant.statusReason === fraudReview,
    ).length;
  };
  if (decision === "reject") {
    const to = referral.status === "accepted" ? "reversed" : "rejected";
    const voided = to === "reversed" ? await heldGrants(referral) : 0;
    const { doc } = await reviewReferral(deps, caller, referral._id, to, reason);
    return { doc, releasedGrants: 0, voidedGrants: voided };
  }
  if (referral.status === "flagged") {
    const campaign = await store.campaigns.find(referral.campaignId);
    const triggered = campaign
      ? await sentTrigger(store, referral, rewardTriggerOf(campaign))
      : false;
    const to = triggered ? "accepted" : "pending";
    const { doc } = await reviewReferral(deps, caller, referral._id, to, reason);
    return { doc, releasedGrants: 0, voidedGrants: 0 };
  }
  let released = 0;
  if (referral.status === "accepted") {
    released = await releaseHeldGrants(store, referral, fraudReview, {
      cause: "review",
      actorId: caller.keyId,
      reason,
      at: now,
    });
  }
  const doc = (await store.referrals.endRewardsHold(referral, now, [])) ?? referral;
  return { doc, releasedGrants: released, voidedGrants: 0 };
}

/** Whether the referee sent a checkpoint named `trigger` (among its latest 1,000). */
async function sentTrigger(
  store: TenantStore,
  referral: ReferralDoc,
  trigger: string | null,
): Promise<boolean> {
  if (!trigger) return false;
  const { docs } = await store.checkpoints.findOfCustomer(
    { _id: referral.refereeId, environment: referral.environment },
    { offset: 0, limit: 1000 },
  );
  return docs.some((checkpoint) => checkpoint.name === trigger);
}

/**
 * Accepts a referral with the grants it earns: in the same atomic write
 * where the engine writes several documents together, else planned in the
 * acceptance's write (so a crash after it loses none: the sweep makes
 * them) and made after it. Null when a concurrent change came first.
 */
async function accept(
  store: TenantStore,
  current: ReferralDoc,
  change: StatusChange & { fromStatus: ReferralStatusName },
  after: ReferralDoc,
  plan: readonly PlannedGrant[],
  /** Why its grants wait, if they do (see `GrantHoldReason`). */
  heldFor: GrantHoldReason | null = null,
  /**
   * The checkpoint that makes the acceptance, not stored yet: stored in
   * the same write, which the engine then must make together.
   */
  checkpoint?: UnstoredCheckpoint,
): Promise<ReferralDoc | null> {
  const grantIds = plan.map((entry) => entry.grant._id);
  const events = () => referralStatusChanged(after, referralView(after), grantIds);
  const work: ReferralRewardWork = {
    // Accepted by an unverified checkpoint under `hold`: waits for a trusted one.
    ...(heldFor === unverifiedConversion ? { awaitsConfirmation: true as const } : {}),
    // Accepted by a reviewer: the review a held reward waits for.
    ...(current.rewardsHeld && heldFor !== fraudReview ? { releasesRewards: true as const } : {}),
  };
  const together = store.referrals.transitionWithGrants;
  if ((plan.length > 0 || checkpoint) && together) {
    return acceptWithGrants(store, together, current, change, events, plan, work, checkpoint);
  }
  if (checkpoint)
    throw new Error(
      "a checkpoint is stored with its conversion only where writes are made together",
    );
  const planned: ReferralRewardWork =
    plan.length > 0 ? { ...work, grantPlan: [...plan], grantPlanPending: true } : work;
  const moved = await store.referrals.transition(current, change, events, planned);
  if (moved && plan.length > 0) {
    await makePlannedGrants(store, { referralId: moved._id }, plan, change.changedAt);
  }
  return moved;
}

/**
 * Ingest: stores a checkpoint and converts the customer's referrals it
 * triggers. Conversion: a checkpoint named like a campaign's reward
 * trigger acts on the customer's referrals in that campaign as
 * `conversionByCheckpoint` says: it accepts a pending one with the grants
 * it earns (held for confirmation when only a public key vouches for it
 * under `hold`), or confirms one an unverified checkpoint accepted.
 * Flagged and final referrals stay as they are, and a repeated checkpoint
 * finds nothing pending, so conversion happens once. Returns the accepted
 * referrals.
 *
 * Where the engine writes several documents together, the checkpoint is
 * stored in the write of the first acceptance it makes: one write, one
 * commit to wait for, instead of two. It is stored on its own before
 * anything else it does (a confirmation), and when it converts nothing.
 * Elsewhere it is stored first. Either way a failure before it is stored
 * changes nothing, and one after it is retried by the client: conversion
 * is idempotent, so the checkpoint's effect is never lost.
 */
export async function storeCheckpointAndConvert(
  store: TenantStore,
  customer: CustomerDoc,
  checkpoint: CheckpointDoc,
  /** A secret key's checkpoint, or one with the customer's valid userHash. */
  trusted: boolean,
): Promise<ReferralDoc[]> {
  let unstored: UnstoredCheckpoint | undefined = {
    doc: checkpoint,
    outbox: () => checkpointIngested(checkpoint),
  };
  const storeCheckpoint = async () => {
    if (!unstored) return;
    await store.checkpoints.insert(checkpoint, unstored.outbox);
    unstored = undefined;
  };
  if (!store.referrals.transitionWithGrants) await storeCheckpoint();
  const found = await store.referrals.findConvertibleOfReferee(customer);
  const campaignIds = [...new Set(found.map((referral) => referral.campaignId))];
  const campaigns = found.length > 0 ? await store.campaigns.findByIds(campaignIds) : [];
  const byId = new Map(campaigns.map((campaign) => [campaign._id, campaign]));
  const accepted: ReferralDoc[] = [];
  for (const first of found) {
    const campaign = byId.get(first.campaignId);
    if (!campaign || rewardTriggerOf(campaign) !== checkpoint.name) continue;
    // A concurrent write (another ingest, a review, a re-attribution) makes
    // the transition miss, and writes nothing; re-read, and decide again.
    let referral: ReferralDoc | null = first;
    for (let attempt = 1; referral && attempt <= writeAttempts; attempt++) {
      const action = conversionByCheckpoint(referral, trusted, publicCheckpointsOf(campaign));
      if (action === "nothing") break;
      if (action === "confirm") {
        await storeCheckpoint();
        await confirmConversion(store, referral, checkpoint._id, checkpoint.createdAt);
        break;
      }
      const change = statusChange(
        referral.status,
        "accepted",
        "checkpoint",
        checkpoint._id,
        checkpoint.createdAt,
        `checkpoint "${checkpoint.name}"`,
      );
      // A fraud review's hold outlasts a confirmation, so it names the grants' reason.
      const heldFor = referral.rewardsHeld
        ? fraudReview
        : action === "convert and hold"
          ? unverifiedConversion
          : null;
      const after = transitioned(referral, change);
      const plan = await prepareEarnedGrants(store, campaign, after, change, heldFor);
      const moved = await accept(store, referral, change, after, plan, heldFor, unstored);
      if (moved) {
        unstored = undefined;
        accepted.push(moved);
        break;
      }
      referral = await store.referrals.find(referral._id);
    }
  }
  await storeCheckpoint();
  return accepted;
}

/** The status change's reason: the rules whose verdicts set the status (notes are evidence). */
function rulesReason(frauds: readonly SuspectedFraud[]): string | undefined {
  const acting = frauds.filter((fraud) => fraud.action !== "note");
  return acting.length === 0 ? undefined : acting.map((fraud) => fraud.type).join(", ");
}
