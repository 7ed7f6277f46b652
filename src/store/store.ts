import {
  closeSync,
  mkdirSync,
  openSync,
  readFileSync,
  rmSync,
  statfsSync,
  writeSync,
} from "node:fs";
import { join } from "node:path";
import type { Db, Document, UpdateResult } from "mongodb";
import type { Tenant } from "../domain/tenancy.js";
import type {
  Collections,
  JointOutcome,
  JointWrite,
  StoreCollection,
  WriteTogether,
} from "./collection.js";
import { createCustomerViews } from "./customer-views.js";
import { embeddedDatabaseFile } from "./embedded-file.js";
import { startServerClock } from "./engine/server-clock.js";
import type { SqliteCollection } from "./engine/sqlite-collection.js";
import { type QueryPlan, SqliteDatabase, type WriteLimits } from "./engine/sqlite-database.js";
import type { SqliteSynchronous } from "./engine/sqlite-wal.js";
import { EmbeddedStats } from "./engine/stats-embedded.js";
import { MongoStats, supportsTransactions } from "./engine/stats-mongo.js";
import { ErasureMark } from "./erasure.js";
import { recognizeDriverErrors, StoreOpenError } from "./errors.js";
import {
  type ForwardedWrites,
  forwardingCollection,
  type StoreCommand,
  writeOperations,
} from "./forwarded-writes.js";
import { type CollectionName, counterDeclarations, ensureIndexes } from "./indexes.js";
import { mongoServerSelectionTimeoutMs } from "./mongo-options.js";
import { defaultEventRetentionMs } from "./retention.js";
import { type StatsStore, type StatsWatchers, statsWatchers } from "./stats.js";
import { createTenantStore, type KeptInMemory, type TenantStore } from "./tenant-store.js";
import { createWebhookAudience } from "./webhook-audience.js";

/**
 * The data, two ways in: `forTenant` gives one application's repositories
 * (what services use), `system` every collection unscoped (authentication,
 * provisioning, admin, the webhook relay and workers, tests). One type per
 * engine and role, each with the controls of that role alone.
 */
export type Store = MongoStore | EmbeddedWriter | EmbeddedReader;

/** What every store does, whatever its engine and role. */
interface StoreBase {
  /** Every collection, unscoped: for the system paths only. */
  readonly system: Collections;
  /** The tenant's repositories; the same object for the same tenant object. */
  forTenant(tenant: Tenant): TenantStore;
  /** The program's numbers (InsightsService), kept by the same writes as the records. */
  readonly stats: StatsStore;
  /** Writes of any collections made atomically, where the engine makes them (the embedded one). */
  readonly together?: WriteTogether;
  /** Resolves when the store answers; rejects otherwise (readiness). */
  ping(): Promise<void>;
  /** Resolves once a small write is committed: whether the store takes writes again. */
  probeWrite(): Promise<void>;
  /** Releases connections, files and locks. */
  close(): Promise<void>;
}

/** MongoDB: every process a whole service, sharing the database. */
export interface MongoStore extends StoreBase {
  readonly engine: "mongodb";
  readonly role: "shared";
  /** The database: the connection shared with what keeps its own collection there (the rate limits' counters). */
  readonly database: Db;
  /**
   * The time leases are taken and compared in (webhook deliveries):
   * MongoDB's own, so instances on different machines agree.
   */
  readonly leaseClock: () => Date;
}

/** The embedded engine, in either role. */
interface EmbeddedBase extends StoreBase {
  readonly engine: "embedded";
  /** The plan of every distinct query run so far (diagnostics, tests). */
  queryPlans(): QueryPlan[];
  /** The free bytes of DATA_DIR's file system (for an unprivileged process, as `df` shows them) and the database's size. */
  diskUsage(): { freeBytes: number; storeBytes: number };
  /** Leaves no copy of erased data in the database's files (see `SqliteDatabase.forgetFreed`). */
  forgetFreed(): Promise<void>;
}

/** The embedded engine's one writer: the process alone, or a cluster's primary. */
export interface EmbeddedWriter extends EmbeddedBase {
  readonly role: "writer";
  /** Runs a command a cluster's worker sent (see `forwarded-writes.ts`), as if it were this process's own. */
  runCommand(command: StoreCommand): Promise<unknown>;
  /** Told which scopes' numbers each commit moved, for the workers' watches (see `EmbeddedStats.changedElsewhere`). */
  statsChanged(listener: (scopes: ReadonlySet<string>) => void): () => void;
  /** The writes waiting for their group's commit now (WRITE_QUEUE_LIMIT). */
  queuedWrites(): number;
  /** The group commits so far and the writes in them. */
  commits(): { groups: number; writes: number };
  /** Rows this start wrote again in the current stored format (an upgrade); 0 after it. */
  readonly upgradedRows: number;
  /**
   * A number that moves with every change made to the collection and every
   * commit of one: while it stays, a read of the collection answers as before.
   */
  changeMarkOf(name: CollectionName): number;
  /** A number that moves with every commit that erases a customer (see `ErasureMark`). */
  erasureMark(): number;
}

