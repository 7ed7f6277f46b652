import type {
  ClientSession,
  Collection,
  Db,
  Document,
  Filter,
  FindOneAndUpdateOptions,
  MongoClient,
  UpdateFilter,
  UpdateOptions,
} from "mongodb";
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
  bucketsOf,
  zoneDay,
  zoneDayOf,
} from "../../domain/stats-time.js";
import type { StoreCollection } from "../collection.js";
import {
  emptySnapshot,
  type LeaderRow,
  StatsListeners,
  type StatsSnapshot,
  type StatsStore,
  scopeKey,
  zoneScope,
} from "../stats.js";

/** A change's moves, written down in the domain's order, then applied with the session. */
type Move =
  | { kind: "count"; scope: string; at: number; name: string; n: number }
  | { kind: "attribute"; scope: string; referralId: string; referrerId: string; at: number }
  | { kind: "unattribute"; scope: string; referralId: string; referrerId: string; at: number }
  | { kind: "zoneChanged"; scope: string; timeZone: string; previous: string | null }
  | {
      kind: "lead";
      scope: string;
      referralId: string;
      referrerId: string;
      delta: 1 | -1;
      at: number;
    };

/** Records the moves of one change. */
function recorder(): { moves: StatsMoves; recorded: Move[] } {
  const recorded: Move[] = [];
  return {
    recorded,
    moves: {
      count: (scope, at, name, n) => recorded.push({ kind: "count", scope, at, name, n }),
      attribute: (scope, referralId, referrerId, at) =>
        recorded.push({ kind: "attribute", scope, referralId, referrerId, at }),
      unattribute: (scope, referralId, referrerId, at) =>
        recorded.push({ kind: "unattribute", scope, referralId, referrerId, at }),
      zoneChanged: (scope, timeZone, previous) =>
        recorded.push({ kind: "zoneChanged", scope, timeZone, previous }),
      lead: (scope, referralId, referrerId, delta, at) =>
        recorded.push({ kind: "lead", scope, referralId, referrerId, delta, at }),
    },
  };
}

/** What a watched collection tells: how a change moves the numbers. */
export type StatsWatcher = (before: Document | null, after: Document, moves: StatsMoves) => void;

/**
 * The numbers on MongoDB: four collections beside the records. A watched
 * collection's write runs in a transaction with the moves it makes (on a
 * replica set or sharded cluster, as production runs), so they commit
 * together or not at all; a standalone server has no transactions, and the
 * moves follow the write (a crash between them is what verify-stats
 * repairs).
 */
export class MongoStats implements StatsStore {
  private readonly counts: Collection<Document>;
  private readonly referrals: Collection<Document>;
  private readonly leadersCollection: Collection<Document>;
  private readonly acceptances: Collection<Document>;
  private readonly listeners = new StatsListeners();

  constructor(
    private readonly client: MongoClient,
    private readonly db: Db,
    private readonly transactions: boolean,
  ) {
    this.counts = db.collection("statCounts");
    this.referrals = db.collection("statOrder");
    this.leadersCollection = db.collection("statLeaderboard");
    this.acceptances = db.collection("statAccepted");
  }

  async createIndexes(): Promise<void> {
    await this.counts.createIndex({ scope: 1, size: 1, bucket: 1, metric: 1 }, { unique: true });
    await this.referrals.createIndex({ scope: 1, referrer: 1, t: 1, id: 1 }, { unique: true });
    await this.referrals.createIndex({ scope: 1, t: 1, p: 1 });
    await this.leadersCollection.createIndex({ scope: 1, referrer: 1 }, { unique: true });
    await this.leadersCollection.createIndex({ scope: 1, accepted: -1, reachedAt: 1, referrer: 1 });
    await this.acceptances.createIndex({ scope: 1, referrer: 1, at: 1, id: 1 }, { unique: true });
    await this.acceptances.createIndex({ scope: 1, at: 1 });
  }

