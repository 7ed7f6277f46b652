/**
 * The embedded database's write-ahead log: how durable a commit is, and how
 * the log is kept short, by the checkpoint worker (`sqlite-checkpointer.ts`)
 * that the database starts here and holds.
 */
import { Worker } from "node:worker_threads";
import type { CheckpointerData } from "./sqlite-checkpointer.js";
import { rewindSignal } from "./sqlite-rewind-signal.js";

/**
 * How hard SQLite works to make a commit durable (`PRAGMA synchronous`, in
 * WAL mode). `normal`: a commit is in the write-ahead log before it is
 * acknowledged, so it survives the process being killed (kill -9, a crash);
 * a power loss or OS crash may roll back the last commits, never corrupt the
 * file. `full`: every commit is also fsynced, so it survives a power loss,
 * at the cost of one fsync per write.
 */
export type SqliteSynchronous = "normal" | "full";

/** How the write-ahead log is kept short (see `sqlite-checkpointer.ts`). */
export interface WalPolicy {
  /** How often the worker checkpoints: often enough that each one is short. */
  readonly checkpointIntervalMs: number;
  /** The length of log, in frames (pages), from which the worker rewinds it. */
  readonly restartFrames: number;
  /** The length of log past which the service's own connection checkpoints, if the worker falls behind. */
  readonly backstopPages: number;
}

/** 24 MiB of log before a rewind; 40 MiB before the backstop. */
export const defaultWalPolicy: WalPolicy = {
  checkpointIntervalMs: 100,
  restartFrames: 6_000,
  backstopPages: 10_000,
};

/** The checkpoint worker, as the database holds it. */
export interface Checkpointer {
  /**
   * Called before a transaction of its own begins: if the worker is about
   * to rewind the log, waits (at most {@link rewindWaitMs}) while it does,
   * holding the event loop. A rewind needs the write lock, and a busy writer
   * frees it only between a commit and its next BEGIN, too briefly for
   * SQLite's sleeping busy handler.
   */
  letRewind(): void;
  /** Whether the worker wants the write lock for a rewind: the next group should wait. */
  rewindWanted(): boolean;
  /**
   * Parks the connection between transactions for the rewind without
   * holding the event loop: resolves once the rewind is done, or after
   * {@link rewindWaitMs}.
   */
  parkForRewind(): Promise<void>;
  /** Closes the worker's connection (waiting up to a second), then ends it. */
  close(): void;
}

/** The longest a transaction waits for the worker's rewind (which takes milliseconds). */
const rewindWaitMs = 100;

/**
 * Starts the worker that checkpoints the WAL (`sqlite-checkpointer.ts`). It
 * keeps no event loop alive; if it cannot start, SQLite's own automatic
 * checkpoints (the backstop) do the work.
 */
export function startCheckpointer(
  file: string,
  synchronous: SqliteSynchronous,
  wal: WalPolicy,
): Checkpointer | undefined {
  // Compiled, this module is .js beside the worker's .js; run from sources
  // (tests, through tsx), both are .ts and the worker inherits the loader.
  const extension = import.meta.url.endsWith(".ts") ? "ts" : "js";
  const closed = new SharedArrayBuffer(4);
  const rewind = new Int32Array(new SharedArrayBuffer(8));
  const data: CheckpointerData = {
    file,
    synchronous: synchronous === "full" ? "FULL" : "NORMAL",
    intervalMs: wal.checkpointIntervalMs,
    restartFrames: wal.restartFrames,
    closed,
    rewind: rewind.buffer as SharedArrayBuffer,
  };
  let worker: Worker;
  try {
    worker = new Worker(new URL(`./sqlite-checkpointer.${extension}`, import.meta.url), {
      workerData: data,
    });
  } catch {
    return undefined;
  }
  worker.unref();
  // A worker that fails leaves checkpoints to the backstop.
  worker.on("error", () => {});
  return {
    letRewind() {
      if (Atomics.load(rewind, rewindSignal.wanted) === 0) return;
      Atomics.store(rewind, rewindSignal.parked, 1);
      Atomics.notify(rewind, rewindSignal.parked);
      Atomics.wait(rewind, rewindSignal.wanted, 1, rewindWaitMs);
      Atomics.store(rewind, rewindSignal.parked, 0);
    },
    rewindWanted: () => Atomics.load(rewind, rewindSignal.wanted) === 1,
    async parkForRewind() {
      Atomics.store(rewind, rewindSignal.parked, 1);
      Atomics.notify(rewind, rewindSignal.parked);
      const waiting = Atomics.waitAsync(rewind, rewindSignal.wanted, 1);
      if (waiting.async) {
        // The wait's end is a timer of ours, not V8's: a pending waitAsync
        // keeps no event loop alive, and a process with nothing else to do
        // (a script seeding a store) would exit with its writes parked.
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([
          waiting.value,
          new Promise((resolve) => {
            timer = setTimeout(resolve, rewindWaitMs);
          }),
        ]);
        clearTimeout(timer);
      }
      Atomics.store(rewind, rewindSignal.parked, 0);
    },
    close() {
      worker.postMessage("close");
      // Its connection closed first, the writer's close checkpoints the
      // whole log and removes it. A checkpoint running (an fsync on a busy
      // disk) can hold the thread for a while; past this the log stays, as
      // safe, and the next start reads it.
      Atomics.wait(new Int32Array(closed), 0, 0, 10_000);
      void worker.terminate();
    },
  };
}