/** A cluster worker's view of the embedded engine: it reads the file and forwards its writes to the writer. */
export interface EmbeddedReader extends EmbeddedBase {
  readonly role: "reader";
  /** Hears the scopes the writer's commits moved. */
  statsChangedElsewhere(scopes: ReadonlySet<string>): void;
  /**
   * Its next read looks for the writer's commits again. Each call enters
   * the pipeline with it, so it sees every write acknowledged before it
   * arrived (see `SqliteDatabase.forgetVersionsRead`).
   */
  seeNewCommits(): void;
}

/** The store as the embedded engine's writer, which sees every write; none elsewhere. */
function embeddedWriterOf(store: Store): EmbeddedWriter | null {
  return store.engine === "embedded" && store.role === "writer" ? store : null;
}

/** The store's change marks (see `EmbeddedWriter.changeMarkOf`), where it sees every write. */
export function changeMarksOf(store: Store): ((name: CollectionName) => number) | null {
  return embeddedWriterOf(store)?.changeMarkOf ?? null;
}

/** How the embedded store leaves no copy of erased data in its files; none on MongoDB. */
export function forgetFreedOf(store: Store): (() => Promise<void>) | null {
  return store.engine === "embedded" ? store.forgetFreed : null;
}

/** The store's erasure mark (see `ErasureMark`), where it sees every erasure's commit. */
export function erasureMarkOf(store: Store): (() => number) | null {
  return embeddedWriterOf(store)?.erasureMark ?? null;
}

/** The embedded engine's plan of every distinct query run so far; none on MongoDB (tests, diagnostics). */
export function queryPlansOf(store: Store): QueryPlan[] {
  return store.engine === "embedded" ? store.queryPlans() : [];
}

/** Where the data lives. */
export type StoreConfig =
  | { readonly mongodbUri: string; readonly mongodbDb: string }
  | {
      readonly dataDir: string;
      readonly synchronous?: SqliteSynchronous;
      readonly writeLimits?: Partial<WriteLimits>;
    };

export { embeddedDatabaseFile };

const collectionNames: readonly CollectionName[] = [
  "organizations",
  "applications",
  "apiKeys",
  "customers",
  "referrals",
  "checkpoints",
  "rewardGrants",
  "rewardAllowances",
  "rewardSnapshots",
  "campaigns",
  "webhooks",
  "events",
  "deliveries",
  "clicks",
  "idempotencyKeys",
];

/**
 * Opens the configured store and creates its indexes; on MongoDB, events and
 * finished deliveries expire `eventRetentionMs` after their creation (TTL
 * indexes; the embedded engine's sweep is `startRetentionSweep`).
 */
export async function openStore(
  config: StoreConfig,
  options: {
    observe?: OperationObserver;
    eventRetentionMs?: number;
    /**
     * What keeps the program's counters (see `statsWatchers`, the default).
     * The bench's variant without them passes none, to measure what keeping
     * them costs the writes (InsightsService then reads zeros).
     */
    watchers?: StatsWatchers;
    /**
     * In a cluster's worker, on the embedded engine: the file is read here
     * and every write goes to the writer (the primary) through `writes`.
     */
    forwardWrites?: ForwardedWrites;
  } = {},
): Promise<Store> {
  const retentionMs = options.eventRetentionMs ?? defaultEventRetentionMs;
  const watchers = options.watchers ?? statsWatchers;
  if ("mongodbUri" in config) {
    return withIndexes(await openMongo(config, options.observe, watchers), retentionMs);
  }
  if (options.forwardWrites) {
    return withIndexes(
      openEmbeddedReader(config.dataDir, options.forwardWrites, options.observe),
      retentionMs,
    );
  }
  const { store, database } = openEmbedded(config, options.observe, watchers);
  await withIndexes(store, retentionMs);
  // The planner's statistics, now that every index exists.
  database.declareStatistics();
  return store;
}

// MongoDB's Unauthorized: readWrite alone may create indexes but not collMod them.
const unauthorized = 13;