  /** A collection whose writes move the numbers with `watcher` (see the class). */
  watched<T extends Document>(
    collection: StoreCollection<T>,
    raw: Collection<T>,
    watcher: StatsWatcher,
  ): StoreCollection<T> {
    const change = async <R>(
      write: (
        session: ClientSession | undefined,
      ) => Promise<{ result: R; pairs: [Document | null, Document][] }>,
    ): Promise<R> => {
      const run = async (session: ClientSession | undefined) => {
        const { result, pairs } = await write(session);
        const { moves, recorded } = recorder();
        for (const [before, after] of pairs) watcher(before, after, moves);
        await this.apply(recorded, session);
        return { result, scopes: new Set(recorded.map((move) => move.scope)) };
      };
      let outcome: { result: R; scopes: Set<string> };
      if (!this.transactions) {
        outcome = await run(undefined);
      } else {
        const session = this.client.startSession();
        try {
          outcome = await session.withTransaction(() => run(session));
        } finally {
          await session.endSession();
        }
      }
      if (outcome.scopes.size > 0) this.listeners.tell(outcome.scopes);
      return outcome.result;
    };
    // The document before and after one update (or upsert), read in the session.
    const updateFirst = async (
      filter: Filter<T>,
      update: UpdateFilter<T>,
      options: { upsert?: boolean; sort?: FindOneAndUpdateOptions["sort"] },
      session: ClientSession | undefined,
    ) => {
      const found = await raw.findOneAndUpdate(filter, update, {
        ...(options.upsert ? { upsert: true } : {}),
        ...(options.sort ? { sort: options.sort } : {}),
        session,
        returnDocument: "before",
        includeResultMetadata: true,
      });
      const upserted = found.lastErrorObject?.upserted as unknown;
      const before = (found.value as Document | null) ?? null;
      const id = before?._id ?? upserted;
      const after =
        id === undefined ? null : await raw.findOne({ _id: id } as Filter<T>, { session });
      const pairs: [Document | null, Document][] = after ? [[upserted ? null : before, after]] : [];
      return { before, upserted, after, pairs };
    };
    return {
      ...bindAll(collection),
      insertOne: (doc) =>
        change(async (session) => {
          const result = await raw.insertOne(doc, { session });
          return { result, pairs: [[null, { ...doc, _id: result.insertedId }]] };
        }),
      insertMany: async (docs) => {
        const insertedIds: Record<number, unknown> = {};
        for (const [index, doc] of docs.entries()) {
          insertedIds[index] = (
            await this.watched(collection, raw, watcher).insertOne(doc)
          ).insertedId;
        }
        return { acknowledged: true, insertedCount: docs.length, insertedIds } as never;
      },
      updateOne: (filter, update, options: UpdateOptions = {}) =>
        change(async (session) => {
          const { before, upserted, pairs } = await updateFirst(filter, update, options, session);
          return {
            result: {
              acknowledged: true,
              matchedCount: before ? 1 : 0,
              modifiedCount: before ? 1 : 0,
              upsertedCount: upserted ? 1 : 0,
              upsertedId: (upserted ?? null) as never,
            },
            pairs,
          };
        }),
      findOneAndUpdate: (filter, update, options: FindOneAndUpdateOptions) =>
        change(async (session) => {
          const { after, pairs } = await updateFirst(
            filter,
            update as UpdateFilter<T>,
            options,
            session,
          );
          return { result: after as never, pairs };
        }),
      updateMany: (filter, update) =>
        change(async (session) => {
          const befores = await raw.find(filter, { session }).toArray();
          const result = await raw.updateMany(filter, update, { session });
          const afters = await raw
            .find({ _id: { $in: befores.map((doc) => doc._id) } } as Filter<T>, { session })
            .toArray();
          const beforeById = new Map(befores.map((doc) => [String(doc._id), doc as Document]));
          return {
            result,
            pairs: afters.map((after) => [beforeById.get(String(after._id)) ?? null, after]),
          };
        }),
    };
  }

