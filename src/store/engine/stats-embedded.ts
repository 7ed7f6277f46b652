import {
  campaignOfScope,
  checkpointMetricPrefix,
  metric,
  type StatsMoves,
  statsScope,
} from "../../domain/stats.js";
import {
  type BucketRun,
  bucketSeconds,
  quarterHourMs,
  zoneDay,
  zoneDayOf,
} from "../../domain/stats-time.js";
import {
  emptySnapshot,
  type LeaderRow,
  StatsListeners,
  type StatsSnapshot,
  type StatsStore,
  scopeKey,
  zoneScope,
} from "../stats.js";
import { GroupedAdditions } from "./grouped-additions.js";
import type { SqliteDatabase } from "./sqlite-database.js";
import { fieldExpression } from "./sqlite-query.js";

const schema = [
  // One row per scope, counter size, bucket and metric.
  "CREATE TABLE IF NOT EXISTS stat_counts (scope INTEGER NOT NULL, size INTEGER NOT NULL, bucket INTEGER NOT NULL, metric TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (scope, size, bucket, metric)) WITHOUT ROWID, STRICT",
  // Each referral in its referrer's order (by creation), with the creation of the one before (p).
  "CREATE TABLE IF NOT EXISTS stat_order (scope INTEGER NOT NULL, referrer TEXT NOT NULL, t INTEGER NOT NULL, id TEXT NOT NULL, p INTEGER, PRIMARY KEY (scope, referrer, t, id)) WITHOUT ROWID, STRICT",
  "CREATE INDEX IF NOT EXISTS stat_order_time ON stat_order (scope, t, p)",
  // Each referrer's accepted referrals of all time, ranked.
  "CREATE TABLE IF NOT EXISTS stat_leaderboard (scope INTEGER NOT NULL, referrer TEXT NOT NULL, accepted INTEGER NOT NULL, reached_at INTEGER NOT NULL, PRIMARY KEY (scope, referrer)) WITHOUT ROWID, STRICT",
  "CREATE INDEX IF NOT EXISTS stat_leaderboard_rank ON stat_leaderboard (scope, accepted DESC, reached_at, referrer)",
  // Each acceptance counted, for a leaderboard of any other window.
  "CREATE TABLE IF NOT EXISTS stat_accepted (scope INTEGER NOT NULL, referrer TEXT NOT NULL, at INTEGER NOT NULL, id TEXT NOT NULL, PRIMARY KEY (scope, referrer, at, id)) WITHOUT ROWID, STRICT",
  "CREATE INDEX IF NOT EXISTS stat_accepted_time ON stat_accepted (scope, at)",
];

