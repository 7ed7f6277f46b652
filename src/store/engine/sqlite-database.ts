import { randomUUID } from "node:crypto";
import { closeSync, openSync, statSync } from "node:fs";
import { DatabaseSync, type SQLInputValue, type StatementSync } from "node:sqlite";
import * as mingoUpdateOperators from "mingo/operators/update";
import type {
  CreateIndexesOptions,
  DeleteResult,
  Document,
  Filter,
  FindOneAndUpdateOptions,
  FindOptions,
  IndexSpecification,
  InsertManyResult,
  InsertOneResult,
  OptionalUnlessRequiredId,
  Sort,
  UpdateFilter,
  UpdateOptions,
  UpdateResult,
  WithId,
} from "mongodb";
import type { StoreCollection } from "../collection.js";
import { DuplicateKeyError, StoreOpenError } from "../errors.js";
import { type CounterDeclaration, fieldFanout } from "../indexes.js";
import {
  compileFilter,
  compileSort,
  decodeDocument,
  decodeValue,
  encodeColumns,
  encodeScalar,
  equalityFields,
  fieldExpression,
  isSidePath,
  project,
  sideFieldsRemoved,
  UnsupportedQueryError,
} from "./sqlite-query.js";
import {
  type Checkpointer,
  defaultWalPolicy,
  type SqliteSynchronous,
  startCheckpointer,
  type WalPolicy,
} from "./sqlite-wal.js";
import { WalIndexWatch } from "./wal-index-watch.js";

/**
 * One SQLite database in WAL mode, holding each collection as a table of
 * JSON documents, through two connections: one writes, one reads what is
 * committed. node:sqlite is synchronous: each collection write,
 * read-modify-write included, runs to completion before any other
 * JavaScript does, so every single-document operation is atomic; only the
 * process holding the data directory's lock writes (the workers of a
 * cluster open {@link SqliteDatabase.openReader} and forward their writes
 * to it). Writes are committed in groups (see {@link SqliteDatabase.write}).
 */
export class SqliteDatabase {
  /** The write connection; none in a reader. */
  private readonly db: DatabaseSync | undefined;
  /** Reads outside a write: they see committed data only. */
  private reads: DatabaseSync;
  private readonly statements = new Map<string, StatementSync>();
  private readonly readStatements = new Map<string, StatementSync>();
  private readonly queries = new Map<string, QuerySample>();
  private readonly collections = new Map<string, SqliteCollection<Document>>();
  /** The writes of the open group transaction, waiting for its commit. */
  private group: { resolve: () => void; reject: (error: unknown) => void }[] | undefined;
  /** What the open group changed (see {@link touch}). */
  private readonly touched = new Set<string>();
  /** Committed versions by name (see {@link versionOf}). */
  private readonly versions = new Map<string, number>();
  /** Changes made so far by name, committed or not (see {@link changesOf}). */
  private readonly changes = new Map<string, number>();
  /** A reader's last `PRAGMA data_version`: the versions are read again when it moves. */
  private dataVersion = -1;
  /** A reader's cheap look at the writer's commits, before the PRAGMA (see `WalIndexWatch`). */
  private walIndex: WalIndexWatch | undefined;

  private constructor(
    db: DatabaseSync | undefined,
    reads: DatabaseSync,
    readonly file: string,
    private readonly checkpointer: Checkpointer | undefined,
    private readonly limits: WriteLimits,
  ) {
    this.db = db;
    this.reads = reads;
  }

  /**
   * Opens (or creates) the database file. A file that is not a readable
   * SQLite database is refused with its name; nothing is skipped.
   */
  static open(
    file: string,
    synchronous: SqliteSynchronous,
    options: { wal?: WalPolicy; limits?: Partial<WriteLimits> } = {},
  ): SqliteDatabase {
    const wal = options.wal ?? defaultWalPolicy;
    createPrivately(file);
    let db: DatabaseSync | undefined;
    try {
      // A write waits (rather than fails) while the checkpoint worker
      // holds the write lock to rewind the log: a few milliseconds.
      db = new DatabaseSync(file, { timeout: writeLockWaitMs });
      db.exec("PRAGMA journal_mode = WAL");
      db.exec(`PRAGMA synchronous = ${synchronous === "full" ? "FULL" : "NORMAL"}`);
      // Reading the schema fails fast on a file that is not a database or
      // whose first pages are damaged.
      db.prepare("SELECT count(*) FROM sqlite_schema").get();
    } catch (error) {
      db?.close();
      throw new StoreOpenError(
        `${file} is not a readable SQLite database (${(error as Error).message}); ` +
          "restore it from a backup or move it away to start empty",
        { cause: error },
      );
    }
    db.exec(
      "CREATE TABLE IF NOT EXISTS counters (name TEXT NOT NULL, key TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (name, key)) WITHOUT ROWID, STRICT;" +
        "CREATE TABLE IF NOT EXISTS counter_definitions (name TEXT PRIMARY KEY NOT NULL) STRICT;" +
        "CREATE TABLE IF NOT EXISTS write_probe (id INTEGER PRIMARY KEY, at INTEGER NOT NULL) STRICT;" +
        "CREATE TABLE IF NOT EXISTS versions (name TEXT PRIMARY KEY NOT NULL, v INTEGER NOT NULL) STRICT",
    );
    // An 8 MiB page cache: it holds the upper levels of every index, and the
    // rest of the file is a read from the operating system's cache away. At
    // 1M customers 32 MiB added about 25 MiB of RSS and served no lookup,
    // list page or identify faster (the deepest list page was 12% slower).
    db.exec("PRAGMA cache_size = -8192");
    db.exec("PRAGMA temp_store = MEMORY");
    // Erased data must not stay on disk in freed space: SQLite zeroes what a
    // write frees inside the pages it writes anyway (FAST costs no extra I/O).
    db.exec("PRAGMA secure_delete = FAST");
    // Checkpoints run on a worker thread (see sqlite-checkpointer.ts); this
    // connection checkpoints itself only if the WAL outgrows what the
    // worker keeps up with.
    db.exec(`PRAGMA wal_autocheckpoint = ${wal.backstopPages}`);
    let reads: DatabaseSync;
    try {
      reads = openReadConnection(file);
    } catch (error) {
      db.close();
      throw error;
    }
    const database = new SqliteDatabase(
      db,
      reads,
      file,
      startCheckpointer(file, synchronous, wal),
      { ...defaultWriteLimits, ...options.limits },
    );
    database.loadVersions();
    return database;
  }