  private async apply(moves: readonly Move[], session: ClientSession | undefined): Promise<void> {
    for (const move of moves) {
      const scope = scopeKey(move.scope);
      switch (move.kind) {
        case "count": {
          const rows: { scope: number; size: number; bucket: number }[] = bucketsOf(move.at).map(
            ({ size, bucket }) => ({ scope, size, bucket }),
          );
          for (const timeZone of await this.zonesOf(move.scope, session)) {
            if (timeZone === "UTC") continue; // UTC's days are the day counters
            rows.push({
              scope: scopeKey(zoneScope(move.scope, timeZone)),
              size: zoneDay,
              bucket: zoneDayOf(move.at, timeZone),
            });
          }
          await this.counts.bulkWrite(
            rows.map((row) => ({
              updateOne: {
                filter: { ...row, metric: move.name },
                update: { $inc: { n: move.n } },
                upsert: true,
              },
            })),
            { session, ordered: true },
          );
          break;
        }
        case "zoneChanged": {
          const [application = "", environment = "", campaignId = ""] = move.scope.split("|");
          const environmentScope = statsScope(application, environment, null);
          const others = await this.campaignZones(application, environment, campaignId, session);
          const kept = new Set(["UTC", ...others]);
          if (move.previous !== null) {
            await this.dropZoneDays(move.scope, move.previous, session);
            if (!kept.has(move.previous)) {
              await this.dropZoneDays(environmentScope, move.previous, session);
            }
            await this.buildZoneDays(move.scope, move.timeZone, session);
          }
          if (!kept.has(move.timeZone)) {
            await this.buildZoneDays(environmentScope, move.timeZone, session);
          }
          break;
        }
        case "attribute": {
          const [previous] = await this.referrals
            .find(
              {
                scope,
                referrer: move.referrerId,
                $or: [{ t: { $lt: move.at } }, { t: move.at, id: { $lt: move.referralId } }],
              },
              { session, sort: { t: -1, id: -1 }, limit: 1 },
            )
            .toArray();
          await this.referrals.insertOne(
            {
              scope,
              id: move.referralId,
              referrer: move.referrerId,
              t: move.at,
              p: previous?.t ?? null,
            },
            { session },
          );
          await this.relinkAfter(
            scope,
            move.referrerId,
            move.at,
            move.referralId,
            move.at,
            session,
          );
          break;
        }
        case "unattribute": {
          const row = { scope, referrer: move.referrerId, t: move.at, id: move.referralId };
          const entry = await this.referrals.findOne(row, { session });
          if (!entry) break;
          await this.relinkAfter(
            scope,
            move.referrerId,
            move.at,
            move.referralId,
            entry.p,
            session,
          );
          await this.referrals.deleteOne(row, { session });
          break;
        }
        case "lead":
          await this.lead(scope, move, session);
          break;
      }
    }
  }

  private async relinkAfter(
    scope: number,
    referrer: string,
    t: number,
    id: string,
    p: number | null,
    session: ClientSession | undefined,
  ): Promise<void> {
    const [next] = await this.referrals
      .find(
        { scope, referrer, $or: [{ t: { $gt: t } }, { t, id: { $gt: id } }] },
        { session, sort: { t: 1, id: 1 }, limit: 1 },
      )
      .toArray();
    if (next) await this.referrals.updateOne({ _id: next._id }, { $set: { p } }, { session });
  }

  /** The zones whose days a scope keeps: its campaign's, or its campaigns' and UTC. */
  private async zonesOf(scope: string, session: ClientSession | undefined): Promise<string[]> {
    const campaignId = campaignOfScope(scope);
    if (campaignId !== null) return [await this.timeZoneOf(campaignId, session)];
    const [application = "", environment = ""] = scope.split("|");
    return ["UTC", ...(await this.campaignZones(application, environment, "", session))];
  }