const sql = {
  zoneCount:
    "INSERT INTO stat_counts (scope, size, bucket, metric, n) VALUES (?, ?, ?, ?, ?) " +
    "ON CONFLICT (scope, size, bucket, metric) DO UPDATE SET n = n + excluded.n",
  quarterHours: "SELECT bucket, metric, n FROM stat_counts WHERE scope = ? AND size = ?",
  dropZone: "DELETE FROM stat_counts WHERE scope = ? AND size = ?",
  newest:
    "SELECT t, id FROM stat_order WHERE scope = ? AND referrer = ? ORDER BY t DESC, id DESC LIMIT 1",
  before:
    "SELECT t FROM stat_order WHERE scope = ? AND referrer = ? AND (t, id) < (?, ?) ORDER BY t DESC, id DESC LIMIT 1",
  after:
    "SELECT t, id FROM stat_order WHERE scope = ? AND referrer = ? AND (t, id) > (?, ?) ORDER BY t, id LIMIT 1",
  attribute: "INSERT INTO stat_order (scope, referrer, t, id, p) VALUES (?, ?, ?, ?, ?)",
  relink: "UPDATE stat_order SET p = ? WHERE scope = ? AND referrer = ? AND t = ? AND id = ?",
  entry: "SELECT p FROM stat_order WHERE scope = ? AND referrer = ? AND t = ? AND id = ?",
  unattribute: "DELETE FROM stat_order WHERE scope = ? AND referrer = ? AND t = ? AND id = ?",
  lead:
    "INSERT INTO stat_leaderboard (scope, referrer, accepted, reached_at) VALUES (?, ?, 1, ?) " +
    "ON CONFLICT (scope, referrer) DO UPDATE SET accepted = accepted + 1, reached_at = max(reached_at, excluded.reached_at)",
  accept: "INSERT INTO stat_accepted (scope, referrer, at, id) VALUES (?, ?, ?, ?)",
  unaccept: "DELETE FROM stat_accepted WHERE scope = ? AND referrer = ? AND at = ? AND id = ?",
  latest: "SELECT max(at) AS at FROM stat_accepted WHERE scope = ? AND referrer = ?",
  unlead:
    "UPDATE stat_leaderboard SET accepted = accepted - 1, reached_at = coalesce(?, reached_at) WHERE scope = ? AND referrer = ?",
  dropLeader: "DELETE FROM stat_leaderboard WHERE scope = ? AND referrer = ? AND accepted <= 0",
  timeZone: `SELECT ${fieldExpression("timeZone")} AS zone FROM "campaigns" WHERE id = ?`,
  // On the campaigns' own index (application, environment, ...).
  zonesInUse:
    `SELECT DISTINCT ${fieldExpression("timeZone")} AS zone FROM "campaigns" ` +
    `WHERE ${fieldExpression("applicationId")} = ? AND ${fieldExpression("environment")} = ? AND id != ?`,
  flushOne:
    "INSERT INTO stat_counts (scope, size, bucket, metric, n) VALUES (?, ?, ?, ?, ?) " +
    "ON CONFLICT (scope, size, bucket, metric) DO UPDATE SET n = n + excluded.n",
} as const;

/** A run of counters of one size, and the point it belongs to. */
interface SizedRun {
  readonly point: number;
  readonly from: number;
  readonly to: number;
}

/** One counter's addition, gathered until its group commits. */
interface CountRow {
  scope: number;
  size: number;
  bucket: number;
  metric: string;
  n: number;
}

/** Counter additions written per statement at a commit. */
const flushBatch = 64;

/** The most settled counts kept (a few hundred bytes each). */
const maxSettledCounts = 20_000;

/** The version name of the settled spans (see `SqliteDatabase.versionOf`). */
const settledName = "stats:settled";

/**
 * The numbers on the embedded engine: tables beside the collections,
 * moved by the collections' watchers inside the write's savepoint (so a
 * failed write moves nothing and a committed one moves them exactly once).
 */
export class EmbeddedStats implements StatsStore {
  private readonly listeners = new StatsListeners();
  private changed = new Set<string>();
  /** Active referrers of settled spans (see {@link activeReferrers}), by `scope|from`. */
  private readonly settled = new Map<string, { until: number; count: number }>();
  /** Per scope key, its settled spans, to drop those a change touches. */
  private readonly settledEnds = new Map<number, Set<string>>();
  /** The version of the settled spans when the settled counts were taken. */
  private settledAt = -1;
  private scheduled = false;
  /** The counter additions of the write in progress, then of its group (see {@link flush}). */
  private readonly additions: GroupedAdditions<CountRow>;
  /** Campaign time zones and the zones kept per environment, while the campaigns stay as read. */
  private readonly zones = new Map<string, string | readonly string[]>();
  private zonesVersion = -1;

  constructor(
    private readonly database: SqliteDatabase,
    /** Moves whenever a campaign is written or such a write committed: the zones read are current while it stays. */
    private readonly campaignsVersion: () => number,
    /** In a cluster's worker: the writer replaces the counters (see {@link replace}). */
    private readonly replaceElsewhere?: (
      scopes: readonly string[],
      wanted: StatsSnapshot,
    ) => Promise<void>,
  ) {
    for (const statement of schema) database.exec(statement);
    this.additions = new GroupedAdditions(database, (rows) => this.writeCounts(rows));
  }

