import type { Filter } from "mongodb";
import type { ReferralStatusName } from "../domain/referral-status.js";
import { statsScope } from "../domain/stats.js";
import type { BucketRun } from "../domain/stats-time.js";
import type { EnvironmentName, Tenant } from "../domain/tenancy.js";
import type { Collections } from "./collection.js";
import type { ReferralDoc } from "./documents.js";
import type { LeaderRow, StatsStore } from "./stats.js";
import { ownedBy } from "./tenant.js";

/** A campaign of an environment, or all of them (`campaignId` null). */
export interface StatsTarget {
  readonly environment: EnvironmentName;
  readonly campaignId: string | null;
}

/** A leaderboard's window: every acceptance (`all`), or a span in ms. */
export type LeaderboardSpan = "all" | { readonly from: number; readonly to: number };

/**
 * One application's numbers, read from what the engine keeps: never a scan
 * of the records. A campaign's numbers add the application's customers and
 * checkpoints, which belong to no campaign.
 */
export function tenantInsights(stats: StatsStore, tenant: Tenant) {
  const scopeOf = (target: StatsTarget) =>
    statsScope(tenant.applicationId, target.environment, target.campaignId);
  const applicationScope = (target: StatsTarget) =>
    statsScope(tenant.applicationId, target.environment, null);
  return {
    /** For each point (its bucket runs), every metric's sum. */
    /**
     * For each point (its bucket runs), every metric's sum; zone-day runs
     * read the days of `timeZone`, which the target keeps (see `keptZones`).
     */
    async sums(
      target: StatsTarget,
      points: readonly (readonly BucketRun[])[],
      timeZone?: string,
    ): Promise<Map<string, number>[]> {
      const options = timeZone === undefined ? {} : { timeZone };
      const own = stats.sums(scopeOf(target), points, options);
      if (target.campaignId === null) return own;
      const [campaign, application] = await Promise.all([
        own,
        stats.sums(applicationScope(target), points, {
          ...options,
          only: "customers and checkpoints",
        }),
      ]);
      return campaign.map((sums, point) => {
        for (const [name, n] of application[point] ?? []) sums.set(name, n);
        return sums;
      });
    },
    /** The time zones whose days the environment's counters keep (UTC's and its campaigns'). */
    keptZones: (environment: EnvironmentName) =>
      stats.keptZones(statsScope(tenant.applicationId, environment, null)),
    /** For each span [from, to) in ms, the referrers with a referral created in it. */
    activeReferrers: (target: StatsTarget, spans: readonly (readonly [number, number])[]) =>
      stats.activeReferrers(scopeOf(target), spans),
    /** How many referrals each referrer made in the target, any status. */
    referralsMade: (target: StatsTarget, referrerIds: readonly string[]) =>
      stats.referralsMade(scopeOf(target), referrerIds),
    /** A campaign's leaderboard rows, best first. */
    leaders(
      target: StatsTarget & { campaignId: string },
      span: LeaderboardSpan,
      limit: number,
      offset: number,
    ): Promise<LeaderRow[]> {
      const scope = scopeOf(target);
      return span === "all"
        ? stats.leaders(scope, limit, offset)
        : stats.leadersBetween(scope, span.from, span.to, limit, offset);
    },
    /** Calls `listener` after each committed write that moves the target's numbers. */
    onChange(target: StatsTarget, listener: () => void): () => void {
      const scope = scopeOf(target);
      const application = applicationScope(target);
      return stats.onChange((scopes) => {
        if (scopes.has(scope) || scopes.has(application)) listener();
      });
    },
  };
}

/** What ExportReferrals exports. */
export interface ExportFilter {
  readonly environment: EnvironmentName;
  readonly campaignId?: string;
  readonly status?: ReferralStatusName;
  readonly from?: Date;
  readonly to?: Date;
}

/**
 * One page of the export, oldest first, after the cursor (the last
 * referral of the page before): keyset paging, so each page costs the
 * same however deep the export is.
 */
export function findReferralsToExport(
  db: Collections,
  tenant: Tenant,
  filter: ExportFilter,
  after: { createdAt: Date; id: string } | null,
  limit: number,
): Promise<ReferralDoc[]> {
  const query: Filter<ReferralDoc> = {
    ...ownedBy(tenant),
    deletedAt: null,
    environment: filter.environment,
  };
  if (filter.campaignId !== undefined) query.campaignId = filter.campaignId;
  if (filter.status) query.status = filter.status;
  const createdAt: Record<string, Date> = {};
  if (filter.from) createdAt.$gte = filter.from;
  if (filter.to) createdAt.$lt = filter.to;
  if (after && (!filter.from || after.createdAt > filter.from)) createdAt.$gte = after.createdAt;
  if (Object.keys(createdAt).length > 0) query.createdAt = createdAt;
  if (after) {
    query.$or = [
      { createdAt: { $gt: after.createdAt } },
      { createdAt: after.createdAt, _id: { $gt: after.id } },
    ];
  }
  return db.referrals.find(query, { sort: { createdAt: 1, _id: 1 }, limit }).toArray();
}