  /**
   * Opens a database another process writes (the primary of a cluster),
   * read-only: its collections read here and send their writes to the
   * writer (see `ForwardedWrites`). The writer created every table first.
   */
  static openReader(file: string): SqliteDatabase {
    let reads: DatabaseSync;
    try {
      reads = openReadConnection(file);
      reads.prepare("SELECT count(*) FROM sqlite_schema").get();
    } catch (error) {
      throw new StoreOpenError(
        `${file} is not a readable SQLite database (${(error as Error).message})`,
        { cause: error },
      );
    }
    const reader = new SqliteDatabase(undefined, reads, file, undefined, defaultWriteLimits);
    reader.walIndex = WalIndexWatch.open(file);
    return reader;
  }

  /** Whether this process writes the file (false in a cluster's workers). */
  get writes(): boolean {
    return this.db !== undefined;
  }

  /** The write connection: a reader has none, and its collections forward their writes. */
  private get writer(): DatabaseSync {
    if (!this.db) throw readOnlyError(this.file);
    return this.db;
  }

  /** The table of a collection, created on first use. */
  collection<T extends Document>(name: string): SqliteCollection<T> {
    (this.db ?? this.reads).exec(
      `CREATE TABLE IF NOT EXISTS "${name}" (id TEXT PRIMARY KEY NOT NULL, doc BLOB NOT NULL, side BLOB) STRICT`,
    );
    const collection = new SqliteCollection<T>(this, name);
    this.collections.set(name, collection as unknown as SqliteCollection<Document>);
    return collection;
  }

  /**
   * A prepared statement, compiled once per SQL text: on the write
   * connection inside a write (which reads what the group wrote so far),
   * on the read connection anywhere else (committed data only).
   */
  statement(sql: string): StatementSync {
    // Every query passes here: no tuple built to choose the connection.
    const kept = this.inWrite ? this.statements : this.readStatements;
    let statement = kept.get(sql);
    if (!statement) {
      statement = (this.inWrite ? this.writer : this.reads).prepare(sql);
      kept.set(sql, statement);
    }
    return statement;
  }

  /**
   * Notes that the write in progress changed `name` (a collection, or what
   * a cache depends on): its version moves when the group commits.
   */
  touch(name: string): void {
    this.touched.add(name);
    this.changes.set(name, (this.changes.get(name) ?? 0) + 1);
  }

  /**
   * The committed version of `name`: it moves with each commit that
   * changed it, in the same transaction, so a view read at one version is
   * current while the version stays, in this process and in every reader
   * of the file. Read the version first, then the data.
   */
  versionOf(name: string): number {
    if (!this.db && !this.versionsChecked) {
      // A reader looks once until told to look again (forgetVersionsRead)
      // or the turn ends, not at every version a call reads: a look is a
      // read of the wal-index header, and SQLite's answer once it moved.
      this.versionsChecked = true;
      this.forgetNextTurn ??= setImmediate(this.forgetAtTurnEnd);
      if (this.walIndex?.moved() !== false) {
        const { data_version: now } = this.statement("PRAGMA data_version").get() as {
          data_version: number;
        };
        if (now !== this.dataVersion) {
          this.dataVersion = now;
          this.loadVersions();
        }
        this.walIndex?.accept();
      }
    }
    return this.versions.get(name) ?? 0;
  }

  /**
   * A reader's next {@link versionOf} looks at the file again. Called as
   * each call enters the pipeline, and as each answer or word of the
   * writer arrives, since a commit lies behind it: so a call sees every
   * write acknowledged before it arrived, and a worker its own writes as
   * soon as they are answered. Anything else looks again in the next turn.
   */
  forgetVersionsRead(): void {
    this.versionsChecked = false;
  }

  /** Whether a reader looked at the file's versions since it was last told to look again. */
  private versionsChecked = false;
  private forgetNextTurn: NodeJS.Immediate | undefined;
  private readonly forgetAtTurnEnd = () => {
    this.forgetNextTurn = undefined;
    this.versionsChecked = false;
  };

  /**
   * How many writes of this process changed `name`, committed or not:
   * what a cache consulted inside writes (the campaigns' time zones) keys on.
   */
  changesOf(name: string): number {
    return this.changes.get(name) ?? 0;
  }

  private loadVersions(): void {
    const rows = this.reads.prepare("SELECT name, v FROM versions").all() as {
      name: string;
      v: number;
    }[];
    for (const row of rows) this.versions.set(row.name, row.v);
  }

  /** Remembers the first query behind each distinct SQL text, for {@link queryPlans}. */
  noteQuery(sql: string, collection: string, filter: Document, sort?: Sort): void {
    // On every query: allocate only the first time a text is seen.
    if (this.queries.has(sql)) return;
    this.queries.set(sql, { sql, collection, filter, ...(sort ? { sort } : {}) });
  }

  /**
   * SQLite's plan for every distinct query run so far, with the query it
   * came from: what the query-plan test checks for table scans.
   */
  queryPlans(): QueryPlan[] {
    return [...this.queries.values()].map((sample) => ({
      ...sample,
      plan: (
        this.reads.prepare(`EXPLAIN QUERY PLAN ${sample.sql}`).all() as { detail: string }[]
      ).map((row) => row.detail),
    }));
  }

  /**
   * Runs one collection write and resolves once it is committed. Writes
   * made in the same turn of the event loop share one transaction,
   * committed right after that turn (group commit): a commit costs far
   * more than a statement, and concurrent requests arrive together. Each
   * write is atomic on its own (a savepoint), and nobody is answered
   * before the commit that makes the write durable.
   */
  write<R>(work: () => R): Promise<R> {
    if (!this.db) return Promise.reject(readOnlyError(this.file));
    if (!this.group) {
      this.checkpointer?.letRewind();
      this.writer.exec("BEGIN IMMEDIATE");
      this.group = [];
      if (this.limits.groupCommit) setImmediate(() => this.commitGroup());
    }
    const group = this.group;
    let result: R;
    try {
      this.statement("SAVEPOINT write").run();
      this.inWrite = true;
      result = work();
      this.inWrite = false;
      this.statement("RELEASE write").run();
    } catch (error) {
      this.inWrite = false;
      this.undoWrite(error);
      // Refused after the group's commit, like any answer: a caller that
      // reads again and retries (another write took the unique key) then
      // reads the write it lost to, which reads see once it is committed.
      const open = this.group;
      if (!open) return Promise.reject(error);
      return new Promise((_, reject) => {
        open.push({ resolve: () => reject(error), reject });
        if (!this.limits.groupCommit) this.commitGroup();
      });
    }
    this.writeObserver?.released();
    const committed = new Promise<R>((resolve, reject) => {
      group.push({ resolve: () => resolve(result), reject });
    });
    if (!this.limits.groupCommit) this.commitGroup();
    return committed;
  }

  /**
   * True while a write's work runs (inside its savepoint), a transaction's,
   * or the group's last statements: statements go to the write connection.
   */
  inWrite = false;
  /** Told how each write and each group ends (see {@link observeWrites}). */
  private writeObserver: WriteObserver | undefined;

