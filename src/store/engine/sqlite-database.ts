import { closeSync, fdatasync, fdatasyncSync, openSync, statSync } from "node:fs";
import { DatabaseSync, type SQLInputValue, type StatementSync } from "node:sqlite";
import type { Document, Sort } from "mongodb";
import { StoreOpenError } from "../errors.js";
import { SqliteCollection } from "./sqlite-collection.js";
import type { SqliteConnection, WriteObserver } from "./sqlite-connection.js";
import { sideTableSchema } from "./sqlite-query.js";
import {
  type Checkpointer,
  defaultWalPolicy,
  type SqliteSynchronous,
  startCheckpointer,
  type WalPolicy,
} from "./sqlite-wal.js";
import { upgradeStoredFormat } from "./stored-format.js";
import { WalIndexWatch } from "./wal-index-watch.js";

const versionsQuery = "SELECT name, v FROM versions";

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
export class SqliteDatabase implements SqliteConnection {
  /** The write connection; none in a reader. */
  private readonly db: DatabaseSync | undefined;
  /** Reads outside a write: they see committed data only. */
  private reads: DatabaseSync;
  private readonly statements = new Map<string, StatementSync>();
  private readonly readStatements = new Map<string, StatementSync>();
  private readonly queries = new Map<string, QuerySample>();
  private readonly collections = new Map<string, SqliteCollection<Document>>();
  /** The writes of the open group transaction, waiting for its commit. */
  private group: Waiter[] | undefined;
  /**
   * Writes committed and waiting for the sync of the log that makes them
   * durable (see {@link commitGroup}), and those the running sync covers.
   */
  private unsynced: Waiter[] = [];
  private syncing: Waiter[] | undefined;
  /** The write-ahead log, opened for syncing it (see {@link syncsLog}). */
  private logFd: number | undefined;
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
  /** Rows this open wrote again in the current format (see `upgradeStoredFormat`); 0 once upgraded. */
  upgradedRows = 0;

  private constructor(
    db: DatabaseSync | undefined,
    reads: DatabaseSync,
    readonly file: string,
    private readonly checkpointer: Checkpointer | undefined,
    private readonly limits: WriteLimits,
    /**
     * Whether this process syncs the log itself after each commit, off the
     * event loop, and answers a group once its sync returned: how
     * `synchronous = full` is kept without SQLite's own fsync, which holds
     * the loop for the sync inside `COMMIT` (see {@link commitGroup}).
     */
    private readonly syncsLog: boolean,
    private readonly syncLog: LogSync,
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
    options: {
      wal?: WalPolicy;
      limits?: Partial<WriteLimits>;
      /** Tests: how the log is synced, and the checkpoint worker as the connection sees it. */
      syncLog?: LogSync;
      checkpointer?: Checkpointer;
    } = {},
  ): SqliteDatabase {
    const wal = options.wal ?? defaultWalPolicy;
    const limits = { ...defaultWriteLimits, ...options.limits };
    // Committing one write at a time (a bench's comparison) keeps SQLite's own sync.
    const syncsLog = synchronous === "full" && limits.groupCommit;
    createPrivately(file);
    let db: DatabaseSync | undefined;
    try {
      // A write waits (rather than fails) while the checkpoint worker
      // holds the write lock to rewind the log: a few milliseconds.
      db = new DatabaseSync(file, { timeout: writeLockWaitMs });
      db.exec("PRAGMA journal_mode = WAL");
      // NORMAL syncs the log before each checkpoint and never inside a
      // commit; for `full`, this process syncs it after each commit.
      db.exec(`PRAGMA synchronous = ${synchronous === "full" && !syncsLog ? "FULL" : "NORMAL"}`);
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
    let upgradedRows: number;
    try {
      upgradedRows = upgradeStoredFormat(db, file);
    } catch (error) {
      db.close();
      throw error;
    }
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
      options.checkpointer ?? startCheckpointer(file, synchronous, wal),
      limits,
      syncsLog,
      options.syncLog ?? fdatasync,
    );
    database.loadVersions();
    database.upgradedRows = upgradedRows;
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
    const reader = new SqliteDatabase(
      undefined,
      reads,
      file,
      undefined,
      defaultWriteLimits,
      false,
      fdatasync,
    );
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
      // The `side` column is no longer written (format 2 keeps side fields in the side table).
      `CREATE TABLE IF NOT EXISTS "${name}" (id TEXT PRIMARY KEY NOT NULL, doc BLOB NOT NULL, side BLOB) STRICT;${sideTableSchema(name)}`,
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
    // A worker reads them again after most of the writer's commits: the
    // statement is kept, as every read's is, until the connection reopens.
    let query = this.readStatements.get(versionsQuery);
    if (!query) {
      query = this.reads.prepare(versionsQuery);
      this.readStatements.set(versionsQuery, query);
    }
    const rows = query.all() as {
      name: string;
      v: number;
    }[];
    for (const row of rows) this.versions.set(row.name, row.v);
  }

