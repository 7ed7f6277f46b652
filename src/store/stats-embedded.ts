import { campaignOfScope, leaderboardWindowsOf, type StatsMoves } from "../domain/stats.js";
import {
  type BucketRun,
  bucketSeconds,
  leaderboardWindowRange,
  quarterHourMs,
  zoneDay,
  zoneDayOf,
} from "../domain/stats-time.js";
import type { SqliteDatabase } from "./sqlite.js";
import {
  emptySnapshot,
  type LeaderRow,
  type StatsSnapshot,
  type StatsStore,
  scopeKey,
  zoneScope,
} from "./stats.js";

const schema = [
  // One row per scope, counter size, bucket and metric.
  "CREATE TABLE IF NOT EXISTS stat_counts (scope INTEGER NOT NULL, size INTEGER NOT NULL, bucket INTEGER NOT NULL, metric TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (scope, size, bucket, metric)) WITHOUT ROWID, STRICT",
  // Each referral in its referrer's order, with the time of the one before (p).
  "CREATE TABLE IF NOT EXISTS stat_referrals (scope INTEGER NOT NULL, id TEXT NOT NULL, referrer TEXT NOT NULL, t INTEGER NOT NULL, p INTEGER, PRIMARY KEY (scope, id)) WITHOUT ROWID, STRICT",
  "CREATE INDEX IF NOT EXISTS stat_referrals_chain ON stat_referrals (scope, referrer, t, id)",
  "CREATE INDEX IF NOT EXISTS stat_referrals_time ON stat_referrals (scope, t, p)",
  "CREATE TABLE IF NOT EXISTS stat_leaders (scope INTEGER NOT NULL, period TEXT NOT NULL, referrer TEXT NOT NULL, accepted INTEGER NOT NULL, reached_at INTEGER NOT NULL, PRIMARY KEY (scope, period, referrer)) WITHOUT ROWID, STRICT",
  "CREATE INDEX IF NOT EXISTS stat_leaders_rank ON stat_leaders (scope, period, accepted DESC, reached_at, referrer)",
  "CREATE TABLE IF NOT EXISTS stat_acceptances (scope INTEGER NOT NULL, id TEXT NOT NULL, referrer TEXT NOT NULL, at INTEGER NOT NULL, PRIMARY KEY (scope, id)) WITHOUT ROWID, STRICT",
  "CREATE INDEX IF NOT EXISTS stat_acceptances_time ON stat_acceptances (scope, at, referrer)",
  "CREATE INDEX IF NOT EXISTS stat_acceptances_referrer ON stat_acceptances (scope, referrer, at)",
];

const sql = {
  count:
    "INSERT INTO stat_counts (scope, size, bucket, metric, n) VALUES (?1, ?2, ?3, ?8, ?9), (?1, ?4, ?5, ?8, ?9), (?1, ?6, ?7, ?8, ?9) " +
    "ON CONFLICT (scope, size, bucket, metric) DO UPDATE SET n = n + excluded.n",
  zoneCount:
    "INSERT INTO stat_counts (scope, size, bucket, metric, n) VALUES (?, ?, ?, ?, ?) " +
    "ON CONFLICT (scope, size, bucket, metric) DO UPDATE SET n = n + excluded.n",
  quarterHours: "SELECT bucket, metric, n FROM stat_counts WHERE scope = ? AND size = ?",
  dropZone: "DELETE FROM stat_counts WHERE scope = ? AND size = ?",
  before:
    "SELECT t FROM stat_referrals WHERE scope = ? AND referrer = ? AND (t, id) < (?, ?) ORDER BY t DESC, id DESC LIMIT 1",
  after:
    "SELECT id FROM stat_referrals WHERE scope = ? AND referrer = ? AND (t, id) > (?, ?) ORDER BY t, id LIMIT 1",
  attribute: "INSERT INTO stat_referrals (scope, id, referrer, t, p) VALUES (?, ?, ?, ?, ?)",
  relink: "UPDATE stat_referrals SET p = ? WHERE scope = ? AND id = ?",
  entry: "SELECT referrer, t, p FROM stat_referrals WHERE scope = ? AND id = ?",
  unattribute: "DELETE FROM stat_referrals WHERE scope = ? AND id = ?",
  lead:
    "INSERT INTO stat_leaders (scope, period, referrer, accepted, reached_at) VALUES (?, ?, ?, 1, ?) " +
    "ON CONFLICT (scope, period, referrer) DO UPDATE SET accepted = accepted + 1, reached_at = max(reached_at, excluded.reached_at)",
  accept: "INSERT INTO stat_acceptances (scope, id, referrer, at) VALUES (?, ?, ?, ?)",
  unaccept: "DELETE FROM stat_acceptances WHERE scope = ? AND id = ?",
  latest:
    "SELECT max(at) AS at FROM stat_acceptances WHERE scope = ? AND referrer = ? AND at >= ? AND at < ?",
  unlead:
    "UPDATE stat_leaders SET accepted = accepted - 1, reached_at = coalesce(?, reached_at) WHERE scope = ? AND period = ? AND referrer = ?",
  dropLeader:
    "DELETE FROM stat_leaders WHERE scope = ? AND period = ? AND referrer = ? AND accepted <= 0",
  timeZone: `SELECT doc->>'$.timeZone' AS zone FROM "campaigns" WHERE id = ?`,
} as const;