  /**
   * Lets what a write adds to (the program's counters) gather its
   * additions per group and write them once, just before the group's
   * commit, inside its transaction: told when a write's savepoint is
   * released or undone, when the group is about to commit, and when it is
   * abandoned.
   */
  observeWrites(observer: WriteObserver): void {
    this.writeObserver = observer;
  }

  /**
   * Undoes a write that failed inside the open group: its savepoint alone
   * when the transaction is still whole. On a full disk or an I/O error
   * SQLite may roll the whole transaction back itself: the group's other
   * writes, not answered yet, went with it and are refused with the same
   * error (nothing acknowledged is lost).
   */
  private undoWrite(error: unknown): void {
    this.writeObserver?.undone();
    try {
      this.statement("ROLLBACK TO write").run();
      this.statement("RELEASE write").run();
      return;
    } catch {
      // The transaction is gone or unusable: the group ends here.
    }
    this.abandonGroup(error);
  }

  /** Rolls the open group back and refuses each of its writes with `error`. */
  private abandonGroup(error: unknown): void {
    const waiting = this.group ?? [];
    this.group = undefined;
    this.writeObserver?.abandoned();
    this.rollbackQuietly();
    for (const writer of waiting) writer.reject(error);
  }

  /** Rolls back whatever transaction is open; one SQLite already ended is left alone. */
  private rollbackQuietly(): void {
    this.touched.clear();
    if (!this.db?.isTransaction) return;
    try {
      this.db.exec("ROLLBACK");
    } catch {
      // Rolled back by SQLite between the test and the statement.
    }
  }

  /** Commits the open group of writes, then answers their callers. */
  private commitGroup(): void {
    const waiting = this.group;
    if (!waiting) return;
    this.inWrite = true;
    try {
      this.writeObserver?.committing();
      const bump = this.statement(
        "INSERT INTO versions (name, v) VALUES (?, 1) ON CONFLICT (name) DO UPDATE SET v = v + 1",
      );
      for (const name of this.touched) bump.run(name);
    } catch (error) {
      this.inWrite = false;
      this.abandonGroup(error);
      return;
    }
    this.inWrite = false;
    this.group = undefined;
    try {
      this.writer.exec("COMMIT");
    } catch (error) {
      this.writeObserver?.abandoned();
      this.rollbackQuietly();
      for (const writer of waiting) writer.reject(error);
      return;
    }
    for (const name of this.touched) this.versions.set(name, (this.versions.get(name) ?? 0) + 1);
    this.touched.clear();
    this.groupsCommitted += 1;
    this.writesCommitted += waiting.length;
    for (const writer of waiting) writer.resolve();
  }

  /** Group commits so far, and the writes they committed (metrics: writes per commit). */
  groupsCommitted = 0;
  writesCommitted = 0;

  /**
   * The writes waiting for their group's commit: what WRITE_QUEUE_LIMIT
   * bounds, by refusing calls that would write while it is reached.
   */
  get queuedWrites(): number {
    return this.group?.length ?? 0;
  }

  /** Runs `work` in one transaction of its own: all of it is committed, or none. */
  transaction<R>(work: () => R): R {
    this.commitGroup();
    this.checkpointer?.letRewind();
    this.writer.exec("BEGIN IMMEDIATE");
    this.inWrite = true;
    try {
      const result = work();
      this.writer.exec("COMMIT");
      return result;
    } catch (error) {
      this.rollbackQuietly();
      throw error;
    } finally {
      this.inWrite = false;
    }
  }

  /**
   * Runs SQL that returns nothing (schema changes). A reader runs it too:
   * `CREATE ... IF NOT EXISTS` of what the writer made already changes nothing.
   */
  exec(sql: string): void {
    (this.db ?? this.reads).exec(sql);
  }

  /**
   * Leaves no copy of deleted or overwritten data in the files: the
   * write-ahead log, which holds earlier images of the pages a write
   * changed, is copied back and truncated to nothing. (Freed space inside
   * pages is zeroed as it is freed: `secure_delete` is on.) A reader in the
   * middle of a read (an export, another process) keeps the log in use: the
   * checkpoint is tried without waiting, for it never blocks the loop that
   * answers calls, and retried; past `patienceMs` it goes on in the background
   * until it succeeds, and the erasure is answered (its rows are gone already).
   */
  async forgetFreed(patienceMs = 2_000): Promise<void> {
    const startedAt = Date.now();
    let delayMs = 10;
    while (this.reads.isOpen) {
      if (this.truncateLog()) return;
      if (Date.now() - startedAt >= patienceMs) {
        this.forgetLater();
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, delayMs));
      delayMs = Math.min(delayMs * 2, 200);
    }
  }

  /** Erasures whose log could not be truncated yet: one background retry serves them all. */
  private forgetting: NodeJS.Timeout | undefined;

  private forgetLater(): void {
    if (this.forgetting) return;
    this.forgetting = setInterval(() => {
      if (!this.reads.isOpen || this.truncateLog()) {
        clearInterval(this.forgetting);
        this.forgetting = undefined;
      }
    }, 1_000);
    this.forgetting.unref();
  }

  /** One truncating checkpoint, failing at once rather than waiting on a reader: whether it took. */
  private truncateLog(): boolean {
    // Writes that came while it waited opened a group: a checkpoint cannot
    // run inside the connection's own open transaction.
    this.commitGroup();
    this.writer.exec("PRAGMA busy_timeout = 0");
    try {
      const [result] = this.writer.prepare("PRAGMA wal_checkpoint(TRUNCATE)").all() as {
        busy: number;
      }[];
      return result?.busy === 0;
    } finally {
      this.writer.exec(`PRAGMA busy_timeout = ${writeLockWaitMs}`);
    }
  }

  /** Whether the connection answers. */
  ping(): void {
    this.statement("SELECT 1").get();
    this.db?.prepare("SELECT 1").get();
  }

  /**
   * A write of one small row, committed like any other: whether the store
   * takes writes again after failing them (a full disk, a lock held too long).
   */
  probeWrite(at: number): Promise<void> {
    return this.write(() => {
      this.statement("INSERT OR REPLACE INTO write_probe (id, at) VALUES (1, ?)").run(at);
    });
  }

  /** The bytes the database takes on disk: the file, its write-ahead log and shared memory. */
  sizeOnDisk(): number {
    let bytes = 0;
    for (const suffix of ["", "-wal", "-shm"]) {
      try {
        bytes += statSync(`${this.file}${suffix}`).size;
      } catch {
        // No log or shared memory right now (after a clean close).
      }
    }
    return bytes;
  }

  /**
   * Replaces the planner's statistics with declared ones (see
   * `fieldFanout`): one row per table and index, in `sqlite_stat1`'s format.
   * Without statistics SQLite prefers an index that avoids sorting over one
   * that finds the single match (a lookup by external id would walk the
   * tenant's list index); sampled ones would change plans as data grows.
   */
  declareStatistics(): void {
    const db = this.db;
    if (!db) return;
    const rows = [...this.collections.values()].flatMap((collection) => collection.statistics());
    // ANALYZE on the schema table only creates sqlite_stat1 when missing.
    db.exec("ANALYZE sqlite_schema");
    this.transaction(() => {
      db.exec("DELETE FROM sqlite_stat1");
      const insert = db.prepare("INSERT INTO sqlite_stat1 (tbl, idx, stat) VALUES (?, ?, ?)");
      for (const { table, index, stat } of rows) insert.run(table, index, stat);
    });
    // Makes the planner read them now; statements are planned again. The
    // read connection, which may not run ANALYZE, reads them as it opens.
    db.exec("ANALYZE sqlite_schema");
    this.statements.clear();
    this.readStatements.clear();
    this.reads.close();
    this.reads = openReadConnection(this.file);
  }

  /** Closes the connection; the WAL is checkpointed into the file. */
  close(): void {
    if (!this.reads.isOpen) return;
    clearInterval(this.forgetting);
    if (this.db) this.commitGroup();
    // First the other connections, so the writer's is the last and its
    // close checkpoints the whole WAL and removes it.
    this.checkpointer?.close();
    this.readStatements.clear();
    this.reads.close();
    this.walIndex?.close();
    this.statements.clear();
    this.db?.close();
  }
}

