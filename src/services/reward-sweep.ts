import { setTimeout as sleep } from "node:timers/promises";
import type { Clock, Tenant } from "../domain/tenancy.js";
import type { GrantPlanHolder, RewardGrantDoc } from "../store/documents.js";
import { sweepQueries } from "../store/reward-grants.js";
import type { Store } from "../store/store.js";
import type { TenantStore } from "../store/tenant-store.js";
import { awaitsReview } from "./fraud-reviews.js";
import { decideReview } from "./referral-lifecycle.js";
import {
  type MoveReason,
  makePlannedGrants,
  moveGrant,
  releaseRoom,
  serviceActor,
  settleReversal,
} from "./reward-ledger.js";

/** What one pass of the sweep did. */
export interface RewardSweepReport {
  /** Pending grants approved at the end of their hold. */
  readonly approved: number;
  /** Approved grants expired unfulfilled. */
  readonly expired: number;
  /** Room given back after a crash kept it. */
  readonly released: number;
  /** Grants made from plans a crash left (referrals' acceptances, manual grants). */
  readonly made: number;
  /** Reversals finished after a crash interrupted them. */
  readonly reversed: number;
  /** Fraud reviews accepted by their lapsed deadline. */
  readonly lapsed: number;
}

/** The running sweep. */
export interface RewardSweep {
  /** One pass now (tests, and the loop itself). */
  runOnce(): Promise<RewardSweepReport>;
  /** Ends the loop; a pass under way finishes first. */
  stop(): Promise<void>;
}

/**
 * The reward ledger's background work, for every tenant: approving grants
 * whose hold ended, expiring unfulfilled ones, and finishing what a crash
 * interrupted (grants planned but not made, room not given back, reversals
 * half done). Its state is the store's, so it survives restarts; every
 * step is a conditional write, so several instances sharing a MongoDB
 * database approve or expire each grant once.
 */
export function startRewardSweep(deps: {
  store: Store;
  clock: Clock;
  log: (error: unknown, message: string) => void;
  /** Says events were written. */
  notifyWebhooks: () => void;
  intervalMs?: number;
  batchSize?: number;
}): RewardSweep {
  const { store, clock } = deps;
  const db = store.system;
  const intervalMs = deps.intervalMs ?? 1000;
  const batchSize = deps.batchSize ?? 100;
  // One tenant object per application, so its repositories are built once.
  const tenants = new Map<string, Tenant>();
  const storeOf = (doc: Tenant): TenantStore => {
    let tenant = tenants.get(doc.applicationId);
    if (!tenant) {
      tenant = { organizationId: doc.organizationId, applicationId: doc.applicationId };
      tenants.set(doc.applicationId, tenant);
    }
    return store.forTenant(tenant);
  };

  // Each item on its own: one that fails is logged and found again next
  // pass, and does not hold up the others.
  async function each<T>(
    items: readonly T[],
    work: (item: T) => Promise<boolean>,
  ): Promise<number> {
    let done = 0;
    for (const item of items) {
      try {
        if (await work(item)) done += 1;
      } catch (error) {
        deps.log(error, "a reward sweep step failed; it is retried on the next pass");
      }
    }
    return done;
  }

  const byService = (now: Date, cause: MoveReason["cause"]): MoveReason => ({
    cause,
    actorId: serviceActor,
    reason: null,
    at: now,
  });

  async function pass(): Promise<{ report: RewardSweepReport; full: boolean }> {
    const now = clock();
    // A plan or a reversal this recent may still be in the hands of the
    // call that started it; finishing it too would only repeat its work.
    const settled = (at: Date) => now.getTime() - at.getTime() >= settleAfterMs;
    const [approvals, expiries, releases, referralPlans, customerPlans, reversals, reviews] =
      await Promise.all([
        sweepQueries.dueApprovals(db, now, batchSize),
        sweepQueries.dueExpiries(db, now, batchSize),
        sweepQueries.pendingReleases(db, batchSize),
        sweepQueries.planHolders(db.referrals, batchSize),
        sweepQueries.planHolders(db.customers, batchSize),
        sweepQueries.pendingReversals(db, batchSize),
        sweepQueries.dueReviews(db, now, batchSize),
      ]);
    const move =
      (to: "approved" | "expired", cause: MoveReason["cause"]) => (grant: RewardGrantDoc) =>
        moveGrant(storeOf(grant), grant, to, byService(now, cause)).then((moved) => moved !== null);
    const makePlan =
      (holderOf: (id: string) => { referralId: string } | { customerId: string }) =>
      async (holder: GrantPlanHolder) => {
        const due = (holder.grantPlan ?? []).filter((entry) => settled(entry.grant.createdAt));
        if (due.length === 0) return false;
        await makePlannedGrants(storeOf(holder), holderOf(holder._id), due, now);
        return true;
      };
    const report: RewardSweepReport = {
      approved: await each(approvals, move("approved", "hold_ended")),
      expired: await each(expiries, move("expired", "expiry")),
      released: await each(releases, async (grant) => {
        await releaseRoom(storeOf(grant), grant, now);
        return true;
      }),
      made:
        (await each(
          referralPlans,
          makePlan((referralId) => ({ referralId })),
        )) +
        (await each(
          customerPlans,
          makePlan((customerId) => ({ customerId })),
        )),
      reversed: await each(reversals, async (referral) => {
        if (!settled(referral.updatedAt)) return false;
        await settleReversal(storeOf(referral), referral, now);
        return true;
      }),
      lapsed: await each(reviews, async (referral) => {
        // Decided before its deadline: nothing is left to accept.
        const waits = awaitsReview(referral);
        const tenantStore = storeOf(referral);
        if (waits) {
          const caller = {
            tenant: tenants.get(referral.applicationId) as Tenant,
            keyId: serviceActor,
            keyKind: "secret" as const,
            store: tenantStore,
          };
          await decideReview({ clock }, caller, referral, "accept", lapsedReason);
        }
        await tenantStore.referrals.clearReviewDue(referral._id);
        return waits;
      }),
    };
    const full = [approvals, expiries, releases].some((batch) => batch.length === batchSize);
    if (Object.values(report).some((count) => count > 0)) deps.notifyWebhooks();
    return { report, full };
  }

  // Passes run one at a time, whoever asks (the loop, a test).
  let running: Promise<unknown> = Promise.resolve();
  const serialized = () => {
    const next = running.then(pass, pass);
    running = next.catch(() => {});
    return next;
  };

  const stopping = new AbortController();
  async function loop(): Promise<void> {
    while (!stopping.signal.aborted) {
      let full = false;
      try {
        full = (await serialized()).full;
      } catch (error) {
        deps.log(error, "the reward sweep failed; retrying");
      }
      if (full) continue;
      // Unreferenced: a sleeping sweep never keeps the process alive.
      await sleep(intervalMs, undefined, { signal: stopping.signal, ref: false }).catch(() => {});
    }
  }
  const looping = loop();

  return {
    runOnce: () => serialized().then(({ report }) => report),
    async stop() {
      stopping.abort();
      await looping;
      await running;
    },
  };
}

/** The reason a lapsed review's acceptance records. */
export const lapsedReason = "the fraud review's deadline lapsed";

/** How old a plan or a reversal must be before the sweep finishes it. */
export const settleAfterMs = 5_000;