async function withIndexes<S extends Store>(store: S, retentionMs: number): Promise<S> {
  const mongo = store.engine === "mongodb" ? store.database : undefined;
  try {
    await ensureIndexes(store.system, {
      expireAfterSeconds: Math.ceil(retentionMs / 1000),
      ...(mongo
        ? {
            changeExpiry: async (collection, keyPattern, expireAfterSeconds) => {
              const index = { keyPattern, expireAfterSeconds };
              await mongo.command({ collMod: collection, index }).catch((error: unknown) => {
                if ((error as { code?: unknown }).code !== unauthorized) throw error;
                throw new Error(
                  `EVENT_RETENTION changed: changing the TTL index of ${collection} needs MongoDB's collMod privilege (dbAdmin); grant it, or drop that index (createdAt_1)`,
                  { cause: error },
                );
              });
            },
          }
        : {}),
    });
  } catch (error) {
    await store.close();
    throw error;
  }
  return store;
}

async function openMongo(
  config: { mongodbUri: string; mongodbDb: string },
  observe: OperationObserver | undefined,
  watchers: StatsWatchers,
): Promise<MongoStore> {
  // Loaded here only: the embedded store never needs the driver.
  const mongodb = await import("mongodb");
  recognizeDriverErrors(mongodb);
  const client = new mongodb.MongoClient(config.mongodbUri, {
    serverSelectionTimeoutMS: mongoServerSelectionTimeoutMs,
  });
  await client.connect();
  const db = client.db(config.mongodbDb);
  const collections: Record<string, StoreCollection<Document>> = Object.fromEntries(
    collectionNames.map((name) => [name, db.collection<Document>(name)]),
  );
  const stats = new MongoStats(client, db, await supportsTransactions(db));
  await stats.createIndexes();
  const serverClock = await startServerClock(db);
  for (const [name, watcher] of Object.entries(watchers)) {
    const raw = db.collection<Document>(name);
    collections[name] = stats.watched(raw, raw, watcher);
  }
  return {
    ...tenantAccess(observed(collections as unknown as Collections, observe), stats),
    engine: "mongodb",
    role: "shared",
    database: db,
    stats,
    leaseClock: serverClock.now,
    async ping() {
      await db.command({ ping: 1 });
    },
    // Writes fail on MongoDB for want of a server, which a ping finds.
    async probeWrite() {
      await db.command({ ping: 1 });
    },
    close: () => {
      serverClock.stop();
      return client.close();
    },
  };
}

function openEmbedded(
  config: {
    dataDir: string;
    synchronous?: SqliteSynchronous;
    writeLimits?: Partial<WriteLimits>;
  },
  observe: OperationObserver | undefined,
  watchers: StatsWatchers,
): {
  store: EmbeddedWriter;
  database: SqliteDatabase;
} {
  const releaseLock = acquireLock(config.dataDir);
  let database: SqliteDatabase | undefined;
  try {
    const db = SqliteDatabase.open(
      join(config.dataDir, embeddedDatabaseFile),
      config.synchronous ?? "full",
      config.writeLimits ? { limits: config.writeLimits } : {},
    );
    database = db;
    const collections = embeddedCollections(db);
    const changeMarkOf = (name: CollectionName) => db.versionOf(name) + db.changesOf(name);
    const stats = new EmbeddedStats(db, () => changeMarkOf("campaigns"));
    const erasures = new ErasureMark();
    db.observeWrites(erasures);
    const { customers: customersWatcher, ...otherWatchers } = watchers;
    collections.customers.watch((before, after) => {
      erasures.changed(before, after);
      customersWatcher?.(before, after, stats.moves);
    });
    for (const [name, watcher] of Object.entries(otherWatchers)) {
      collections[name as CollectionName].watch((before, after) =>
        watcher(before, after, stats.moves),
      );
    }
    const system = observed(collections as unknown as Collections, observe);
    const forgetFreed = () => db.forgetFreed();
    const kept = keptInMemory(db, system, forgetFreed);
    const raw = collections as unknown as Record<
      string,
      Record<string, (...args: unknown[]) => unknown>
    >;
    const together = writeTogetherOn(db, collections);
    const store: EmbeddedWriter = {
      ...tenantAccess(system, stats, kept, together),
      together,
      engine: "embedded",
      role: "writer",
      stats,
      changeMarkOf,
      erasureMark: erasures.current,
      forgetFreed,
      async runCommand(command) {
        switch (command.kind) {
          case "write": {
            const write = raw[command.collection]?.[command.operation];
            if (!write) throw new Error(`no ${command.operation} on ${command.collection}`);
            return write.apply(raw[command.collection], command.args);
          }
          case "together":
            return together(command.writes);
          case "probeWrite":
            return db.probeWrite(Date.now());
          case "forgetFreed":
            return db.forgetFreed();
          case "replaceStats":
            return stats.replace(...(command.args as Parameters<EmbeddedStats["replace"]>));
        }
      },
      statsChanged: (listener) => stats.onChange(listener),
      queuedWrites: () => db.queuedWrites,
      upgradedRows: db.upgradedRows,
      commits: () => ({
        groups: db.groupsCommitted,
        writes: db.writesCommitted,
      }),
      queryPlans: () => db.queryPlans(),
      async ping() {
        db.ping();
      },
      probeWrite: () => db.probeWrite(Date.now()),
      diskUsage: () => diskUsageOf(config.dataDir, db),
      async close() {
        db.close();
        releaseLock();
      },
    };
    return { store, database: db };
  } catch (error) {
    database?.close();
    releaseLock();
    throw error;
  }
}

