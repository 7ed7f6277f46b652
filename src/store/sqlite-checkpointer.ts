/**
 * The embedded database's WAL checkpoints, run on a worker thread with a
 * connection of its own (see `startCheckpointer` in `sqlite.ts`). A
 * checkpoint copies committed pages from the write-ahead log into the
 * database file and syncs it: several milliseconds of I/O that, left to
 * SQLite's automatic checkpoints, ran inside a commit on the event loop and
 * held up every request in flight. A passive checkpoint here waits for
 * nobody and nobody waits for it: the service's connection keeps reading
 * and committing while it runs.
 */
import { DatabaseSync } from "node:sqlite";
import { parentPort, workerData } from "node:worker_threads";

/** What the worker is started with. */
export interface CheckpointerData {
  readonly file: string;
  readonly synchronous: "NORMAL" | "FULL";
  /** How often to checkpoint, in milliseconds. */
  readonly intervalMs: number;
  /** Set to 1, then notified, once the worker's connection is closed. */
  readonly closed: SharedArrayBuffer;
}

const data = workerData as CheckpointerData;
const db = new DatabaseSync(data.file);
db.exec(`PRAGMA synchronous = ${data.synchronous}`);
// The service's connection may be committing: wait for its lock rather than fail.
db.exec("PRAGMA busy_timeout = 1000");
const checkpoint = db.prepare("PRAGMA wal_checkpoint(PASSIVE)");

const timer = setInterval(() => {
  try {
    checkpoint.get();
  } catch {
    // Busy or interrupted: the next tick tries again, and the service's own
    // automatic checkpoint remains as a backstop.
  }
}, data.intervalMs);

parentPort?.on("message", (message) => {
  if (message !== "close") return;
  clearInterval(timer);
  db.close();
  const closed = new Int32Array(data.closed);
  Atomics.store(closed, 0, 1);
  Atomics.notify(closed, 0);
  parentPort?.close();
});
