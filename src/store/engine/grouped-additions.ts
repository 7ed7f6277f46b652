import type { SqliteConnection } from "./sqlite-connection.js";

/**
 * Additions to counters gathered inside the embedded engine's writes: a
 * write's own until its savepoint is released (dropped when it is undone),
 * then its group's, summed per counter, until the group commits (written
 * once, in its transaction, however many writes added to a counter) or is
 * abandoned. The kept totals and the program's numbers both gather theirs
 * so.
 */
export class GroupedAdditions<T extends { n: number }> {
  private readonly pending = new Map<string, T>();
  private readonly group = new Map<string, T>();

  /**
   * Follows `database`'s writes; `write` gets the group's additions just
   * before its commit, inside its transaction.
   */
  constructor(database: Pick<SqliteConnection, "observeWrites">, write: (rows: T[]) => void) {
    database.observeWrites({
      released: () => this.merge(),
      undone: () => this.pending.clear(),
      committing: () => write(this.take()),
      abandoned: () => {
        this.pending.clear();
        this.group.clear();
      },
    });
  }

  /**
   * Adds `n` to the counter `key` in the write in progress; false when the
   * write has not added to it yet: then {@link start} it (no row is built
   * on the hot path unless needed).
   */
  addTo(key: string, n: number): boolean {
    const gathered = this.pending.get(key);
    if (gathered) gathered.n += n;
    return gathered !== undefined;
  }

  /** The write's first addition to the counter `key`. */
  start(key: string, row: T): void {
    this.pending.set(key, row);
  }

  /** The group's additions that move anything, taken out of it. */
  take(): T[] {
    if (this.group.size === 0) return [];
    const rows = [...this.group.values()].filter((row) => row.n !== 0);
    this.group.clear();
    return rows;
  }

  /** What is gathered, the group's then the write's: read, or pruned with `delete`. */
  get gathered(): readonly Map<string, T>[] {
    return [this.group, this.pending];
  }

  private merge(): void {
    for (const [key, row] of this.pending) {
      const total = this.group.get(key);
      if (total) total.n += row.n;
      else this.group.set(key, row);
    }
    this.pending.clear();
  }
}