/**
 * A connection that reads only: each statement sees the database as the
 * last commit left it, never a write in progress.
 */
function openReadConnection(file: string): DatabaseSync {
  const reads = new DatabaseSync(file, { readOnly: true, timeout: writeLockWaitMs });
  reads.exec("PRAGMA cache_size = -8192");
  reads.exec("PRAGMA temp_store = MEMORY");
  return reads;
}

function readOnlyError(file: string): Error {
  return new Error(`${file} is open read-only here: writes go to the writer`);
}

/** How the writer commits. */
export interface WriteLimits {
  /**
   * Bench-only: false commits each write alone (right after it), to
   * measure what sharing a commit saves.
   */
  readonly groupCommit: boolean;
}

const defaultWriteLimits: WriteLimits = { groupCommit: true };

/** How long a write waits for the write lock before failing as busy. */
const writeLockWaitMs = 5_000;

/** What {@link SqliteDatabase.observeWrites} tells. */
export interface WriteObserver {
  /** A write's savepoint was released: what it added joins its group. */
  released(): void;
  /** A write's savepoint was undone: what it added goes. */
  undone(): void;
  /** The group is about to commit: the last statements of its transaction. */
  committing(): void;
  /** The group was rolled back: what it added goes. */
  abandoned(): void;
}

/** A repository query as the engine ran it. */
export interface QuerySample {
  readonly collection: string;
  readonly sql: string;
  readonly filter: Document;
  readonly sort?: Sort;
}

/** A query and the steps of SQLite's plan for it (`EXPLAIN QUERY PLAN`). */
export interface QueryPlan extends QuerySample {
  readonly plan: readonly string[];
}

interface Row {
  id: string;
  doc: string;
  side: string | null;
}

/**
 * A `StoreCollection` on one table. Filters, sort, skip, limit and count run
 * in SQL on the declared indexes; update operators are applied with mingo
 * (MongoDB's semantics) to the document read in the same synchronous step.
 */
export class SqliteCollection<T extends Document> implements StoreCollection<T> {
  /**
   * Moves with every commit that wrote a document of this table (not one
   * that only emptied its outbox, which no view shows): a view read at one
   * version is current for as long as the version stays (see
   * {@link SqliteDatabase.versionOf}), so views kept in memory can be exact.
   */
  get version(): number {
    return this.database.versionOf(this.name);
  }
  /** The kept totals, with their names and lookup SQL worked out once. */
  private readonly counters: { declaration: CounterDeclaration; name: string; lookup: string }[] =
    [];
  private readonly indexes: {
    name: string;
    key: Record<string, 1 | -1>;
    unique: boolean;
    sparse: boolean;
  }[] = [];

  /**
   * Told of each change of a document inside the write that makes it, so
   * what it moves (the program's numbers) commits or rolls back with it.
   * `before` is a shallow copy taken before the update.
   */
  private watcher: ((before: Document | null, after: Document) => void) | undefined;

  constructor(
    private readonly database: SqliteDatabase,
    readonly name: string,
  ) {}

  /** Sets the collection's watcher (see {@link watcher}). */
  watch(watcher: (before: Document | null, after: Document) => void): void {
    this.watcher = watcher;
  }

  insertOne(doc: OptionalUnlessRequiredId<T>): Promise<InsertOneResult<T>> {
    return this.database.write(() => ({
      acknowledged: true,
      insertedId: this.insertRow(doc as Document) as never,
    }));
  }

  async insertMany(docs: readonly OptionalUnlessRequiredId<T>[]): Promise<InsertManyResult<T>> {
    const insertedIds: Record<number, string> = {};
    // Like MongoDB's ordered insertMany, the documents before a failure are kept.
    const failure = await this.database.write(() => {
      for (const [index, doc] of docs.entries()) {
        try {
          insertedIds[index] = this.insertRow(doc as Document);
        } catch (error) {
          return error;
        }
      }
      return undefined;
    });
    if (failure) throw failure;
    return {
      acknowledged: true,
      insertedCount: docs.length,
      insertedIds: insertedIds as never,
    };
  }

  async findOne(filter: Filter<T>, options: FindOptions = {}): Promise<WithId<T> | null> {
    const [first] = this.select(filter, { ...options, limit: 1 });
    return first ?? null;
  }

  find(filter: Filter<T>, options: FindOptions = {}): { toArray(): Promise<WithId<T>[]> } {
    return { toArray: async () => this.select(filter, options) };
  }

  async countDocuments(filter: Filter<T> = {}): Promise<number> {
    const kept = this.keptTotal(filter);
    if (kept !== undefined) return kept;
    const { sql, params } = this.countStatement(filter);
    this.database.noteQuery(sql, this.name, filter);
    const row = this.database.statement(sql).get(...params) as { n: number };
    return row.n;
  }