/**
 * The embedded engine's writes made together: one write of the database
 * (one savepoint in the open group), so they are committed, or undone, as
 * one.
 */
function writeTogetherOn(
  db: SqliteDatabase,
  collections: Record<CollectionName, SqliteCollection<Document>>,
): WriteTogether {
  return async (writes) => {
    try {
      const results = await db.write(() =>
        writes.map((write, index) => {
          const result = collections[write.collection].writeInside(write.operation, write.args);
          if (write.mustMatch && !matchedOne(write, result)) throw new MissedJointWrite(index);
          return result;
        }),
      );
      return { results };
    } catch (error) {
      if (error instanceof MissedJointWrite) return { missed: error.index };
      throw error;
    }
  };
}

/** Whether a write of a group matched a document (see `JointWrite.mustMatch`). */
function matchedOne(write: JointWrite, result: unknown): boolean {
  if (write.operation === "updateOne") return (result as UpdateResult).matchedCount === 1;
  if (write.operation === "findOneAndUpdate") return result !== null;
  return true;
}

/** Undoes a group made together at its first update that matched nothing. */
class MissedJointWrite extends Error {
  constructor(readonly index: number) {
    super(`write ${index} of a group matched nothing`);
  }
}

/** Each collection's table, with the totals the declarations keep. */
function embeddedCollections(
  db: SqliteDatabase,
): Record<CollectionName, SqliteCollection<Document>> {
  const collections = Object.fromEntries(
    collectionNames.map((name) => [name, db.collection<Document>(name)]),
  ) as Record<CollectionName, SqliteCollection<Document>>;
  for (const [name, counters] of Object.entries(counterDeclarations)) {
    for (const counter of counters) collections[name as CollectionName].keepCounter(counter);
  }
  return collections;
}

/**
 * What the embedded engine keeps in memory, exact because it is keyed by
 * the committed versions of what it was read from (see `SqliteDatabase.versionOf`).
 */
function keptInMemory(
  db: SqliteDatabase,
  system: Collections,
  afterErasure: () => Promise<void>,
): KeptInMemory {
  return {
    views: createCustomerViews(() => db.versionOf("customers") + db.versionOf("referrals")),
    audience: createWebhookAudience(system, () => db.versionOf("webhooks")),
    afterErasure,
  };
}

/**
 * A cluster worker's store: the file read through this process's own
 * read-only connection, each write sent to the writer (the primary, which
 * holds the data directory's lock).
 */
function openEmbeddedReader(
  dataDir: string,
  writes: ForwardedWrites,
  observe: OperationObserver | undefined,
): EmbeddedReader {
  const db = SqliteDatabase.openReader(join(dataDir, embeddedDatabaseFile));
  writes.onAnswer(() => db.forgetVersionsRead());
  try {
    const local = embeddedCollections(db);
    const collections = Object.fromEntries(
      Object.entries(local).map(([name, collection]) => [
        name,
        forwardingCollection(collection, writes),
      ]),
    );
    const stats = new EmbeddedStats(
      db,
      () => db.versionOf("campaigns"),
      (...args) => writes.run({ kind: "replaceStats", args }) as Promise<void>,
    );
    const system = observed(collections as unknown as Collections, observe);
    const forgetFreed = () => writes.run({ kind: "forgetFreed" }).then(() => undefined);
    const kept = keptInMemory(db, system, forgetFreed);
    const together: WriteTogether = (group) =>
      writes.run({ kind: "together", writes: group }) as Promise<JointOutcome>;
    return {
      ...tenantAccess(system, stats, kept, together),
      together,
      engine: "embedded",
      role: "reader",
      stats,
      statsChangedElsewhere: (scopes) => {
        db.forgetVersionsRead();
        stats.changedElsewhere(scopes);
      },
      seeNewCommits: () => db.forgetVersionsRead(),
      forgetFreed,
      queryPlans: () => db.queryPlans(),
      async ping() {
        db.ping();
      },
      probeWrite: () => writes.run({ kind: "probeWrite" }).then(() => undefined),
      diskUsage: () => diskUsageOf(dataDir, db),
      async close() {
        db.close();
      },
    };
  } catch (error) {
    db.close();
    throw error;
  }
}