  /**
   * Writes the group's additions, in the group's transaction: once per
   * counter however many writes added to it (under load most of a group's
   * writes add to the same quarter hour's counters), a batch per statement.
   * Before the commit, and before a read of the counters, which then sees
   * what the writes it follows added.
   */
  private flush(): void {
    this.writeCounts(this.additions.take());
  }

  private writeCounts(rows: readonly CountRow[]): void {
    if (rows.length === 0) return;
    const batch = `INSERT INTO stat_counts (scope, size, bucket, metric, n) VALUES ${Array(flushBatch).fill("(?, ?, ?, ?, ?)").join(", ")} ON CONFLICT (scope, size, bucket, metric) DO UPDATE SET n = n + excluded.n`;
    let index = 0;
    for (; index + flushBatch <= rows.length; index += flushBatch) {
      const values = rows
        .slice(index, index + flushBatch)
        .flatMap((row) => [row.scope, row.size, row.bucket, row.metric, row.n]);
      this.query(batch).run(...values);
    }
    for (const row of rows.slice(index)) {
      this.query(sql.flushOne).run(row.scope, row.size, row.bucket, row.metric, row.n);
    }
  }

  /** Adds to a counter: gathered while a write runs, at once otherwise. */
  private add(scope: number, size: number, bucket: number, metric: string, n: number): void {
    if (!this.database.inWrite) {
      this.query(sql.flushOne).run(scope, size, bucket, metric, n);
      return;
    }
    const key = `${scope}|${size}|${bucket}|${metric}`;
    if (!this.additions.addTo(key, n))
      this.additions.start(key, { scope, size, bucket, metric, n });
  }

  /** Forgets the zones read once a campaign was written (or a write rolled back) since. */
  private currentZones(): Map<string, string | readonly string[]> {
    const version = this.campaignsVersion();
    if (version !== this.zonesVersion) {
      this.zones.clear();
      this.zonesVersion = version;
    }
    return this.zones;
  }

  /** The zones whose days a scope keeps, UTC's aside (its days are the UTC day counters). */
  private zonesOf(scope: string): readonly string[] {
    const campaignId = campaignOfScope(scope);
    if (campaignId !== null) {
      const zone = this.timeZoneOf(campaignId);
      return zone === "UTC" ? [] : [zone];
    }
    return this.zonesKeptNow(scope).filter((zone) => zone !== "UTC");
  }