  /** The time zones of an environment's campaigns but one. */
  private async campaignZones(
    applicationId: string,
    environment: string,
    except: string,
    session: ClientSession | undefined,
  ): Promise<string[]> {
    const campaigns = await this.db
      .collection("campaigns")
      .find(
        { applicationId, environment, _id: { $ne: except as never } },
        { session, projection: { timeZone: 1 } },
      )
      .toArray();
    return [...new Set(campaigns.map((campaign) => (campaign.timeZone as string) || "UTC"))];
  }

  /** A scope's zone-day counters of `timeZone` built again from its quarter hours. */
  private async buildZoneDays(
    scope: string,
    timeZone: string,
    session: ClientSession | undefined,
  ): Promise<void> {
    if (timeZone === "UTC") return;
    const days = new Map<string, number>();
    const quarter = bucketSeconds[0];
    const rows = this.counts.find({ scope: scopeKey(scope), size: quarter }, { session });
    for await (const row of rows) {
      const key = `${zoneDayOf(row.bucket * quarter * 1000, timeZone)}|${row.metric}`;
      days.set(key, (days.get(key) ?? 0) + row.n);
    }
    await this.dropZoneDays(scope, timeZone, session);
    const target = scopeKey(zoneScope(scope, timeZone));
    const docs = [...days].map(([key, n]) => {
      const split = key.indexOf("|");
      const bucket = Number(key.slice(0, split));
      return { scope: target, size: zoneDay, bucket, metric: key.slice(split + 1), n };
    });
    if (docs.length > 0) await this.counts.insertMany(docs, { session });
  }

  /** A scope's zone-day counters of `timeZone` gone. */
  private async dropZoneDays(
    scope: string,
    timeZone: string,
    session: ClientSession | undefined,
  ): Promise<void> {
    if (timeZone === "UTC") return;
    const target = scopeKey(zoneScope(scope, timeZone));
    await this.counts.deleteMany({ scope: target, size: zoneDay }, { session });
  }

  keptZones(environmentScope: string): Promise<readonly string[]> {
    return this.zonesOf(environmentScope, undefined);
  }

  private async timeZoneOf(
    campaignId: string,
    session: ClientSession | undefined,
  ): Promise<string> {
    const campaign = await this.db
      .collection("campaigns")
      .findOne({ _id: campaignId as never }, { session, projection: { timeZone: 1 } });
    return (campaign?.timeZone as string | undefined) || "UTC";
  }

  private async lead(
    scope: number,
    move: Extract<Move, { kind: "lead" }>,
    session: ClientSession | undefined,
  ): Promise<void> {
    const acceptance = { scope, referrer: move.referrerId, at: move.at, id: move.referralId };
    const row = { scope, referrer: move.referrerId };
    if (move.delta === 1) {
      await this.acceptances.insertOne(acceptance, { session });
      await this.leadersCollection.updateOne(
        row,
        { $inc: { accepted: 1 }, $max: { reachedAt: move.at } },
        { upsert: true, session },
      );
      return;
    }
    await this.acceptances.deleteOne(acceptance, { session });
    // The tie-break time goes back to the latest acceptance still counted.
    const [latest] = await this.acceptances
      .find(row, { session, sort: { at: -1 }, limit: 1 })
      .toArray();
    await this.leadersCollection.updateOne(
      row,
      { $inc: { accepted: -1 }, ...(latest ? { $set: { reachedAt: latest.at } } : {}) },
      { session },
    );
    await this.leadersCollection.deleteOne({ ...row, accepted: { $lte: 0 } }, { session });
  }

  onChange(listener: (scopes: ReadonlySet<string>) => void): () => void {
    return this.listeners.add(listener);
  }

