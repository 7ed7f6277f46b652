import { newId } from "../domain/ids.js";
import type { Collections } from "./collection.js";
import type { IdempotencyKeyDoc, IdempotentOutcomeDoc } from "./documents.js";
import { isDuplicateKeyError } from "./errors.js";

/** The tenant of the admin API's keys (it has no application). */
export const adminTenantId = "admin";

/** A write as its key identifies it. */
export interface IdempotentRequest {
  readonly key: string;
  readonly rpc: string;
  readonly requestHash: string;
}

/** How long a key lives, and how long a running call holds it. */
export interface IdempotencyTimes {
  /** From the first call until the key is forgotten. */
  readonly expiryMs: number;
  /** How long a call may run before another call may take its key over (a crashed instance). */
  readonly leaseMs: number;
}

/**
 * What a key holds when a call comes with it: `run` (the key is this
 * call's: run it, then {@link updateIdempotencyOutcome} or
 * {@link removeIdempotencyKey}), `replay` (a call with the same request
 * has finished), `running` (one is still running) or `mismatch` (the key
 * was sent with another request).
 */
export type IdempotencyClaim =
  | { readonly kind: "run"; readonly record: IdempotencyKeyDoc }
  | { readonly kind: "replay"; readonly outcome: IdempotentOutcomeDoc }
  | { readonly kind: "running" }
  | { readonly kind: "mismatch" };

// Races that make a claim look again: the record was taken over or removed
// between reading it and acting on it. Each retry sees a newer record.
const claimAttempts = 3;

/**
 * Claims a key for a call of a tenant (an application's id, or
 * {@link adminTenantId}). The unique (tenant, key) index decides which of
 * concurrent calls inserts the running record, on one instance or many; an
 * expired record, or a running one whose lease has passed, is taken over
 * by a conditional update on its lease owner, so that too has one winner.
 */
export async function claimIdempotencyKey(
  db: Collections,
  tenantId: string,
  request: IdempotentRequest,
  now: Date,
  times: IdempotencyTimes,
): Promise<IdempotencyClaim> {
  const running = (): Omit<IdempotencyKeyDoc, "_id"> => ({
    tenantId,
    key: request.key,
    rpc: request.rpc,
    requestHash: request.requestHash,
    leaseOwner: newId("run", now),
    leaseUntil: new Date(now.getTime() + times.leaseMs),
    outcome: null,
    createdAt: now,
    updatedAt: now,
    expiresAt: new Date(now.getTime() + times.expiryMs),
  });
  for (let attempt = 0; attempt < claimAttempts; attempt++) {
    const record: IdempotencyKeyDoc = { _id: newId("idk", now), ...running() };
    try {
      await db.idempotencyKeys.insertOne(record);
      return { kind: "run", record };
    } catch (error) {
      if (!isDuplicateKeyError(error)) throw error;
    }
    const existing = await db.idempotencyKeys.findOne({ tenantId, key: request.key });
    if (!existing) continue;
    const expired = existing.expiresAt <= now;
    if (!expired && existing.requestHash !== request.requestHash) return { kind: "mismatch" };
    if (!expired && existing.outcome) return { kind: "replay", outcome: existing.outcome };
    if (!expired && existing.leaseUntil > now) return { kind: "running" };
    const takenOver = await db.idempotencyKeys.findOneAndUpdate(
      { _id: existing._id, leaseOwner: existing.leaseOwner },
      { $set: running() },
      { returnDocument: "after" },
    );
    if (takenOver) return { kind: "run", record: takenOver };
  }
  return { kind: "running" };
}

/**
 * Records how the call under the key ended, if it still holds the key (a
 * call that outlived its lease and was taken over records nothing).
 * Resolves to whether it did.
 */
export async function updateIdempotencyOutcome(
  db: Collections,
  record: IdempotencyKeyDoc,
  outcome: IdempotentOutcomeDoc,
  now: Date,
): Promise<boolean> {
  const result = await db.idempotencyKeys.updateOne(
    { _id: record._id, leaseOwner: record.leaseOwner },
    { $set: { outcome, updatedAt: now } },
  );
  return result.matchedCount === 1;
}

/**
 * The calls kept under a tenant's keys, for replay: what an erasure looks
 * through for outcomes that hold the customer. Read by the tenant's index:
 * an erasure is rare, and an index of its own would cost every idempotent
 * write.
 */
export function findIdempotencyRecords(
  db: Collections,
  tenantId: string,
): Promise<IdempotencyKeyDoc[]> {
  return db.idempotencyKeys.find({ tenantId }).toArray();
}

/** Frees the key of a call whose outcome is not to be replayed, so a retry runs again. */
export async function removeIdempotencyKey(
  db: Collections,
  record: IdempotencyKeyDoc,
): Promise<void> {
  await db.idempotencyKeys.deleteOne({ _id: record._id, leaseOwner: record.leaseOwner });
}

/**
 * Removes up to `count` expired keys; resolves to how many. MongoDB's TTL
 * index does this by itself; the embedded engine calls it for every new
 * key, so it removes expired keys at least as fast as keys arrive. The
 * deletes are issued together: on the embedded engine each runs at once
 * and they share one commit.
 */
export async function removeExpiredIdempotencyKeys(
  db: Collections,
  now: Date,
  count: number,
): Promise<number> {
  const results = await Promise.all(
    Array.from({ length: count }, () => db.idempotencyKeys.deleteOne({ expiresAt: { $lte: now } })),
  );
  return results.reduce((sum, result) => sum + result.deletedCount, 0);
}