  async updateOne(
    filter: Filter<T>,
    update: UpdateFilter<T>,
    options: UpdateOptions = {},
  ): Promise<UpdateResult<T>> {
    const removed = options.upsert ? undefined : sideFieldsRemoved(update as Document);
    if (removed) {
      const { matched, modified } = await this.database.write(() =>
        this.removeSideFields(filter, removed),
      );
      return updatedWithoutUpsert(matched, modified);
    }
    const result = await this.database.write(() =>
      this.updateFirst(filter, update, options.upsert ?? false, undefined),
    );
    return {
      acknowledged: true,
      matchedCount: result.upserted ? 0 : result.matched,
      modifiedCount: result.modified ? 1 : 0,
      upsertedCount: result.upserted ? 1 : 0,
      upsertedId: (result.upserted ? result.doc?._id : null) as never,
    };
  }

  async updateMany(filter: Filter<T>, update: UpdateFilter<T>): Promise<UpdateResult<T>> {
    const operators = updateOperators(update);
    const { matched, modified } = await this.database.write(() => {
      const matches = this.select(filter, {});
      let changed = 0;
      for (const doc of matches) {
        const before = this.watcher ? { ...doc } : null;
        const modified = applyUpdate(doc, operators);
        if (modified.length === 0) continue;
        this.writeRow(doc, modified, before);
        changed += 1;
      }
      return { matched: matches.length, modified: changed };
    });
    return updatedWithoutUpsert(matched, modified);
  }

  async findOneAndUpdate(
    filter: Filter<T>,
    update: UpdateFilter<T>,
    options: FindOneAndUpdateOptions,
  ): Promise<WithId<T> | null> {
    if (options.returnDocument !== "after") {
      throw new UnsupportedQueryError("findOneAndUpdate without returnDocument 'after'");
    }
    const result = await this.database.write(() =>
      this.updateFirst(filter, update, options.upsert ?? false, options.sort),
    );
    return result.doc;
  }

  deleteOne(filter: Filter<T>): Promise<DeleteResult> {
    return this.database.write(() => {
      this.database.touch(this.name);
      const where = compileFilter(filter);
      const sql = `DELETE FROM "${this.name}" WHERE rowid = (SELECT rowid FROM "${this.name}" WHERE ${where.sql} LIMIT 1)`;
      this.database.noteQuery(sql, this.name, filter);
      const result = this.database.statement(sql).run(...where.params);
      return { acknowledged: true, deletedCount: Number(result.changes) };
    });
  }

  deleteMany(filter: Filter<T>): Promise<DeleteResult> {
    return this.database.write(() => {
      this.database.touch(this.name);
      const where = compileFilter(filter);
      const sql = `DELETE FROM "${this.name}" WHERE ${where.sql}`;
      this.database.noteQuery(sql, this.name, filter);
      const result = this.database.statement(sql).run(...where.params);
      return { acknowledged: true, deletedCount: Number(result.changes) };
    });
  }

  /**
   * A real SQLite index on the same expressions queries use: unique stays
   * unique, and a sparse index becomes a partial one over documents that
   * have the field, as MongoDB's sparse index leaves the others out.
   */
  async createIndex(spec: IndexSpecification, options: CreateIndexesOptions = {}): Promise<string> {
    const key = spec as Record<string, 1 | -1>;
    const name = `${this.name}_${Object.entries(key)
      .map(([path, direction]) => `${path}_${direction}`)
      .join("_")}`.replaceAll(/[^A-Za-z0-9_]/g, "_");
    // Built ascending whatever the declared direction: SQLite reads an index
    // backwards as fast as forwards (each declared index sorts its trailing
    // fields one way), and a descending index filled in time order inserts
    // at its front, where each page split leaves half a page empty: the
    // deliveries' list index was half empty that way. A database created
    // before keeps its descending indexes (same names), which work alike.
    const columns = Object.keys(key).map((path) => `${fieldExpression(path)} ASC`);
    const partial = options.sparse
      ? ` WHERE ${Object.keys(key)
          .map((path) => `${fieldExpression(path)} IS NOT NULL`)
          .join(" OR ")}`
      : "";
    this.database.exec(
      `CREATE ${options.unique ? "UNIQUE " : ""}INDEX IF NOT EXISTS "${name}" ON "${this.name}" (${columns.join(", ")})${partial}`,
    );
    this.indexes.push({
      name,
      key,
      unique: options.unique ?? false,
      sparse: options.sparse ?? false,
    });
    return name;
  }

  /**
   * The planner statistics of this table and its indexes, from the declared
   * fan-out of each field (`sqlite_stat1`: the rows, then how many rows one
   * value of each leading prefix of the index matches), at a nominal size.
   */
  statistics(): { table: string; index: string | null; stat: string }[] {
    const rows = nominalRows;
    const stats = [
      { table: this.name, index: null, stat: String(rows) },
      { table: this.name, index: `sqlite_autoindex_${this.name}_1`, stat: `${rows} 1` },
    ];
    for (const index of this.indexes) {
      // A sparse index holds the few documents that have the field.
      const indexed = index.sparse ? Math.ceil(rows / 10_000) : rows;
      let groups = 1;
      const perPrefix = Object.keys(index.key).map((field, position, fields) => {
        groups *= field === "_id" ? rows : (fieldFanout[field] ?? rows);
        const last = position === fields.length - 1;
        return index.unique && last ? 1 : Math.max(1, Math.round(indexed / groups));
      });
      stats.push({ table: this.name, index: index.name, stat: [indexed, ...perPrefix].join(" ") });
    }
    return stats;
  }