  async sums(
    scope: string,
    points: readonly (readonly BucketRun[])[],
    options: { only?: "customers and checkpoints"; timeZone?: string } = {},
  ): Promise<Map<string, number>[]> {
    const { only, timeZone } = options;
    const sums = points.map(() => new Map<string, number>());
    // Per size, the runs in order: each counter read once, then put in its point.
    const bySize = new Map<number, { from: number; to: number; point: number }[]>();
    for (const [point, runs] of points.entries()) {
      for (const run of runs) {
        const list = bySize.get(run.size) ?? [];
        list.push({ from: run.from, to: run.to, point });
        bySize.set(run.size, list);
      }
    }
    const metricFilter =
      only === undefined
        ? {}
        : {
            $or: [
              { metric: metric.identified },
              { metric: new RegExp(`^${checkpointMetricPrefix}`) },
            ],
          };
    for (const [size, runs] of bySize) {
      runs.sort((a, b) => a.from - b.from);
      const first = runs[0]?.from ?? 0;
      const last = runs.at(-1)?.to ?? 0;
      // UTC's days are the UTC day counters.
      const utcDays = size === zoneDay && timeZone === "UTC";
      const rowScope =
        size === zoneDay && timeZone !== undefined && !utcDays ? zoneScope(scope, timeZone) : scope;
      const rows = await this.counts
        .find({
          scope: scopeKey(rowScope),
          size: utcDays ? bucketSeconds[2] : size,
          bucket: { $gte: first, $lt: last },
          ...metricFilter,
        })
        .toArray();
      for (const row of rows) {
        const run = runs.find(
          (candidate) => row.bucket >= candidate.from && row.bucket < candidate.to,
        );
        if (!run || row.n === 0) continue;
        const sum = sums[run.point] as Map<string, number>;
        sum.set(row.metric, (sum.get(row.metric) ?? 0) + row.n);
      }
    }
    return sums;
  }

  activeReferrers(scope: string, spans: readonly (readonly [number, number])[]): Promise<number[]> {
    return Promise.all(
      spans.map(([from, to]) =>
        this.referrals.countDocuments({
          scope: scopeKey(scope),
          t: { $gte: from, $lt: to },
          $or: [{ p: null }, { p: { $lt: from } }],
        }),
      ),
    );
  }

  referralsMade(scope: string, referrerIds: readonly string[]): Promise<number[]> {
    return Promise.all(
      referrerIds.map((referrer) =>
        this.referrals.countDocuments({ scope: scopeKey(scope), referrer }),
      ),
    );
  }

  async leaders(scope: string, limit: number, offset: number): Promise<LeaderRow[]> {
    const rows = await this.leadersCollection
      .find({ scope: scopeKey(scope), accepted: { $gt: 0 } })
      .sort({ accepted: -1, reachedAt: 1, referrer: 1 })
      .skip(offset)
      .limit(limit)
      .toArray();
    return rows.map((row) => ({
      referrerId: row.referrer,
      accepted: row.accepted,
      reachedAt: row.reachedAt,
    }));
  }

  async leadersBetween(
    scope: string,
    from: number,
    to: number,
    limit: number,
    offset: number,
  ): Promise<LeaderRow[]> {
    const rows = await this.acceptances
      .aggregate([
        { $match: { scope: scopeKey(scope), at: { $gte: from, $lt: to } } },
        { $group: { _id: "$referrer", accepted: { $sum: 1 }, reachedAt: { $max: "$at" } } },
        { $sort: { accepted: -1, reachedAt: 1, _id: 1 } },
        { $skip: offset },
        { $limit: limit },
      ])
      .toArray();
    return rows.map((row) => ({
      referrerId: row._id,
      accepted: row.accepted,
      reachedAt: row.reachedAt,
    }));
  }

  async snapshot(scopes: readonly string[]): Promise<StatsSnapshot> {
    const snapshot = emptySnapshot();
    for (const scopeName of scopes) {
      const scope = scopeKey(scopeName);
      for (const row of await this.counts.find({ scope, n: { $ne: 0 } }).toArray()) {
        snapshot.counts.set(`${scopeName}|${row.size}|${row.bucket}|${row.metric}`, row.n);
      }
      for (const row of await this.referrals.find({ scope }).toArray()) {
        snapshot.referrals.set(`${scopeName}|${row.id}`, `${row.referrer}|${row.t}|${row.p}`);
      }
      for (const row of await this.leadersCollection
        .find({ scope, accepted: { $ne: 0 } })
        .toArray()) {
        snapshot.leaders.set(`${scopeName}|${row.referrer}`, `${row.accepted}|${row.reachedAt}`);
      }
      for (const row of await this.acceptances.find({ scope }).toArray()) {
        snapshot.acceptances.set(`${scopeName}|${row.id}`, `${row.referrer}|${row.at}`);
      }
    }
    return snapshot;
  }

