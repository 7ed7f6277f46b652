import { DatabaseSync } from "node:sqlite";

/**
 * Changes a started service's database file behind its back, in one
 * transaction of a connection of its own. The service runs in this
 * process: waiting for its lock inside SQLite (a busy timeout) would hold
 * the very event loop that commits the service's open group (its writes
 * of a turn commit at the next), and fail when the timeout ends with
 * `database is locked`. So the lock is tried without waiting, and the
 * loop turns between tries. The lock is taken before anything is read
 * (BEGIN IMMEDIATE): a statement in autocommit reads first, and a commit
 * of the service in between makes its upgrade to a write fail at once.
 */
export async function writeBehindTheService(
  file: string,
  sql: string,
  withinMs = 10_000,
): Promise<void> {
  const database = new DatabaseSync(file);
  try {
    const until = performance.now() + withinMs;
    for (;;) {
      try {
        database.exec("BEGIN IMMEDIATE");
        break;
      } catch (error) {
        if (!isBusy(error) || performance.now() > until) throw error;
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    }
    try {
      database.exec(sql);
      database.exec("COMMIT");
    } catch (error) {
      database.exec("ROLLBACK");
      throw error;
    }
  } finally {
    database.close();
  }
}

/** SQLite's SQLITE_BUSY (5), as node:sqlite reports it. */
function isBusy(error: unknown): boolean {
  return (error as { errcode?: number }).errcode === 5;
}