  /**
   * Keeps a total per group of documents, and the declared sums: triggers
   * adjust them in the same transaction as every insert, update and
   * delete, so they are exact; the first declaration on existing data
   * counts them once.
   */
  keepCounter(counter: CounterDeclaration): void {
    const name = counterName(this.name, counter);
    const sums = counter.sums ?? [];
    const key = (row: "NEW" | "OLD") =>
      `json_array(${counter.groupBy.map((path) => rowField(row, path)).join(", ")})`;
    const counted = (row: "NEW" | "OLD") =>
      (counter.nullFields ?? []).map((path) => `${rowField(row, path)} IS NULL`).join(" AND ") ||
      "1";
    // The count, then each sum: a row of `counters` each, under its own name.
    const tallies = (row: "NEW" | "OLD") => [
      { name, value: "1" },
      ...sums.map((path) => ({
        name: sumCounterName(name, path),
        value: `coalesce(${rowField(row, path)}, 0)`,
      })),
    ];
    const add = (row: "NEW" | "OLD") =>
      tallies(row)
        .map(
          (tally) =>
            `INSERT INTO counters (name, key, n) SELECT '${tally.name}', ${key(row)}, ${tally.value} ` +
            `WHERE ${counted(row)} ON CONFLICT (name, key) DO UPDATE SET n = n + excluded.n;`,
        )
        .join(" ");
    const remove = (row: "NEW" | "OLD") =>
      tallies(row)
        .map(
          (tally) =>
            `UPDATE counters SET n = n - ${tally.value} WHERE ${counted(row)} ` +
            `AND name = '${tally.name}' AND key = ${key(row)};`,
        )
        .join(" ");
    const moved = (row: "NEW" | "OLD") =>
      [counted(row), key(row), ...sums.map((path) => rowField(row, path))].join(", ");
    const trigger = `"${name.replaceAll(/[^A-Za-z0-9_]/g, "_")}`;
    // A reader uses the counters its writer keeps.
    if (this.database.writes)
      this.database.transaction(() => {
        const known = this.database
          .statement("SELECT 1 FROM counter_definitions WHERE name = ?")
          .get(name);
        if (known) return;
        this.database.exec(
          `CREATE TRIGGER ${trigger}_insert" AFTER INSERT ON "${this.name}" BEGIN ${add("NEW")} END;` +
            `CREATE TRIGGER ${trigger}_delete" AFTER DELETE ON "${this.name}" BEGIN ${remove("OLD")} END;` +
            // Most updates move no document between groups; they touch no counter.
            `CREATE TRIGGER ${trigger}_update" AFTER UPDATE OF doc ON "${this.name}" ` +
            `WHEN (${moved("OLD")}) IS NOT (${moved("NEW")}) ` +
            `BEGIN ${remove("OLD")} ${add("NEW")} END;`,
        );
        const group = counter.groupBy.map((path) => fieldExpression(path)).join(", ");
        const where = (counter.nullFields ?? []).map((path) => `${fieldExpression(path)} IS NULL`);
        const existing = [
          { name, value: "count(*)" },
          ...sums.map((path) => ({
            name: sumCounterName(name, path),
            value: `sum(coalesce(${fieldExpression(path)}, 0))`,
          })),
        ];
        for (const tally of existing) {
          this.database
            .statement(
              `INSERT INTO counters (name, key, n) SELECT ?, json_array(${group}), ${tally.value} ` +
                `FROM "${this.name}" WHERE ${where.join(" AND ") || "1"} GROUP BY ${group}`,
            )
            .run(tally.name);
        }
        this.database.statement("INSERT INTO counter_definitions (name) VALUES (?)").run(name);
      });
    const keys = counter.groupBy.map(() => "?").join(", ");
    this.counters.push({
      declaration: counter,
      name,
      lookup: `SELECT n FROM counters WHERE name = ? AND key = json_array(${keys})`,
    });
  }

  /**
   * The one aggregation the repositories run (see `StoreCollection.aggregate`):
   * from kept counters when a declaration matches it, else in SQL.
   */
  aggregate(pipeline: Document[]): { toArray(): Promise<Document[]> } {
    return {
      toArray: async () => {
        const grouping = groupingOf(pipeline);
        return this.keptGroups(grouping) ?? this.selectGroups(grouping);
      },
    };
  }

  /**
   * The groups an aggregation asks for, read from a kept counter whose
   * groups are the match's equalities then the grouped fields: one range of
   * the counters' primary key per tally, however many documents there are.
   */
  private keptGroups(grouping: Grouping): Document[] | undefined {
    const fields = grouping.match;
    const matched = Object.keys(fields).filter((path) => fields[path] !== undefined);
    const found = this.counters.find(({ declaration }) => {
      const nulls = declaration.nullFields ?? [];
      const equal = matched.filter((path) => !nulls.includes(path));
      return (
        nulls.every((path) => fields[path] === null) &&
        equal.length + nulls.length === matched.length &&
        declaration.groupBy.length === equal.length + grouping.groups.length &&
        declaration.groupBy
          .slice(0, equal.length)
          .every((path) => equal.includes(path) && isScalar(fields[path])) &&
        declaration.groupBy
          .slice(equal.length)
          .every((path, index) => path === grouping.groups[index]?.path) &&
        grouping.tallies.every(
          (tally) => tally.path === null || (declaration.sums ?? []).includes(tally.path),
        )
      );
    });
    if (!found) return undefined;
    const prefixLength = found.declaration.groupBy.length - grouping.groups.length;
    const values = found.declaration.groupBy
      .slice(0, prefixLength)
      .map((path) => encodeScalar(fields[path]));
    const { array } = this.database
      .statement(`SELECT json_array(${values.map(() => "?").join(", ")}) AS array`)
      .get(...values) as { array: string };
    // Every key of the groups starts with the prefix's elements and a comma.
    const from = `${array.slice(0, -1)}${prefixLength > 0 ? "," : ""}`;
    const below = from.slice(0, -1) + String.fromCharCode(from.charCodeAt(from.length - 1) + 1);
    const range = "SELECT key, n FROM counters WHERE name = ? AND key >= ? AND key < ?";
    const read = (name: string) =>
      new Map(
        (this.database.statement(range).all(name, from, below) as { key: string; n: number }[]).map(
          (row) => [row.key, row.n],
        ),
      );
    const counts = read(found.name);
    const sums = new Map(
      grouping.tallies
        .filter((tally) => tally.path !== null)
        .map((tally) => [tally.path, read(sumCounterName(found.name, tally.path as string))]),
    );
    const groups: Document[] = [];
    for (const [key, count] of counts) {
      if (count === 0) continue;
      const elements = (JSON.parse(key) as unknown[]).slice(prefixLength);
      const group: Document = { _id: groupId(grouping, elements) };
      for (const tally of grouping.tallies) {
        group[tally.name] = tally.path === null ? count : (sums.get(tally.path)?.get(key) ?? 0);
      }
      groups.push(group);
    }
    return groups;
  }

  /** The groups an aggregation asks for, by a GROUP BY over the match's index. */
  private selectGroups(grouping: Grouping): Document[] {
    const where = compileFilter(grouping.match);
    const groupBy = grouping.groups.map((group) => fieldExpression(group.path));
    const columns = [
      ...groupBy.map((expression, index) => `${expression} AS g${index}`),
      "count(*) AS n",
      ...grouping.tallies.map((tally, index) =>
        tally.path === null
          ? `count(*) AS t${index}`
          : `sum(coalesce(${fieldExpression(tally.path)}, 0)) AS t${index}`,
      ),
    ];
    const sql =
      `SELECT ${columns.join(", ")} FROM "${this.name}" WHERE ${where.sql}` +
      (groupBy.length > 0 ? ` GROUP BY ${groupBy.join(", ")}` : "");
    this.database.noteQuery(sql, this.name, grouping.match);
    const rows = this.database.statement(sql).all(...where.params) as Record<string, unknown>[];
    return rows
      .filter((row) => Number(row.n) > 0)
      .map((row) => {
        const group: Document = {
          _id: groupId(
            grouping,
            grouping.groups.map((_, index) => row[`g${index}`]),
          ),
        };
        grouping.tallies.forEach((tally, index) => {
          group[tally.name] = Number(row[`t${index}`]);
        });
        return group;
      });
  }