  async replace(scopes: readonly string[], wanted: StatsSnapshot): Promise<void> {
    const keys = scopes.map(scopeKey);
    const split = (composite: string) => {
      const [application, environment, campaign, ...rest] = composite.split("|");
      return { scope: scopeKey(`${application}|${environment}|${campaign}`), rest };
    };
    const write = async (session: ClientSession | undefined) => {
      for (const collection of [
        this.counts,
        this.referrals,
        this.leadersCollection,
        this.acceptances,
      ]) {
        await collection.deleteMany({ scope: { $in: keys } }, { session });
      }
      const insert = async (collection: Collection<Document>, docs: Document[]) => {
        if (docs.length > 0) await collection.insertMany(docs, { session });
      };
      await insert(
        this.counts,
        [...wanted.counts].map(([composite, n]) => {
          const { scope, rest } = split(composite);
          const [size, bucket, ...metric] = rest;
          return { scope, size: Number(size), bucket: Number(bucket), metric: metric.join("|"), n };
        }),
      );
      await insert(
        this.referrals,
        [...wanted.referrals].map(([composite, value]) => {
          const { scope, rest } = split(composite);
          const [referrer, t, p] = value.split("|");
          return {
            scope,
            id: rest.join("|"),
            referrer,
            t: Number(t),
            p: p === "null" ? null : Number(p),
          };
        }),
      );
      await insert(
        this.leadersCollection,
        [...wanted.leaders].map(([composite, value]) => {
          const { scope, rest } = split(composite);
          const [accepted, reachedAt] = value.split("|");
          return {
            scope,
            referrer: rest.join("|"),
            accepted: Number(accepted),
            reachedAt: Number(reachedAt),
          };
        }),
      );
      await insert(
        this.acceptances,
        [...wanted.acceptances].map(([composite, value]) => {
          const { scope, rest } = split(composite);
          const [referrer, at] = value.split("|");
          return { scope, id: rest.join("|"), referrer, at: Number(at) };
        }),
      );
    };
    if (!this.transactions) {
      await write(undefined);
    } else {
      const session = this.client.startSession();
      try {
        await session.withTransaction(() => write(session));
      } finally {
        await session.endSession();
      }
    }
    this.listeners.tell(new Set(scopes));
  }
}

/** A collection's methods bound to it, to spread into a wrapper. */
function bindAll<T extends Document>(collection: StoreCollection<T>): StoreCollection<T> {
  return {
    insertOne: collection.insertOne.bind(collection),
    insertMany: collection.insertMany.bind(collection),
    findOne: collection.findOne.bind(collection),
    find: collection.find.bind(collection),
    countDocuments: collection.countDocuments.bind(collection),
    updateOne: collection.updateOne.bind(collection),
    updateMany: collection.updateMany.bind(collection),
    findOneAndUpdate: collection.findOneAndUpdate.bind(collection),
    deleteOne: collection.deleteOne.bind(collection),
    deleteMany: collection.deleteMany.bind(collection),
    createIndex: collection.createIndex.bind(collection),
    dropIndex: collection.dropIndex.bind(collection),
    aggregate: collection.aggregate.bind(collection),
  };
}

/** Whether the server runs transactions: a replica set member or a mongos. */
export async function supportsTransactions(db: Db): Promise<boolean> {
  const hello = await db.admin().command({ hello: 1 });
  return Boolean(hello.setName) || hello.msg === "isdbgrid";
}
