/**
 * The embedded database's WAL checkpoints, run on a worker thread with a
 * connection of its own (see `startCheckpointer` in `sqlite-wal.ts`). A
 * checkpoint copies committed pages from the write-ahead log into the
 * database file and syncs it: several milliseconds of I/O that, left to
 * SQLite's automatic checkpoints, ran inside a commit on the event loop and
 * held up every request in flight. A passive checkpoint here waits for
 * nobody and nobody waits for it: the service's connection keeps reading
 * and committing while it runs.
 *
 * Passive checkpoints alone never let the log start over under steady
 * writes: SQLite rewinds the WAL only when a transaction begins with every
 * frame already copied, and a busy writer commits new frames while each
 * checkpoint runs. So once the log is long, the worker copies it again
 * (only what came in meanwhile is left), asks the service's connection to
 * wait before its next transaction (`rewindSignal`), and checkpoints in
 * RESTART mode: the write lock for the last frames and two syncs, a few
 * milliseconds, after which the next commit writes from the start of the
 * log. Without the wait, a writer that begins its next transaction right
 * after each commit never leaves the lock free long enough.
 */
import { DatabaseSync } from "node:sqlite";
import { parentPort, workerData } from "node:worker_threads";
import { rewindSignal } from "./sqlite-rewind-signal.js";

/** What the worker is started with. */
export interface CheckpointerData {
  readonly file: string;
  readonly synchronous: "NORMAL" | "FULL";
  /** How often to checkpoint, in milliseconds. */
  readonly intervalMs: number;
  /** The length of log, in frames, from which a checkpoint ends by rewinding it. */
  readonly restartFrames: number;
  /** Set to 1, then notified, once the worker's connection is closed. */
  readonly closed: SharedArrayBuffer;
  /** The cells of {@link rewindSignal}. */
  readonly rewind: SharedArrayBuffer;
}

const data = workerData as CheckpointerData;
const db = new DatabaseSync(data.file);
db.exec(`PRAGMA synchronous = ${data.synchronous}`);
// The service's connection may be committing: wait for its lock rather than fail.
db.exec("PRAGMA busy_timeout = 1000");
const passive = db.prepare("PRAGMA wal_checkpoint(PASSIVE)");
const restart = db.prepare("PRAGMA wal_checkpoint(RESTART)");

/** `PRAGMA wal_checkpoint`'s row: frames in the log, and how many are copied. */
interface CheckpointRow {
  readonly busy: number;
  readonly log: number;
  readonly checkpointed: number;
}

const signal = new Int32Array(data.rewind);
/** Frames left to copy below which the rewind goes ahead. */
const rewindTailFrames = 64;
/** Passive checkpoints at most before a rewind, should the writer outpace them. */
const maxCatchUpRounds = 4;
/** How long to wait for the service's connection to finish its transaction and park. */
const parkWaitMs = 50;

function rewind(): void {
  Atomics.store(signal, rewindSignal.wanted, 1);
  try {
    // Parked, the service holds no transaction and the lock is free at once.
    // Not parked within the wait, it is writing nothing, or SQLite's busy
    // handler waits for its commit.
    Atomics.wait(signal, rewindSignal.parked, 0, parkWaitMs);
    restart.get();
  } finally {
    Atomics.store(signal, rewindSignal.wanted, 0);
    Atomics.notify(signal, rewindSignal.wanted);
  }
}

const timer = setInterval(() => {
  try {
    let { log, checkpointed } = passive.get() as unknown as CheckpointRow;
    if (log < data.restartFrames) return;
    // The service waits while the rewind copies and syncs what is left:
    // copy again, without holding anybody up, until little is.
    for (
      let round = 0;
      round < maxCatchUpRounds && log - checkpointed > rewindTailFrames;
      round++
    ) {
      ({ log, checkpointed } = passive.get() as unknown as CheckpointRow);
    }
    rewind();
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
