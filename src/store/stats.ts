import { createHash } from "node:crypto";
import type { Document } from "mongodb";
import {
  type CampaignFacts,
  type CheckpointFacts,
  type ClickFacts,
  type CustomerFacts,
  type GrantFacts,
  moveCampaignStats,
  moveCheckpointStats,
  moveClickStats,
  moveCustomerStats,
  moveGrantStats,
  moveReferralStats,
  type ReferralFacts,
  type StatsMoves,
} from "../domain/stats.js";
import type { BucketRun } from "../domain/stats-time.js";

/**
 * The program's numbers as an engine keeps them (see
 * `src/domain/stats.ts` for what moves them): counters per scope, bucket
 * and metric; each referral's place among its referrer's referrals (for
 * the referrers active in a period); and the leaderboards. Both engines
 * move them in the same atomic write as the change of the record.
 */
export interface StatsStore {
  /**
   * For each point (a list of bucket runs), the sum of every counter of
   * the scope over its runs, by metric. `only` keeps the metrics the
   * application scope adds to a campaign's: customers and checkpoints.
   * Zone-day runs read the campaign's counters of `timeZone`, its own.
   */
  sums(
    scope: string,
    points: readonly (readonly BucketRun[])[],
    options?: { only?: "customers and checkpoints"; timeZone?: string },
  ): Promise<Map<string, number>[]>;
  /**
   * The time zones whose days an environment's counters keep (UTC's and
   * its campaigns'): a report in one of them reads one counter a day.
   */
  keptZones(environmentScope: string): Promise<readonly string[]>;
  /** For each span [from, to) in ms, the referrers with a referral created in it. */
  activeReferrers(scope: string, spans: readonly (readonly [number, number])[]): Promise<number[]>;
  /** For each referrer, the referrals it made in the scope, any status. */
  referralsMade(scope: string, referrerIds: readonly string[]): Promise<number[]>;
  /** The leaderboard of all time, best first: most accepted, then who reached the count first. */
  leaders(scope: string, limit: number, offset: number): Promise<LeaderRow[]>;
  /** The same over acceptances in [from, to) (ms). */
  leadersBetween(
    scope: string,
    from: number,
    to: number,
    limit: number,
    offset: number,
  ): Promise<LeaderRow[]>;
  /** Everything kept for the scopes, for verify-stats. */
  snapshot(scopes: readonly string[]): Promise<StatsSnapshot>;
  /** Replaces what is kept for the scopes with `wanted` (verify-stats --repair), in one write. */
  replace(scopes: readonly string[], wanted: StatsSnapshot): Promise<void>;
  /** Told of the scopes a committed write changed; returns how to stop. */
  onChange(listener: (scopes: ReadonlySet<string>) => void): () => void;
}

/** One leaderboard row. */
export interface LeaderRow {
  readonly referrerId: string;
  readonly accepted: number;
  /** When the referrer reached the count: its latest acceptance counted (ms). */
  readonly reachedAt: number;
}

/**
 * What is kept, as comparable maps (verify-stats): counters by
 * `scope|size|bucket|metric` (zeros left out), chain entries by
 * `scope|referral` as `referrer|t|p`, leaderboard rows by
 * `scope|referrer` as `accepted|reachedAt`, acceptances by
 * `scope|referral` as `referrer|at`.
 */
export interface StatsSnapshot {
  readonly counts: Map<string, number>;
  readonly referrals: Map<string, string>;
  readonly leaders: Map<string, string>;
  readonly acceptances: Map<string, string>;
}

/** An empty snapshot. */
export function emptySnapshot(): StatsSnapshot {
  return { counts: new Map(), referrals: new Map(), leaders: new Map(), acceptances: new Map() };
}

/**
 * Who hears of the scopes a committed write changed (`StatsStore.onChange`):
 * the part of it both engines share.
 */
export class StatsListeners {
  private readonly listeners = new Set<(scopes: ReadonlySet<string>) => void>();

  /** Whether anyone listens: a write that nobody watches notes nothing. */
  get heard(): boolean {
    return this.listeners.size > 0;
  }

  add(listener: (scopes: ReadonlySet<string>) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  tell(scopes: ReadonlySet<string>): void {
    for (const listener of this.listeners) listener(scopes);
  }
}

const scopeKeys = new Map<string, number>();
/** The most scope keys kept: one per campaign and zone read or written, for the life of the process. */
const maxScopeKeys = 10_000;

/**
 * A scope's key in storage: 52 bits of its name's hash, so rows hold a
 * number instead of a 50-byte name (a collision among a few thousand
 * scopes has odds of about 1 in 10^9).
 */
export function scopeKey(scope: string): number {
  let key = scopeKeys.get(scope);
  if (key === undefined) {
    key = Number.parseInt(createHash("sha256").update(scope).digest("hex").slice(0, 13), 16);
    if (scopeKeys.size >= maxScopeKeys) scopeKeys.clear();
    scopeKeys.set(scope, key);
  }
  return key;
}

/** Some of {@link statsWatchers}: what an engine is given to keep the counters with. */
export type StatsWatchers = Partial<typeof statsWatchers>;

/**
 * The collections whose changes move the numbers, and how: the engines
 * call these inside each write of them (see `SqliteCollection.watch` and
 * `MongoStats.watched`).
 */
export const statsWatchers: Record<
  "customers" | "referrals" | "checkpoints" | "rewardGrants" | "campaigns" | "clicks",
  (before: Document | null, after: Document, moves: StatsMoves) => void
> = {
  customers: (before, after, moves) =>
    moveCustomerStats(before as CustomerFacts | null, after as CustomerFacts, moves),
  referrals: (before, after, moves) =>
    moveReferralStats(before as ReferralFacts | null, after as ReferralFacts, moves),
  checkpoints: (before, after, moves) =>
    moveCheckpointStats(before as CheckpointFacts | null, after as CheckpointFacts, moves),
  rewardGrants: (before, after, moves) =>
    moveGrantStats(before as GrantFacts | null, after as GrantFacts, moves),
  campaigns: (before, after, moves) =>
    moveCampaignStats(before as CampaignFacts | null, after as CampaignFacts, moves),
  clicks: (before, after, moves) =>
    moveClickStats(before as ClickFacts | null, after as ClickFacts, moves),
};

/** The scope a campaign's zone-day counters are kept under (see `zoneDay`). */
export function zoneScope(scope: string, timeZone: string): string {
  return `${scope}@${timeZone}`;
}