  /** The kept total a count's filter asks for, if a declared counter matches it exactly. */
  private keptTotal(filter: Filter<T>): number | undefined {
    const fields = filter as Document;
    let size = 0;
    for (const key in fields) if (fields[key] !== undefined) size += 1;
    const counter = this.counters.find(
      ({ declaration }) =>
        size === declaration.groupBy.length + (declaration.nullFields?.length ?? 0) &&
        declaration.groupBy.every((path) => isScalar(fields[path])) &&
        (declaration.nullFields ?? []).every((path) => fields[path] === null),
    );
    if (!counter) return undefined;
    const values = counter.declaration.groupBy.map((path) => encodeScalar(fields[path]));
    const row = this.database.statement(counter.lookup).get(counter.name, ...values) as
      | { n: number }
      | undefined;
    return row?.n ?? 0;
  }

  private findStatement(
    filter: Filter<T>,
    options: FindOptions = {},
  ): { sql: string; params: SQLInputValue[] } {
    const where = compileFilter(filter);
    const params = [...where.params];
    // Only ids asked for (a rule counting up to a limit, a set of matches):
    // the documents are neither read out as JSON nor parsed.
    const columns = isIdsOnly(options.projection)
      ? "id"
      : "id, json(doc) AS doc, json(side) AS side";
    let sql = `SELECT ${columns} FROM "${this.name}" WHERE ${where.sql}${compileSort(options.sort)}`;
    if (options.limit || options.skip) {
      // The limit is written into the statement: bound as a parameter, it
      // doubles the cost of a lookup by id (measured: 9 µs against 4.6).
      // Lists use a handful of page sizes, so statements stay few.
      sql += ` LIMIT ${sqlLimit(options.limit)}`;
      if (options.skip) {
        sql += " OFFSET ?";
        params.push(options.skip);
      }
    }
    return { sql, params };
  }

  private countStatement(filter: Filter<T>): { sql: string; params: SQLInputValue[] } {
    const where = compileFilter(filter);
    return {
      sql: `SELECT count(*) AS n FROM "${this.name}" WHERE ${where.sql}`,
      params: where.params,
    };
  }

  private select(filter: Filter<T>, options: FindOptions): WithId<T>[] {
    const { sql, params } = this.findStatement(filter, options);
    this.database.noteQuery(sql, this.name, filter, options.sort);
    const rows = this.database.statement(sql).all(...params) as unknown as Row[];
    if (isIdsOnly(options.projection))
      return rows.map((row) => ({ _id: row.id }) as unknown as WithId<T>);
    return rows.map((row) => project(this.decode(row), options.projection) as WithId<T>);
  }

  private decode(row: Row): WithId<T> {
    const doc = decodeDocument<Document>(row.doc);
    if (row.side !== null) Object.assign(doc, decodeDocument<Document>(row.side));
    // The primary key is the column (set, not spread first: no copy).
    doc._id = row.id;
    return doc as WithId<T>;
  }

  /**
   * MongoDB's update of the first match, or its upsert: when nothing
   * matches, the new document is the filter's equalities with the update
   * (`$setOnInsert` included) applied. A unique index violated by the write
   * is the typed duplicate-key error the repositories retry on.
   */
  private updateFirst(
    filter: Filter<T>,
    update: UpdateFilter<T>,
    upsert: boolean,
    sort: Sort | undefined,
  ): { matched: number; modified: boolean; upserted: boolean; doc: WithId<T> | null } {
    const { $setOnInsert, ...rest } = update as Record<string, Document>;
    const [current] = this.select(filter, { limit: 1, sort });
    if (current) {
      const before = this.watcher ? { ...current } : null;
      const modified = applyUpdate(current, updateOperators(rest));
      if (modified.length > 0) this.writeRow(current, modified, before);
      return { matched: 1, modified: modified.length > 0, upserted: false, doc: current };
    }
    if (!upsert) return { matched: 0, modified: false, upserted: false, doc: null };
    const inserted = equalityFields(filter) as WithId<T>;
    // mingo refuses to $set `_id` (immutable in MongoDB's updates), but an
    // upsert may choose the new document's id with $setOnInsert.
    const { _id: chosenId, ...onInsert } = $setOnInsert ?? {};
    if (chosenId !== undefined) inserted._id = chosenId as never;
    const operators = updateOperators(rest);
    operators.$set = { ...operators.$set, ...onInsert };
    applyUpdate(inserted, operators);
    inserted._id = this.insertRow(inserted) as never;
    return { matched: 0, modified: false, upserted: true, doc: inserted };
  }

  /**
   * `$unset` of whole side fields, in SQL: the first match's side column
   * loses them, its document is neither read nor rewritten (the relay and
   * the reward ledger clear their marks so after nearly every write).
   */
  private removeSideFields(
    filter: Filter<T>,
    fields: readonly string[],
  ): { matched: number; modified: number } {
    const where = compileFilter(filter);
    const present = fields.map((field) => `${fieldExpression(field)} IS NOT NULL`).join(" OR ");
    const sql = `SELECT rowid AS row, (${present}) AS present FROM "${this.name}" WHERE ${where.sql} LIMIT 1`;
    this.database.noteQuery(sql, this.name, filter);
    const found = this.database.statement(sql).get(...where.params) as
      | { row: number; present: number }
      | undefined;
    if (!found) return { matched: 0, modified: 0 };
    if (!found.present) return { matched: 1, modified: 0 };
    const paths = fields.map((field) => `'$.${field}'`).join(", ");
    this.database
      .statement(`UPDATE "${this.name}" SET side = jsonb_remove(side, ${paths}) WHERE rowid = ?`)
      .run(found.row);
    return { matched: 1, modified: 1 };
  }

  /** Inserts a document (its `_id` the key, a new one when it has none); returns the id. */
  private insertRow(doc: Document): string {
    const { _id, ...fields } = doc;
    const id = _id === undefined ? randomUUID() : String(_id);
    const columns = encodeColumns(fields);
    this.database.touch(this.name);
    translateConstraintErrors(() =>
      this.database
        .statement(`INSERT INTO "${this.name}" (id, doc, side) VALUES (?, jsonb(?), jsonb(?))`)
        .run(id, columns.doc, columns.side),
    );
    this.watcher?.(null, _id === undefined ? { ...doc, _id: id } : doc);
    return id;
  }