  /** The moves, applied in SQL; called inside the collection's write. */
  readonly moves: StatsMoves = {
    count: (scope, at, name, n) => {
      const key = scopeKey(scope);
      const seconds = Math.floor(at / 1000);
      for (const size of bucketSeconds) this.add(key, size, Math.floor(seconds / size), name, n);
      for (const zone of this.zonesOf(scope)) {
        this.add(scopeKey(zoneScope(scope, zone)), zoneDay, zoneDayOf(at, zone), name, n);
      }
      this.noteChange(scope);
    },
    attribute: (scope, referralId, referrerId, at) => {
      const key = scopeKey(scope);
      // Nearly always the referrer's newest referral: one lookup finds the one before.
      const newest = this.query(sql.newest).get(key, referrerId) as
        | { t: number; id: string }
        | undefined;
      const isNewest = !newest || newest.t < at || (newest.t === at && newest.id < referralId);
      const previous = isNewest
        ? newest
        : (this.query(sql.before).get(key, referrerId, at, referralId) as
            | { t: number }
            | undefined);
      this.query(sql.attribute).run(key, referrerId, at, referralId, previous?.t ?? null);
      if (!isNewest) this.relinkAfter(key, referrerId, at, referralId, at);
      this.unsettle(scope, at);
      this.noteChange(scope);
    },
    unattribute: (scope, referralId, referrerId, at) => {
      const key = scopeKey(scope);
      const entry = this.query(sql.entry).get(key, referrerId, at, referralId) as
        | { p: number | null }
        | undefined;
      if (!entry) return;
      this.relinkAfter(key, referrerId, at, referralId, entry.p);
      this.query(sql.unattribute).run(key, referrerId, at, referralId);
      this.unsettle(scope, at);
      this.noteChange(scope);
    },
    zoneChanged: (campaignScope, timeZone, previous) => {
      const [application = "", environment = "", campaignId = ""] = campaignScope.split("|");
      const environmentScope = statsScope(application, environment, null);
      const others = this.query(sql.zonesInUse).all(application, environment, campaignId) as {
        zone: string | null;
      }[];
      // Zones another campaign has: the environment keeps their days already.
      const kept = new Set(["UTC", ...others.map((row) => row.zone || "UTC")]);
      if (previous !== null) {
        this.dropZoneDays(campaignScope, previous);
        if (!kept.has(previous)) this.dropZoneDays(environmentScope, previous);
        this.buildZoneDays(campaignScope, timeZone);
      }
      if (!kept.has(timeZone)) this.buildZoneDays(environmentScope, timeZone);
    },
    lead: (scope, referralId, referrerId, delta, acceptedAt) => {
      const key = scopeKey(scope);
      if (delta === 1) {
        this.query(sql.accept).run(key, referrerId, acceptedAt, referralId);
        this.query(sql.lead).run(key, referrerId, acceptedAt);
      } else {
        this.query(sql.unaccept).run(key, referrerId, acceptedAt, referralId);
        // The tie-break time goes back to the latest acceptance still counted.
        const latest = this.query(sql.latest).get(key, referrerId) as { at: number | null };
        this.query(sql.unlead).run(latest.at, key, referrerId);
        this.query(sql.dropLeader).run(key, referrerId);
      }
      this.noteChange(scope);
    },
  };

  /** A statement, noted for the query-plan test (see `SqliteDatabase.noteQuery`). */
  private query(sql: string) {
    this.database.noteQuery(sql, "stats", {}, []);
    return this.database.statement(sql);
  }

  /** The referral after (t, id) in its referrer's order now follows `p`. */
  private relinkAfter(
    key: number,
    referrer: string,
    t: number,
    id: string,
    p: number | null,
  ): void {
    const next = this.query(sql.after).get(key, referrer, t, id) as
      | { t: number; id: string }
      | undefined;
    if (next) this.query(sql.relink).run(p, key, referrer, next.t, next.id);
  }

  private timeZoneOf(campaignId: string): string {
    const zones = this.currentZones();
    let zone = zones.get(campaignId) as string | undefined;
    if (zone === undefined) {
      const row = this.query(sql.timeZone).get(campaignId) as { zone: string | null } | undefined;
      zone = row?.zone || "UTC";
      zones.set(campaignId, zone);
    }
    return zone;
  }

  /**
   * The zones whose days an environment's counters keep: UTC and every
   * zone a campaign of the environment has (so a campaign's report adds
   * the environment's customers and checkpoints by its own days).
   */
  private zonesKeptNow(scope: string): string[] {
    const zones = this.currentZones();
    const cacheKey = `zones:${scope}`;
    let kept = zones.get(cacheKey) as readonly string[] | undefined;
    if (kept === undefined) {
      const [application, environment] = scope.split("|");
      const rows = this.query(sql.zonesInUse).all(application ?? "", environment ?? "", "") as {
        zone: string | null;
      }[];
      kept = [...new Set(["UTC", ...rows.map((row) => row.zone || "UTC")])];
      zones.set(cacheKey, kept);
    }
    return [...kept];
  }

  /** A scope's zone-day counters of `timeZone` gone, kept and gathered. */
  private dropZoneDays(scope: string, timeZone: string): void {
    if (timeZone === "UTC") return;
    const target = scopeKey(zoneScope(scope, timeZone));
    this.query(sql.dropZone).run(target, zoneDay);
    for (const gathered of this.additions.gathered) {
      for (const [rowKey, row] of gathered) {
        if (row.scope === target) gathered.delete(rowKey);
      }
    }
  }