/** The most settled counts kept (a few hundred bytes each). */
const maxSettledCounts = 20_000;

/** Every ms instant: the widest window a query can take. */
const always: readonly [number, number] = [-8.64e15, 8.64e15];

/**
 * The numbers on the embedded engine: tables beside the collections,
 * moved by the collections' watchers inside the write's savepoint (so a
 * failed write moves nothing and a committed one moves them exactly once).
 */
export class EmbeddedStats implements StatsStore {
  private readonly listeners = new Set<(scopes: ReadonlySet<string>) => void>();
  private changed = new Set<string>();
  /** Active referrers of settled spans (see {@link activeReferrers}), by `scope|from|until`. */
  private readonly settled = new Map<string, number>();
  /** Per scope key, the settled spans' ends, to drop those a change touches. */
  private readonly settledEnds = new Map<number, { cacheKey: string; until: number }[]>();
  /** The database's rollbacks when the settled counts were taken. */
  private settledAt = 0;
  private scheduled = false;

  constructor(private readonly database: SqliteDatabase) {
    for (const statement of schema) database.exec(statement);
  }

  /** The moves, applied in SQL; called inside the collection's write. */
  readonly moves: StatsMoves = {
    count: (scope, at, name, n) => {
      const campaignId = campaignOfScope(scope);
      if (campaignId !== null) {
        const timeZone = this.timeZoneOf(campaignId);
        this.query(sql.zoneCount).run(
          scopeKey(zoneScope(scope, timeZone)),
          zoneDay,
          zoneDayOf(at, timeZone),
          name,
          n,
        );
      }
      const seconds = Math.floor(at / 1000);
      const [quarter, hour, day] = bucketSeconds;
      this.query(sql.count).run(
        scopeKey(scope),
        quarter,
        Math.floor(seconds / quarter),
        hour,
        Math.floor(seconds / hour),
        day,
        Math.floor(seconds / day),
        name,
        n,
      );
      this.noteChange(scope);
    },
    attribute: (scope, referralId, referrerId, at) => {
      const key = scopeKey(scope);
      const previous = this.query(sql.before).get(key, referrerId, at, referralId) as
        | { t: number }
        | undefined;
      const next = this.query(sql.after).get(key, referrerId, at, referralId) as
        | { id: string }
        | undefined;
      this.query(sql.attribute).run(key, referralId, referrerId, at, previous?.t ?? null);
      if (next) this.query(sql.relink).run(at, key, next.id);
      this.unsettle(scope, at);
      this.noteChange(scope);
    },
    unattribute: (scope, referralId) => {
      const key = scopeKey(scope);
      const entry = this.query(sql.entry).get(key, referralId) as
        | { referrer: string; t: number; p: number | null }
        | undefined;
      if (!entry) return;
      const next = this.query(sql.after).get(key, entry.referrer, entry.t, referralId) as
        | { id: string }
        | undefined;
      if (next) this.query(sql.relink).run(entry.p, key, next.id);
      this.query(sql.unattribute).run(key, referralId);
      this.unsettle(scope, entry.t);
      this.noteChange(scope);
    },
    rezone: (scope, timeZone) => {
      // Every zone-day counter again, from the quarter hours: each quarter
      // hour lies within one local day of any zone.
      const rows = this.query(sql.quarterHours).all(scopeKey(scope), bucketSeconds[0]) as {
        bucket: number;
        metric: string;
        n: number;
      }[];
      const days = new Map<string, number>();
      for (const row of rows) {
        const key = `${zoneDayOf(row.bucket * bucketSeconds[0] * 1000, timeZone)}|${row.metric}`;
        days.set(key, (days.get(key) ?? 0) + row.n);
      }
      const target = scopeKey(zoneScope(scope, timeZone));
      this.query(sql.dropZone).run(target, zoneDay);
      for (const [key, n] of days) {
        const split = key.indexOf("|");
        this.query(sql.zoneCount).run(
          target,
          zoneDay,
          Number(key.slice(0, split)),
          key.slice(split + 1),
          n,
        );
      }
      this.noteChange(scope);
    },
    lead: (scope, campaignId, referralId, referrerId, delta, acceptedAt) => {
      const key = scopeKey(scope);
      const timeZone = this.timeZoneOf(campaignId);
      if (delta === 1) {
        this.query(sql.accept).run(key, referralId, referrerId, acceptedAt);
      } else {
        this.query(sql.unaccept).run(key, referralId);
      }
      for (const window of leaderboardWindowsOf(acceptedAt, timeZone)) {
        if (delta === 1) {
          this.query(sql.lead).run(key, window, referrerId, acceptedAt);
          continue;
        }
        // The tie-break time goes back to the latest acceptance still counted.
        const [from, to] = leaderboardWindowRange(window, timeZone) ?? always;
        const latest = this.query(sql.latest).get(key, referrerId, from, to) as {
          at: number | null;
        };
        this.query(sql.unlead).run(latest.at, key, window, referrerId);
        this.query(sql.dropLeader).run(key, window, referrerId);
      }
      this.noteChange(scope);
    },
  };