/** DATA_DIR's free bytes (for an unprivileged process, as `df` shows them) and the database's size. */
function diskUsageOf(
  dataDir: string,
  db: SqliteDatabase,
): { freeBytes: number; storeBytes: number } {
  const disk = statfsSync(dataDir);
  return { freeBytes: disk.bavail * disk.bsize, storeBytes: db.sizeOnDisk() };
}

/** Told how long each store operation took (metrics). */
export type OperationObserver = (collection: string, operation: string, seconds: number) => void;

const observedOperations = [...writeOperations, "findOne", "countDocuments"] as const;

/** The collections, each operation timed for `observe` (a `find` when its cursor is read). */
function observed(collections: Collections, observe: OperationObserver | undefined): Collections {
  if (!observe) return collections;
  // The caller gets the operation's own promise: timing adds no step to its wait.
  const timed = <R>(name: string, operation: string, run: () => Promise<R>): Promise<R> => {
    const started = performance.now();
    const done = () => observe(name, operation, (performance.now() - started) / 1000);
    const result = run();
    result.then(done, done);
    return result;
  };
  const wrapped: Record<string, unknown> = {};
  for (const [name, collection] of Object.entries(collections) as [
    string,
    Record<string, (...args: unknown[]) => unknown>,
  ][]) {
    const methods: Record<string, unknown> = {};
    for (const operation of observedOperations) {
      methods[operation] = (...args: unknown[]) =>
        timed(name, operation, () => collection[operation]?.(...args) as Promise<unknown>);
    }
    for (const operation of ["find", "aggregate"] as const) {
      methods[operation] = (...args: unknown[]) => {
        const cursor = collection[operation]?.(...args) as { toArray(): Promise<unknown[]> };
        return { toArray: () => timed(name, operation, () => cursor.toArray()) };
      };
    }
    if (collection.countMany) {
      methods.countMany = (...args: unknown[]) =>
        timed(name, "countMany", () => collection.countMany?.(...args) as Promise<unknown>);
    }
    methods.createIndex = (...args: unknown[]) => collection.createIndex?.(...args);
    methods.dropIndex = (...args: unknown[]) => collection.dropIndex?.(...args);
    Object.defineProperty(methods, "version", { get: () => collection.version });
    wrapped[name] = methods;
  }
  return wrapped as unknown as Collections;
}

/**
 * `system` and `forTenant` over the collections. A tenant's repositories are
 * kept per tenant object (the authenticator hands out one per key while it is
 * cached), so a call does not rebuild them.
 */
function tenantAccess(
  system: Collections,
  stats: StatsStore,
  kept?: KeptInMemory,
  together?: WriteTogether,
): Pick<Store, "system" | "forTenant"> {
  const tenantStores = new WeakMap<Tenant, TenantStore>();
  return {
    system,
    forTenant(tenant) {
      let tenantStore = tenantStores.get(tenant);
      if (!tenantStore) {
        tenantStore = createTenantStore(system, tenant, stats, kept, together);
        tenantStores.set(tenant, tenantStore);
      }
      return tenantStore;
    },
  };
}

/**
 * The embedded engine makes each read-modify-write atomic by running it
 * synchronously in one process, so a second process on the same database
 * could interleave with it. A lock file with the owner's pid refuses the
 * second; a lock whose process is gone is taken over.
 */
function acquireLock(dataDir: string): () => void {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const path = join(dataDir, "LOCK");
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(path, "wx");
      writeSync(fd, String(process.pid));
      closeSync(fd);
      heldLocks.add(path);
      return () => {
        heldLocks.delete(path);
        rmSync(path, { force: true });
      };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
      const owner = Number(readFileSync(path, "utf8"));
      const ownedElsewhere = owner !== process.pid || heldLocks.has(path);
      if (owner && ownedElsewhere && isAlive(owner)) {
        throw new StoreOpenError(
          `${dataDir} is in use by process ${owner}: the embedded store has a single writer. ` +
            "Use the running service's API (npm run admin) or stop it first.",
        );
      }
      rmSync(path, { force: true });
    }
  }
  throw new Error(`could not lock ${dataDir}`);
}

/** Lock files this process holds, so a second open in-process is refused too. */
const heldLocks = new Set<string>();

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}