  /** Writes a changed document; only its side column when only side fields were modified. */
  private writeRow(
    doc: WithId<T>,
    modifiedPaths: readonly string[],
    before: Document | null,
  ): void {
    const { _id, ...fields } = doc;
    const columns = encodeColumns(fields);
    const sideOnly = modifiedPaths.every(isSidePath);
    if (!sideOnly) this.database.touch(this.name);
    translateConstraintErrors(() => {
      if (sideOnly) {
        this.database
          .statement(`UPDATE "${this.name}" SET side = jsonb(?) WHERE id = ?`)
          .run(columns.side, String(_id));
      } else {
        this.database
          .statement(`UPDATE "${this.name}" SET doc = jsonb(?), side = jsonb(?) WHERE id = ?`)
          .run(columns.doc, columns.side, String(_id));
      }
    });
    if (!sideOnly && before) this.watcher?.(before, doc);
  }
}

/** A counter's name: its collection, groups, conditions and sums. */
function counterName(collection: string, counter: CounterDeclaration): string {
  const nulls = counter.nullFields?.length ? `|null:${counter.nullFields.join(",")}` : "";
  const sums = counter.sums?.length ? `|sums:${counter.sums.join(",")}` : "";
  return `${collection}|${counter.groupBy.join(",")}${nulls}${sums}`;
}

/** The name of the row of `counters` that holds one sum of a counter. */
function sumCounterName(counter: string, path: string): string {
  return `${counter}|sum:${path}`;
}

/** An aggregation of the one supported shape, taken apart. */
interface Grouping {
  readonly match: Document;
  /** The group id's fields: their names in the result, and the paths grouped by. */
  readonly groups: readonly { name: string; path: string }[];
  /** The accumulators: a count (no path) or the sum of a field. */
  readonly tallies: readonly { name: string; path: string | null }[];
}

/** Reads `[{ $match }, { $group }]`; refuses any other pipeline loudly. */
function groupingOf(pipeline: Document[]): Grouping {
  const [matchStage, groupStage, ...rest] = pipeline;
  const only = (stage: Document | undefined, name: string) =>
    stage !== undefined && Object.keys(stage).length === 1 && name in stage;
  if (rest.length > 0 || !only(matchStage, "$match") || !only(groupStage, "$group")) {
    throw new UnsupportedQueryError("an aggregation other than [$match, $group]");
  }
  const { _id: id, ...accumulators } = (groupStage as Document).$group as Document;
  if (typeof id !== "object" || id === null || Array.isArray(id)) {
    throw new UnsupportedQueryError("a $group _id that is not an object of fields");
  }
  const fieldOf = (reference: unknown): string => {
    if (typeof reference !== "string" || !reference.startsWith("$")) {
      throw new UnsupportedQueryError(`the $group expression ${JSON.stringify(reference)}`);
    }
    return reference.slice(1);
  };
  const groups = Object.entries(id as Document).map(([name, reference]) => ({
    name,
    path: fieldOf(reference),
  }));
  const tallies = Object.entries(accumulators).map(([name, accumulator]) => {
    const operand = (accumulator as Document | null)?.$sum;
    if (Object.keys(accumulator ?? {}).length !== 1 || operand === undefined) {
      throw new UnsupportedQueryError(`the accumulator of ${name}: only $sum`);
    }
    return { name, path: operand === 1 ? null : fieldOf(operand) };
  });
  return { match: (matchStage as Document).$match as Document, groups, tallies };
}

/** A group's `_id` from its values, in the order of the grouped fields. */
function groupId(grouping: Grouping, values: readonly unknown[]): Document {
  const id: Document = {};
  grouping.groups.forEach((group, index) => {
    id[group.name] = decodeValue(values[index] ?? null);
  });
  return id;
}

/** A field of a trigger's NEW or OLD row, as the counted filter compares it. */
function rowField(row: "NEW" | "OLD", path: string): string {
  return fieldExpression(path)
    .replace(/json_extract\((doc|side),/, `json_extract(${row}.$1,`)
    .replace(/^id$/, `${row}.id`);
}

function isScalar(value: unknown): boolean {
  return (
    value !== null && (typeof value !== "object" || value instanceof Date) && value !== undefined
  );
}

/** The update's operators as mingo takes them; a replacement document is refused. */
function updateOperators(update: Document): Record<string, Document> {
  for (const key of Object.keys(update)) {
    if (!key.startsWith("$")) throw new UnsupportedQueryError("replacement-style updates");
  }
  return { ...update } as Record<string, Document>;
}

type UpdateOperator = (expr: Document) => (doc: Document) => string[];
const operatorsByName = mingoUpdateOperators as unknown as Record<string, UpdateOperator>;

/**
 * Applies MongoDB update operators to a document in place with mingo's
 * operator functions; returns the paths they modified. They are called
 * directly with mingo's default options: its `update()` builds a fresh
 * operator context on every call, which cost ~25 µs a write.
 */
function applyUpdate(doc: Document, operators: Record<string, Document>): string[] {
  const modified: string[] = [];
  for (const [name, expression] of Object.entries(operators)) {
    const operator = operatorsByName[name];
    if (!operator) throw new UnsupportedQueryError(`the update operator ${name}`);
    modified.push(...operator(expression)(doc));
  }
  return modified;
}

// The size the declared statistics describe: large, so that an index on a
// selective field always wins over walking a broad one.
const nominalRows = 1_000_000;

// SQLITE_CONSTRAINT_UNIQUE and SQLITE_CONSTRAINT_PRIMARYKEY.
const duplicateKeyCodes = new Set([2067, 1555]);

function translateConstraintErrors(write: () => void): void {
  try {
    write();
  } catch (error) {
    const code = (error as { errcode?: number }).errcode;
    if (code !== undefined && duplicateKeyCodes.has(code)) {
      throw new DuplicateKeyError(`duplicate key: ${(error as Error).message}`);
    }
    throw error;
  }
}

/** Whether a projection keeps `_id` alone (`{ _id: 1 }`). */
function isIdsOnly(projection: Document | undefined): boolean {
  if (projection === undefined) return false;
  let keys = 0;
  for (const key in projection) {
    if (key !== "_id" || !projection[key]) return false;
    keys += 1;
  }
  return keys === 1;
}

/** A limit as SQL: a positive integer, or -1 (none). */
function sqlLimit(limit: number | undefined): number {
  return limit !== undefined && Number.isSafeInteger(limit) && limit > 0 ? limit : -1;
}

/**
 * Creates a new database file readable by this user only, before SQLite
 * would create it with the umask's mode: it holds key hashes and sealed
 * secrets. SQLite gives its log and shared-memory files the database
 * file's mode. An existing file is left as it is.
 */
function createPrivately(file: string): void {
  try {
    closeSync(openSync(file, "wx", 0o600));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
  }
}

/** The driver's answer to an update that upserted nothing. */
function updatedWithoutUpsert<T extends Document>(
  matched: number,
  modified: number,
): UpdateResult<T> {
  return {
    acknowledged: true,
    matchedCount: matched,
    modifiedCount: modified,
    upsertedCount: 0,
    upsertedId: null,
  };
}