  /** A statement, noted for the query-plan test (see `SqliteDatabase.noteQuery`). */
  private query(sql: string) {
    this.database.noteQuery(sql, "stats", {});
    return this.database.statement(sql);
  }

  private timeZoneOf(campaignId: string): string {
    const row = this.query(sql.timeZone).get(campaignId) as { zone: string | null } | undefined;
    return row?.zone || "UTC";
  }

  /** Listeners hear of a write's scopes after its commit (group commits run first in the same turn). */
  private noteChange(scope: string): void {
    if (this.listeners.size === 0) return;
    this.changed.add(scope);
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      const scopes = this.changed;
      this.changed = new Set();
      for (const listener of this.listeners) listener(scopes);
    });
  }

  onChange(listener: (scopes: ReadonlySet<string>) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  async sums(
    scope: string,
    points: readonly (readonly BucketRun[])[],
    options: { only?: "customers and checkpoints"; timeZone?: string } = {},
  ): Promise<Map<string, number>[]> {
    const { only, timeZone } = options;
    const zoneKey = timeZone === undefined ? null : scopeKey(zoneScope(scope, timeZone));
    const runs = points.flatMap((runsOfPoint, point) =>
      runsOfPoint.map((run) => [
        point,
        run.size,
        run.from,
        run.to,
        run.size === zoneDay ? zoneKey : scopeKey(scope),
      ]),
    );
    const filter =
      only === undefined
        ? ""
        : " AND (s.metric = 'identified' OR (s.metric >= 'checkpoint:' AND s.metric < 'checkpoint;'))";
    const rows = this.query(
      "SELECT j.value->>0 AS point, s.metric AS metric, sum(s.n) AS n FROM json_each(?) AS j " +
        "CROSS JOIN stat_counts AS s ON s.scope = j.value->>4 AND s.size = j.value->>1 AND s.bucket >= j.value->>2 AND s.bucket < j.value->>3" +
        `${filter} GROUP BY 1, 2`,
    ).all(JSON.stringify(runs)) as { point: number; metric: string; n: number }[];
    const sums = points.map(() => new Map<string, number>());
    for (const row of rows) {
      if (row.n !== 0) sums[row.point]?.set(row.metric, row.n);
    }
    return sums;
  }

  /**
   * Counted in two parts: the settled past, [from, now), once per process
   * (a past that only a re-attribution or an import can change, which
   * drops the counts it touches), and what came since, [now, to), an
   * index range over the newest referrals only; a referrer of the second
   * part whose referral before was in the first is already counted. So a
   * year of days reads the year's referrals once, not on every call.
   */
  async activeReferrers(
    scope: string,
    spans: readonly (readonly [number, number])[],
  ): Promise<number[]> {
    const key = scopeKey(scope);
    const count = this.query(
      "SELECT count(*) AS n FROM stat_referrals WHERE scope = ? AND t >= ? AND t < ? AND (p IS NULL OR p < ?)",
    );
    const between = (from: number, to: number, before: number) =>
      to <= from ? 0 : (count.get(key, from, to, before) as { n: number }).n;
    if (this.settledAt !== this.database.rollbacks) {
      // A rolled-back write may have been counted: forget everything.
      this.settled.clear();
      this.settledAt = this.database.rollbacks;
    }
    const now = Math.floor(Date.now() / quarterHourMs) * quarterHourMs;
    return spans.map(([from, to]) => {
      const settledUntil = Math.min(to, now);
      if (settledUntil <= from) return between(from, to, from);
      const cacheKey = `${key}|${from}|${settledUntil}`;
      let past = this.settled.get(cacheKey);
      if (past === undefined) {
        past = between(from, settledUntil, from);
        if (this.settled.size >= maxSettledCounts) this.settled.clear();
        this.settled.set(cacheKey, past);
        const ends = this.settledEnds.get(key) ?? [];
        ends.push({ cacheKey, until: settledUntil });
        this.settledEnds.set(key, ends);
      }
      return past + between(settledUntil, to, from);
    });
  }

  /** Drops the settled counts of a scope that a change of its order at `at` touches. */
  private unsettle(scope: string, at: number): void {
    const ends = this.settledEnds.get(scopeKey(scope));
    if (!ends) return;
    const kept = ends.filter((end) => {
      if (end.until <= at) return true;
      this.settled.delete(end.cacheKey);
      return false;
    });
    this.settledEnds.set(scopeKey(scope), kept);
  }

  async referralsMade(scope: string, referrerIds: readonly string[]): Promise<number[]> {
    const count = this.query(
      "SELECT count(*) AS n FROM stat_referrals WHERE scope = ? AND referrer = ?",
    );
    const key = scopeKey(scope);
    return referrerIds.map((referrer) => (count.get(key, referrer) as { n: number }).n);
  }

  async leaders(
    scope: string,
    window: string,
    limit: number,
    offset: number,
  ): Promise<LeaderRow[]> {
    const rows = this.query(
      "SELECT referrer, accepted, reached_at FROM stat_leaders WHERE scope = ? AND period = ? AND accepted > 0 " +
        "ORDER BY accepted DESC, reached_at, referrer LIMIT ? OFFSET ?",
    ).all(scopeKey(scope), window, limit, offset) as {
      referrer: string;
      accepted: number;
      reached_at: number;
    }[];
    return rows.map(leaderRow);
  }

  async leadersBetween(
    scope: string,
    from: number,
    to: number,
    limit: number,
    offset: number,
  ): Promise<LeaderRow[]> {
    const rows = this.query(
      "SELECT referrer, count(*) AS accepted, max(at) AS reached_at FROM stat_acceptances " +
        "WHERE scope = ? AND at >= ? AND at < ? GROUP BY referrer ORDER BY accepted DESC, reached_at, referrer LIMIT ? OFFSET ?",
    ).all(scopeKey(scope), from, to, limit, offset) as {
      referrer: string;
      accepted: number;
      reached_at: number;
    }[];
    return rows.map(leaderRow);
  }

  async snapshot(scopes: readonly string[]): Promise<StatsSnapshot> {
    const snapshot = emptySnapshot();
    for (const scope of scopes) {
      const key = scopeKey(scope);
      const all = (text: string) => this.query(text).all(key) as Record<string, never>[];
      for (const row of all(
        "SELECT size, bucket, metric, n FROM stat_counts WHERE scope = ? AND n != 0",
      )) {
        snapshot.counts.set(`${scope}|${row.size}|${row.bucket}|${row.metric}`, row.n);
      }
      for (const row of all("SELECT id, referrer, t, p FROM stat_referrals WHERE scope = ?")) {
        snapshot.referrals.set(`${scope}|${row.id}`, `${row.referrer}|${row.t}|${row.p}`);
      }
      for (const row of all(
        "SELECT period, referrer, accepted, reached_at FROM stat_leaders WHERE scope = ? AND accepted != 0",
      )) {
        snapshot.leaders.set(
          `${scope}|${row.period}|${row.referrer}`,
          `${row.accepted}|${row.reached_at}`,
        );
      }
      for (const row of all("SELECT id, referrer, at FROM stat_acceptances WHERE scope = ?")) {
        snapshot.acceptances.set(`${scope}|${row.id}`, `${row.referrer}|${row.at}`);
      }
    }
    return snapshot;
  }

  replace(scopes: readonly string[], wanted: StatsSnapshot): Promise<void> {
    return this.database.write(() => {
      this.settled.clear();
      for (const scope of scopes) {
        const key = scopeKey(scope);
        for (const table of ["stat_counts", "stat_referrals", "stat_leaders", "stat_acceptances"]) {
          this.query(`DELETE FROM ${table} WHERE scope = ?`).run(key);
        }
      }
      const keyOf = (composite: string) => {
        const [application, environment, campaign, ...rest] = composite.split("|");
        return { key: scopeKey(`${application}|${environment}|${campaign}`), rest };
      };
      for (const [composite, n] of wanted.counts) {
        const { key, rest } = keyOf(composite);
        const [size, bucket, ...metric] = rest;
        this.query(
          "INSERT INTO stat_counts (scope, size, bucket, metric, n) VALUES (?, ?, ?, ?, ?)",
        ).run(key, Number(size), Number(bucket), metric.join("|"), n);
      }
      for (const [composite, value] of wanted.referrals) {
        const { key, rest } = keyOf(composite);
        const [referrer, t, p] = value.split("|");
        this.query(sql.attribute).run(
          key,
          rest.join("|"),
          referrer ?? "",
          Number(t),
          p === "null" ? null : Number(p),
        );
      }
      for (const [composite, value] of wanted.leaders) {
        const { key, rest } = keyOf(composite);
        const [period, referrer] = rest;
        const [accepted, reachedAt] = value.split("|");
        this.query(
          "INSERT INTO stat_leaders (scope, period, referrer, accepted, reached_at) VALUES (?, ?, ?, ?, ?)",
        ).run(key, period ?? "", referrer ?? "", Number(accepted), Number(reachedAt));
      }
      for (const [composite, value] of wanted.acceptances) {
        const { key, rest } = keyOf(composite);
        const [referrer, at] = value.split("|");
        this.query(sql.accept).run(key, rest.join("|"), referrer ?? "", Number(at));
      }
      for (const scope of scopes) this.noteChange(scope);
    });
  }
}

function leaderRow(row: { referrer: string; accepted: number; reached_at: number }): LeaderRow {
  return { referrerId: row.referrer, accepted: row.accepted, reachedAt: row.reached_at };
}
