import type { SQLInputValue, StatementSync } from "node:sqlite";
import type { Document, Sort } from "mongodb";

/**
 * The database as its tables use it (`SqliteDatabase` is the one there is):
 * statements on the connection the moment calls for, each write inside the
 * open group, and the committed versions. Written as a type of its own so a
 * table knows its database without importing it: the database makes its
 * tables.
 */
export interface SqliteConnection {
  /** Whether this process writes the file (false in a cluster's workers). */
  readonly writes: boolean;
  /** A prepared statement: on the write connection inside a write, else on the read one. */
  statement(sql: string): StatementSync;
  /** Runs SQL that returns nothing (schema changes). */
  exec(sql: string): void;
  /** Runs one write in the open group; resolves once it is committed. */
  write<R>(work: () => R): Promise<R>;
  /** Runs `work` in one transaction of its own: all of it is committed, or none. */
  transaction<R>(work: () => R): R;
  /** Tells `observer` how each write and each group ends (see `WriteObserver`). */
  observeWrites(observer: WriteObserver): void;
  /** Notes that the write in progress changed `name`: its version moves at the commit. */
  touch(name: string): void;
  /** The committed version of `name`. */
  versionOf(name: string): number;
  /** Remembers the first query behind each distinct SQL text, for the query plans. */
  noteQuery(
    sql: string,
    collection: string,
    filter: Document,
    params: readonly SQLInputValue[],
    sort?: Sort,
  ): void;
}

/** What `SqliteConnection.observeWrites` tells. */
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
