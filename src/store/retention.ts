import { setImmediate as nextTurn, setTimeout as sleep } from "node:timers/promises";
import type { Filter } from "mongodb";
import type { Clock } from "../domain/tenancy.js";
import type { Collections, StoreCollection } from "./collection.js";

/** How long events and deliveries are kept when EVENT_RETENTION is unset: 30 days. */
export const defaultEventRetentionMs = 30 * 86_400_000;

/**
 * The deliveries retention may remove: finished ones (succeeded, failed or
 * skipped). A pending delivery, due now or waiting for a retry, is never
 * removed, however old. The TTL index on MongoDB says the same with a
 * partial filter on `nextAttemptAt` (null exactly when not pending), as a
 * partial filter cannot say "not pending"; here a condition no index
 * serves keeps SQLite on the `createdAt` index.
 */
const finishedDelivery = { status: { $ne: "pending" } } as const;

/** What one sweep removed. */
export interface SweepResult {
  readonly events: number;
  readonly deliveries: number;
}

/**
 * Removes the events and the finished deliveries created before `now`
 * minus `retentionMs`: the embedded engine's counterpart of MongoDB's TTL
 * indexes. Each write removes about `batchSize` documents (the oldest
 * first, found on the `createdAt` index), and the event loop turns between
 * writes, so a large backlog never holds up requests for long. Stops
 * between batches once `signal` is aborted.
 */
export async function removeExpired(
  db: Collections,
  now: Date,
  retentionMs: number,
  options: { batchSize?: number; signal?: AbortSignal } = {},
): Promise<SweepResult> {
  const cutoff = new Date(now.getTime() - retentionMs);
  const batch = { size: options.batchSize ?? 500, signal: options.signal };
  const events = await removeOlderThan(db.events, {}, cutoff, batch);
  const deliveries = await removeOlderThan(db.deliveries, finishedDelivery, cutoff, batch);
  return { events, deliveries };
}

async function removeOlderThan<T extends { createdAt: Date }>(
  collection: StoreCollection<T>,
  removable: Filter<T>,
  cutoff: Date,
  batch: { size: number; signal: AbortSignal | undefined },
): Promise<number> {
  let removed = 0;
  while (!batch.signal?.aborted) {
    // The batch's newest document bounds one delete on the same index,
    // rather than a list of ids (one statement text for every batch).
    const [last] = await collection
      .find({ ...removable, createdAt: { $lt: cutoff } } as Filter<T>, {
        sort: { createdAt: 1 },
        skip: batch.size - 1,
        limit: 1,
        projection: { createdAt: 1 },
      })
      .toArray();
    const upTo = last ? { $lte: last.createdAt } : { $lt: cutoff };
    const { deletedCount } = await collection.deleteMany({
      ...removable,
      createdAt: upTo,
    } as Filter<T>);
    removed += deletedCount;
    if (!last) break;
    await nextTurn();
  }
  return removed;
}

/** A running sweep. */
export interface RetentionSweep {
  /** Ends the sweep; a sweep under way stops after its current batch. */
  stop(): Promise<void>;
}

/**
 * Runs {@link removeExpired} now and then every `intervalMs` (a minute, as
 * often as MongoDB's TTL monitor) until stopped. Only the embedded engine
 * needs it: on MongoDB the TTL indexes remove the same documents.
 */
export function startRetentionSweep(deps: {
  db: Collections;
  clock: Clock;
  retentionMs: number;
  log: (error: unknown, message: string) => void;
  /** Told what each sweep that removed something removed. */
  report?: (removed: SweepResult) => void;
  intervalMs?: number;
  batchSize?: number;
}): RetentionSweep {
  const stopping = new AbortController();
  const { signal } = stopping;
  const intervalMs = deps.intervalMs ?? 60_000;

  async function loop(): Promise<void> {
    while (!signal.aborted) {
      try {
        const removed = await removeExpired(deps.db, deps.clock(), deps.retentionMs, {
          signal,
          ...(deps.batchSize ? { batchSize: deps.batchSize } : {}),
        });
        if (removed.events + removed.deliveries > 0) deps.report?.(removed);
      } catch (error) {
        deps.log(error, "removing expired events and deliveries failed; retrying");
      }
      // Unreferenced: a sleeping sweep never keeps the process alive.
      await sleep(intervalMs, undefined, { signal, ref: false }).catch(() => {});
    }
  }

  const running = loop();
  return {
    async stop() {
      stopping.abort();
      await running;
    },
  };
}