  /**
   * A scope's zone-day counters of `timeZone` built again from its quarter
   * hours (each quarter hour lies within one local day of any zone), with
   * the additions still gathered in memory.
   */
  private buildZoneDays(scope: string, timeZone: string): void {
    if (timeZone === "UTC") return;
    const key = scopeKey(scope);
    const quarter = bucketSeconds[0];
    const days = new Map<string, number>();
    const addDay = (bucket: number, metric: string, n: number) => {
      const dayKey = `${zoneDayOf(bucket * quarter * 1000, timeZone)}|${metric}`;
      days.set(dayKey, (days.get(dayKey) ?? 0) + n);
    };
    const rows = this.query(sql.quarterHours).all(key, quarter) as {
      bucket: number;
      metric: string;
      n: number;
    }[];
    for (const row of rows) addDay(row.bucket, row.metric, row.n);
    for (const gathered of this.additions.gathered) {
      for (const row of gathered.values()) {
        if (row.scope === key && row.size === quarter) addDay(row.bucket, row.metric, row.n);
      }
    }
    this.dropZoneDays(scope, timeZone);
    const target = scopeKey(zoneScope(scope, timeZone));
    for (const [dayKey, n] of days) {
      const split = dayKey.indexOf("|");
      this.query(sql.zoneCount).run(
        target,
        zoneDay,
        Number(dayKey.slice(0, split)),
        dayKey.slice(split + 1),
        n,
      );
    }
    this.noteChange(scope);
  }