  /** Remembers the first query behind each distinct SQL text, for {@link queryPlans}. */
  noteQuery(
    sql: string,
    collection: string,
    filter: Document,
    params: readonly SQLInputValue[],
    sort?: Sort,
  ): void {
    // On every query: allocate only the first time a text is seen.
    if (this.queries.has(sql)) return;
    this.queries.set(sql, {
      sql,
      collection,
      filter,
      params,
      ...(sort ? { sort } : {}),
    });
  }

  /**
   * SQLite's plan for every distinct query run so far, with the query it
   * came from: what the query-plan test checks for table scans.
   */
  queryPlans(): QueryPlan[] {
    return [...this.queries.values()].map((sample) => ({
      ...sample,
      // With the values it first ran with: a partial index is used for the values it names.
      plan: (
        this.reads.prepare(`EXPLAIN QUERY PLAN ${sample.sql}`).all(...sample.params) as {
          detail: string;
        }[]
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
    if (!this.group && (this.parkedWrites || this.checkpointer?.rewindWanted())) {
      return this.afterRewind(work);
    }
    if (!this.group) {
      this.writer.exec("BEGIN IMMEDIATE");
      this.group = [];
      if (this.limits.groupCommit) setImmediate(() => this.commitGroup());
    }
    const group = this.group;
    let result: R;
    // The savepoint's statements go to the write connection too: on the
    // read connection they would open and undo a savepoint there, and a
    // write failing half-way would keep its first statements.
    this.inWrite = true;
    try {
      this.statement("SAVEPOINT write").run();
      result = work();
      this.statement("RELEASE write").run();
      this.inWrite = false;
    } catch (error) {
      this.undoWrite(error);
      this.inWrite = false;
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
    for (const observer of this.writeObservers) observer.released();
    const committed = new Promise<R>((resolve, reject) => {
      group.push({ resolve: () => resolve(result), reject });
    });
    if (!this.limits.groupCommit) this.commitGroup();
    return committed;
  }

  /**
   * Writes that came while the connection waits, between transactions, for
   * the checkpoint worker to rewind the log (a few milliseconds, see
   * `sqlite-checkpointer.ts`), in their order. The event loop goes on
   * meanwhile: reads, answers, the cluster's messages.
   */
  private parkedWrites: (() => void)[] | undefined;

  private afterRewind<R>(work: () => R): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      if (!this.parkedWrites) {
        this.parkedWrites = [];
        const resume = () => {
          const parked = this.parkedWrites ?? [];
          this.parkedWrites = undefined;
          for (const run of parked) run();
        };
        (this.checkpointer?.parkForRewind() ?? Promise.resolve()).then(resume, resume);
      }
      this.parkedWrites.push(() => {
        this.write(work).then(resolve, reject);
      });
    });
  }

  /**
   * True while a write's work runs (inside its savepoint), a transaction's,
   * or the group's last statements: statements go to the write connection.
   */
  inWrite = false;
  /** Told how each write and each group ends (see {@link observeWrites}). */
  private readonly writeObservers: WriteObserver[] = [];

  /**
   * Lets what a write adds to (the program's numbers, the tables' kept
   * totals) gather its additions per group and write them once, just before the group's
   * commit, inside its transaction: told when a write's savepoint is
   * released or undone, when the group is about to commit, and when it is
   * abandoned.
   */
  observeWrites(observer: WriteObserver): void {
    this.writeObservers.push(observer);
  }

  /**
   * Undoes a write that failed inside the open group: its savepoint alone
   * when the transaction is still whole. On a full disk or an I/O error
   * SQLite may roll the whole transaction back itself: the group's other
   * writes, not answered yet, went with it and are refused with the same
   * error (nothing acknowledged is lost).
   */
  private undoWrite(error: unknown): void {
    for (const observer of this.writeObservers) observer.undone();
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
    for (const observer of this.writeObservers) observer.abandoned();
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

  /**
   * Commits the open group of writes, then answers their callers: at once
   * when SQLite made the commit as durable as configured, else once the
   * sync of the log that follows it returned ({@link syncsLog}).
   *
   * With `synchronous = full`, one sync of the log runs at a time, on
   * libuv's thread pool, while the event loop goes on: writes that arrive
   * meanwhile run in the next group's transaction, committed when the sync
   * returns, and their own sync starts then. A commit is visible to reads
   * (here and in the workers) as it returns, a moment before it is durable:
   * a power loss in that moment may take a write that a read has shown, but
   * never one that was answered, nor one an answered write came after (a
   * sync covers every commit before it). Unless `force` (the group must end
   * now), the group waits while a sync runs.
   */
  private commitGroup(force = false): void {
    const waiting = this.group;
    if (!waiting || (this.syncing && !force)) return;
    this.inWrite = true;
    try {
      for (const observer of this.writeObservers) observer.committing();
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
      for (const observer of this.writeObservers) observer.abandoned();
      this.rollbackQuietly();
      for (const writer of waiting) writer.reject(error);
      return;
    }
    for (const name of this.touched) this.versions.set(name, (this.versions.get(name) ?? 0) + 1);
    this.touched.clear();
    this.groupsCommitted += 1;
    this.writesCommitted += waiting.length;
    if (!this.syncsLog) {
      for (const writer of waiting) writer.resolve();
      return;
    }
    this.unsynced.push(...waiting);
    if (!this.syncing) this.syncUnsynced();
  }

  /** Syncs the log for the writes committed so far, then answers them. */
  private syncUnsynced(): void {
    const batch = this.unsynced;
    this.unsynced = [];
    this.syncing = batch;
    let fd: number;
    try {
      fd = this.openLog();
    } catch (error) {
      this.synced(batch, error);
      return;
    }
    this.syncLog(fd, (error) => this.synced(batch, error));
  }

  private synced(batch: readonly Waiter[], error: unknown): void {
    this.syncing = undefined;
    if (!this.reads.isOpen && this.logFd !== undefined) {
      // Closed meanwhile (its close made every commit durable): the
      // descriptor was left open for this sync.
      closeSync(this.logFd);
      this.logFd = undefined;
    }
    // Failed, committed and perhaps not durable: each caller hears the
    // failure (as of a cut connection: a retry with its idempotency key is safe).
    answerSynced(batch, error);
    if (this.group && this.reads.isOpen) this.commitGroup();
    if (!this.syncing && this.unsynced.length > 0) this.syncUnsynced();
  }

  /** The write-ahead log's descriptor, opened at the first sync (SQLite creates the file). */
  private openLog(): number {
    this.logFd ??= openSync(`${this.file}-wal`, "r+");
    return this.logFd;
  }

  /** Group commits so far, and the writes they committed (metrics: writes per commit). */
  groupsCommitted = 0;
  writesCommitted = 0;

  /**
   * The writes waiting for their group's commit: what WRITE_QUEUE_LIMIT
   * bounds, by refusing calls that would write while it is reached.
   */
  get queuedWrites(): number {
    return (
      (this.group?.length ?? 0) +
      this.unsynced.length +
      (this.syncing?.length ?? 0) +
      (this.parkedWrites?.length ?? 0)
    );
  }

  /** Runs `work` in one transaction of its own: all of it is committed, or none. */
  transaction<R>(work: () => R): R {
    this.commitGroup(true);
    this.checkpointer?.letRewind();
    this.writer.exec("BEGIN IMMEDIATE");
    this.inWrite = true;
    try {
      const result = work();
      this.writer.exec("COMMIT");
      // Rare (schema statistics, a counters' rebuild): synced here and now.
      if (this.syncsLog) fdatasyncSync(this.openLog());
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
    this.commitGroup(true);
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
    if (this.db) this.commitGroup(true);
    // The last writes, answered once durable; a sync still running answers its own.
    if (this.unsynced.length > 0) {
      const last = this.unsynced;
      this.unsynced = [];
      let error: unknown;
      try {
        fdatasyncSync(this.openLog());
      } catch (failed) {
        error = failed;
      }
      answerSynced(last, error);
    }
    // First the other connections, so the writer's is the last and its
    // close checkpoints the whole WAL and removes it.
    this.checkpointer?.close();
    this.readStatements.clear();
    this.reads.close();
    this.walIndex?.close();
    this.statements.clear();
    this.db?.close();
    // A sync still running closes it as it returns.
    if (this.logFd !== undefined && !this.syncing) {
      closeSync(this.logFd);
      this.logFd = undefined;
    }
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

/** A caller waiting for its write's commit (and sync). */
interface Waiter {
  resolve(): void;
  reject(error: unknown): void;
}

/** Answers the writes a sync of the log covered: each resolved, or refused with its error. */
function answerSynced(batch: readonly Waiter[], error: unknown): void {
  for (const writer of batch) {
    if (error) writer.reject(error);
    else writer.resolve();
  }
}

/** Syncs the log's data to the disk, off the event loop (`fs.fdatasync`; tests pass their own). */
export type LogSync = (fd: number, done: (error: Error | null) => void) => void;

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

/** A repository query as the engine ran it. */
export interface QuerySample {
  readonly collection: string;
  readonly sql: string;
  readonly filter: Document;
  readonly sort?: Sort;
  /** The values bound the first time it ran. */
  readonly params: readonly SQLInputValue[];
}

/** A query and the steps of SQLite's plan for it (`EXPLAIN QUERY PLAN`). */
export interface QueryPlan extends QuerySample {
  readonly plan: readonly string[];
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