  /** Listeners hear of a write's scopes after its commit (group commits run first in the same turn). */
  private noteChange(scope: string): void {
    if (!this.listeners.heard) return;
    this.changed.add(scope);
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      const scopes = this.changed;
      this.changed = new Set();
      this.listeners.tell(scopes);
    });
  }

  async keptZones(scope: string): Promise<readonly string[]> {
    return this.zonesKeptNow(scope);
  }

  onChange(listener: (scopes: ReadonlySet<string>) => void): () => void {
    return this.listeners.add(listener);
  }

  /** In a cluster's worker: the scopes the writer's commits moved, as it told them. */
  changedElsewhere(scopes: ReadonlySet<string>): void {
    this.listeners.tell(scopes);
  }

  /**
   * The runs of each counter size are read as one range when they cover
   * most of it (a series of days: one range of day counters, each row put
   * in its point in order), else one index seek per run.
   */
  async sums(
    scope: string,
    points: readonly (readonly BucketRun[])[],
    options: { only?: "customers and checkpoints"; timeZone?: string } = {},
  ): Promise<Map<string, number>[]> {
    const { only, timeZone } = options;
    const key = scopeKey(scope);
    // UTC's days are the UTC day counters.
    const utc = timeZone === "UTC";
    const zoneKey = timeZone === undefined || utc ? key : scopeKey(zoneScope(scope, timeZone));
    // The runs by counter size (a zone's days are a size of their own).
    const bySize = new Map<number, { scope: number; size: number; runs: SizedRun[] }>();
    for (let point = 0; point < points.length; point++) {
      for (const run of points[point] as readonly BucketRun[]) {
        const zoned = run.size === zoneDay;
        let group = bySize.get(run.size);
        if (!group) {
          group = {
            scope: zoned ? zoneKey : key,
            size: zoned && utc ? bucketSeconds[2] : run.size,
            runs: [],
          };
          bySize.set(run.size, group);
        }
        group.runs.push({ point, from: run.from, to: run.to });
      }
    }
    const metricFilter =
      only === undefined
        ? ""
        : ` AND (metric = '${metric.identified}' OR (metric >= '${checkpointMetricPrefix}' AND metric < '${afterPrefix(checkpointMetricPrefix)}'))`;
    const sums = points.map(() => new Map<string, number>());
    const add = (point: number, metric: string, n: number) => {
      const sum = sums[point] as Map<string, number>;
      sum.set(metric, (sum.get(metric) ?? 0) + n);
    };
    const seeks: (number | string)[][] = [];
    for (const { scope: rowScope, size, runs } of bySize.values()) {
      runs.sort((a, b) => a.from - b.from);
      const first = runs[0]?.from ?? 0;
      const last = runs.at(-1)?.to ?? 0;
      const covered = runs.reduce((total, run) => total + run.to - run.from, 0);
      if (covered * 2 < last - first) {
        for (const run of runs) seeks.push([run.point, size, run.from, run.to, rowScope]);
        continue;
      }
      const range = this.query(
        `SELECT bucket, metric, n FROM stat_counts WHERE scope = ? AND size = ? AND bucket >= ? AND bucket < ?${metricFilter}`,
      );
      // Rows as arrays: a year of days is a few thousand of them.
      range.setReturnArrays(true);
      const rows = range.all(rowScope, size, first, last) as unknown as [number, string, number][];
      // Both in bucket order: each row's run is found walking forward.
      let index = 0;
      for (const [bucket, metric, n] of rows) {
        while (index < runs.length && (runs[index] as SizedRun).to <= bucket) index++;
        const run = runs[index];
        if (run && bucket >= run.from) add(run.point, metric, n);
      }
    }
    if (seeks.length > 0) {
      const filter = metricFilter.replaceAll("metric", "s.metric");
      const rows = this.query(
        "SELECT j.value->>0 AS point, s.metric AS metric, sum(s.n) AS n FROM json_each(?) AS j " +
          "CROSS JOIN stat_counts AS s ON s.scope = j.value->>4 AND s.size = j.value->>1 AND s.bucket >= j.value->>2 AND s.bucket < j.value->>3" +
          `${filter} GROUP BY 1, 2`,
      ).all(JSON.stringify(seeks)) as { point: number; metric: string; n: number }[];
      for (const row of rows) add(row.point, row.metric, row.n);
    }
    for (const sum of sums) {
      for (const [metric, n] of sum) if (n === 0) sum.delete(metric);
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
      "SELECT count(*) AS n FROM stat_order WHERE scope = ? AND t >= ? AND t < ? AND (p IS NULL OR p < ?)",
    );
    const between = (from: number, to: number, before: number) =>
      to <= from ? 0 : (count.get(key, from, to, before) as { n: number }).n;
    const settledVersion = this.database.versionOf(settledName);
    if (this.settledAt !== settledVersion) {
      // A committed write changed a settled span (here or in the writer): forget everything.
      this.settled.clear();
      this.settledEnds.clear();
      this.settledAt = settledVersion;
    }
    const now = Math.floor(Date.now() / quarterHourMs) * quarterHourMs;
    return spans.map(([from, to]) => {
      const settledUntil = Math.min(to, now);
      if (settledUntil <= from) return between(from, to, from);
      // The same start counted before to an earlier end: only the quarter
      // hours since are read (a referrer whose referral before was inside
      // the span is counted already).
      const cacheKey = `${key}|${from}`;
      const known = this.settled.get(cacheKey);
      let past: number;
      if (known && known.until <= settledUntil) {
        past = known.count + between(known.until, settledUntil, from);
      } else {
        past = between(from, settledUntil, from);
      }
      if (!known || known.until <= settledUntil) {
        if (!known && this.settled.size >= maxSettledCounts) {
          this.settled.clear();
          this.settledEnds.clear();
        }
        this.settled.set(cacheKey, { until: settledUntil, count: past });
        if (!known) {
          const ends = this.settledEnds.get(key) ?? new Set<string>();
          ends.add(cacheKey);
          this.settledEnds.set(key, ends);
        }
      }
      return past + between(settledUntil, to, from);
    });
  }

  /**
   * Drops the settled counts of a scope that a change of its order at `at`
   * touches; one before this quarter hour also moves the settled spans'
   * version, which readers of the file (a cluster's workers) go by.
   */
  private unsettle(scope: string, at: number): void {
    if (at < Math.floor(Date.now() / quarterHourMs) * quarterHourMs) {
      this.database.touch(settledName);
    }
    const ends = this.settledEnds.get(scopeKey(scope));
    if (!ends) return;
    for (const cacheKey of ends) {
      const known = this.settled.get(cacheKey);
      if (known && known.until <= at) continue;
      this.settled.delete(cacheKey);
      ends.delete(cacheKey);
    }
  }

  async referralsMade(scope: string, referrerIds: readonly string[]): Promise<number[]> {
    const count = this.query(
      "SELECT count(*) AS n FROM stat_order WHERE scope = ? AND referrer = ?",
    );
    const key = scopeKey(scope);
    return referrerIds.map((referrer) => (count.get(key, referrer) as { n: number }).n);
  }

  async leaders(scope: string, limit: number, offset: number): Promise<LeaderRow[]> {
    const rows = this.query(
      "SELECT referrer, accepted, reached_at FROM stat_leaderboard WHERE scope = ? AND accepted > 0 " +
        "ORDER BY accepted DESC, reached_at, referrer LIMIT ? OFFSET ?",
    ).all(scopeKey(scope), limit, offset) as {
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
      "SELECT referrer, count(*) AS accepted, max(at) AS reached_at FROM stat_accepted " +
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
      for (const row of all("SELECT id, referrer, t, p FROM stat_order WHERE scope = ?")) {
        snapshot.referrals.set(`${scope}|${row.id}`, `${row.referrer}|${row.t}|${row.p}`);
      }
      for (const row of all(
        "SELECT referrer, accepted, reached_at FROM stat_leaderboard WHERE scope = ? AND accepted != 0",
      )) {
        snapshot.leaders.set(`${scope}|${row.referrer}`, `${row.accepted}|${row.reached_at}`);
      }
      for (const row of all("SELECT id, referrer, at FROM stat_accepted WHERE scope = ?")) {
        snapshot.acceptances.set(`${scope}|${row.id}`, `${row.referrer}|${row.at}`);
      }
    }
    return snapshot;
  }

  replace(scopes: readonly string[], wanted: StatsSnapshot): Promise<void> {
    if (!this.database.writes) {
      if (!this.replaceElsewhere) throw new Error("these counters are written by another process");
      return this.replaceElsewhere(scopes, wanted);
    }
    return this.database.write(() => {
      // What the group added so far goes in first: the rows below replace it.
      this.flush();
      this.database.touch(settledName);
      this.settled.clear();
      this.settledEnds.clear();
      for (const scope of scopes) {
        const key = scopeKey(scope);
        for (const table of ["stat_counts", "stat_order", "stat_leaderboard", "stat_accepted"]) {
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
        const [referrer = "", t, p] = value.split("|");
        const previous = p === "null" ? null : Number(p);
        this.query(sql.attribute).run(key, referrer, Number(t), rest.join("|"), previous);
      }
      for (const [composite, value] of wanted.leaders) {
        const { key, rest } = keyOf(composite);
        const [accepted, reachedAt] = value.split("|");
        this.query(
          "INSERT INTO stat_leaderboard (scope, referrer, accepted, reached_at) VALUES (?, ?, ?, ?)",
        ).run(key, rest.join("|"), Number(accepted), Number(reachedAt));
      }
      for (const [composite, value] of wanted.acceptances) {
        const { key, rest } = keyOf(composite);
        const [referrer = "", at] = value.split("|");
        this.query(sql.accept).run(key, referrer, Number(at), rest.join("|"));
      }
      for (const scope of scopes) this.noteChange(scope);
    });
  }
}

function leaderRow(row: { referrer: string; accepted: number; reached_at: number }): LeaderRow {
  return { referrerId: row.referrer, accepted: row.accepted, reachedAt: row.reached_at };
}

/** The first string after every one that starts with `prefix` (a range's end in SQL). */
function afterPrefix(prefix: string): string {
  return prefix.slice(0, -1) + String.fromCharCode(prefix.charCodeAt(prefix.length - 1) + 1);
}
