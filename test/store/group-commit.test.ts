import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DatabaseSync } from "node:sqlite";
import test, { type ExecutionContext } from "ava";
import { SqliteDatabase } from "../../src/store/engine/sqlite-database.js";
import { defaultWalPolicy } from "../../src/store/engine/sqlite-wal.js";
import { DuplicateKeyError } from "../../src/store/errors.js";
import { eventually } from "../helpers/wait.js";

/**
 * The embedded engine's group commit: the writes of one turn of the event
 * loop share a commit, each in its own savepoint; nothing is answered before
 * that commit, and reads see committed data only. (WRITE_QUEUE_LIMIT refuses
 * calls before they write: test/transport/write-queue.test.ts.)
 */

interface Thing {
  _id: string;
  name?: string;
  note?: string;
}

function openDatabase(t: ExecutionContext) {
  const dir = mkdtempSync(join(tmpdir(), "referrals-group-"));
  const database = SqliteDatabase.open(join(dir, "db.sqlite"), "full");
  const things = database.collection<Thing>("things");
  void things.createIndex({ name: 1 }, { unique: true });
  t.teardown(() => {
    database.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return { database, things };
}

test("writes of one turn share one commit, and each is answered after it", async (t) => {
  const { database, things } = openDatabase(t);
  const before = database.groupsCommitted;
  let answered = 0;
  const writes = Array.from({ length: 50 }, (_, index) =>
    things.insertOne({ _id: `t${index}`, name: `n${index}` }).then(() => {
      answered += 1;
    }),
  );
  t.is(database.queuedWrites, 50, "all fifty wait in the open group");
  t.is(answered, 0, "none answered before the commit");
  await Promise.all(writes);
  t.is(database.groupsCommitted - before, 1, "one commit for the fifty");
  t.is(await things.countDocuments({}), 50);
});

test("a read never sees a write that is not committed yet", async (t) => {
  const { things } = openDatabase(t);
  const inserted = things.insertOne({ _id: "a", name: "first" });
  t.is(await things.findOne({ _id: "a" }), null, "the open group's write is not read");
  await inserted;
  t.like(await things.findOne({ _id: "a" }), { name: "first" }, "read once committed");
});

test("a write that fails rolls back alone, answers its own error after the commit, and the others commit", async (t) => {
  const { database, things } = openDatabase(t);
  await things.insertOne({ _id: "taken", name: "taken" });
  const committedBefore = database.groupsCommitted;
  const good = things.insertOne({ _id: "b", name: "b" });
  const duplicate = things.insertOne({ _id: "c", name: "taken" });
  const alsoGood = things.updateOne({ _id: "taken" }, { $set: { note: "kept" } });
  let refusedAt: number | undefined;
  const refused = duplicate.catch((error: unknown) => {
    refusedAt = database.groupsCommitted;
    return error;
  });
  await Promise.all([good, alsoGood]);
  t.true((await refused) instanceof DuplicateKeyError);
  t.is(refusedAt, committedBefore + 1, "the refusal came once the group had committed");
  t.like(await things.findOne({ _id: "b" }), { name: "b" });
  t.like(await things.findOne({ _id: "taken" }), { note: "kept" });
  t.is(await things.findOne({ _id: "c" }), null, "the failed write left nothing");
});

test("a write that fails part-way keeps nothing of what it wrote before (its savepoint is the writer's)", async (t) => {
  const { database, things } = openDatabase(t);
  await things.insertMany([
    { _id: "a", name: "a" },
    { _id: "b", name: "b" },
  ]);
  // One write of two statements: "a" takes the name "c", then "b" takes it too (unique).
  const renamedThenRefused = database.write(() => {
    things.writeInside("updateOne", [{ _id: "a" }, { $set: { name: "c" } }]);
    things.writeInside("updateOne", [{ _id: "b" }, { $set: { name: "c" } }]);
  });
  const error = await t.throwsAsync(renamedThenRefused);
  t.true(error instanceof DuplicateKeyError);
  t.like(await things.findOne({ _id: "a" }), { name: "a" }, "its first statement was undone");
  t.like(await things.findOne({ _id: "b" }), { name: "b" });
  // The connection goes on: the next write commits.
  await things.updateOne({ _id: "a" }, { $set: { name: "c" } });
  t.like(await things.findOne({ _id: "a" }), { name: "c" });
});

test("a version moves when a write to its collection commits, not before", async (t) => {
  const { database, things } = openDatabase(t);
  const version = things.version;
  const inserted = things.insertOne({ _id: "v", name: "v" });
  t.is(things.version, version, "unchanged while the write waits for its commit");
  t.is(database.changesOf("things"), 1, "counted as a change of this process at once");
  await inserted;
  t.is(things.version, version + 1);
});

test("a reader of the file sees the writer's commits and their versions", async (t) => {
  const { database, things } = openDatabase(t);
  const reader = SqliteDatabase.openReader(database.file);
  t.teardown(() => reader.close());
  const readThings = reader.collection<Thing>("things");
  const version = readThings.version;
  await things.insertOne({ _id: "r", name: "r" });
  t.is(readThings.version, version + 1, "the version committed with the write");
  t.like(await readThings.findOne({ _id: "r" }), { name: "r" });
  await t.throwsAsync(() => readThings.insertOne({ _id: "no" }), {
    message: /read-only here/,
  });
});

test("forgetting freed pages never blocks the loop on a reader: it retries, then goes on in the background until the log is truncated", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "referrals-forget-"));
  const file = join(dir, "db.sqlite");
  // No checkpoint worker's checkpoints: one that copied the first write
  // before the reader began would let the reader read the file alone, and
  // the log be truncated at once (a race the wait for a sync made likely).
  const database = SqliteDatabase.open(file, "full", {
    wal: { ...defaultWalPolicy, checkpointIntervalMs: 3_600_000 },
  });
  const things = database.collection<Thing>("things");
  const reader = new DatabaseSync(file);
  t.teardown(() => {
    if (reader.isOpen) reader.close();
    database.close();
    rmSync(dir, { recursive: true, force: true });
  });
  await things.insertOne({ _id: "first", name: "first" });
  const walSize = () => statSync(`${file}-wal`).size;
  // A read transaction (an export in progress) keeps the log from being truncated.
  reader.exec("BEGIN");
  reader.prepare("SELECT count(*) FROM sqlite_master").get();
  // A checkpoint that waited on the reader would freeze the loop for the
  // lock wait (5 s): the longest gap between ticks tells, whatever the load
  // (a count of ticks did not: on a busy machine the timers run late).
  let lastTick = performance.now();
  let longestGapMs = 0;
  const ticker = setInterval(() => {
    const now = performance.now();
    longestGapMs = Math.max(longestGapMs, now - lastTick);
    lastTick = now;
  }, 5);
  const startedAt = performance.now();
  const forgotten = database.forgetFreed(300);
  // Writes go on meanwhile, each answered.
  const writes: Promise<unknown>[] = [];
  for (let round = 0; round < 5; round++) {
    await new Promise((resolve) => setTimeout(resolve, 10));
    writes.push(things.insertOne({ _id: `during${round}`, name: `during${round}` }));
  }
  await Promise.all(writes);
  await forgotten;
  const tookMs = performance.now() - startedAt;
  clearInterval(ticker);
  t.true(tookMs < 2_000, `answered after its patience, not a lock wait (${Math.round(tookMs)} ms)`);
  t.true(
    longestGapMs < 1_000,
    `the event loop kept turning (longest pause ${Math.round(longestGapMs)} ms)`,
  );
  t.true(walSize() > 0, "the log is still in use by the reader");
  reader.exec("COMMIT");
  reader.close();
  await eventually("the log truncated in the background", () => walSize() === 0, {
    timeoutMs: 5_000,
  });
  t.is(await things.countDocuments({}), 6);
});

test("with synchronous full, a group is answered once the log's sync after its commit returned, and the next group waits for that sync", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "referrals-group-"));
  const syncs: ((error: Error | null) => void)[] = [];
  const database = SqliteDatabase.open(join(dir, "db.sqlite"), "full", {
    syncLog: (_fd, done) => syncs.push(done),
  });
  t.teardown(() => {
    for (const done of syncs.splice(0)) done(null);
    database.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const things = database.collection<Thing>("things");
  const answered: string[] = [];
  const first = things.insertOne({ _id: "a" }).then(() => answered.push("a"));
  await eventually("the first group's sync", () => syncs.length === 1);
  t.like(await things.findOne({ _id: "a" }), { _id: "a" }, "committed: reads see it");
  t.deepEqual(answered, [], "not answered before its sync returned");

  const committed = database.groupsCommitted;
  const second = things.insertOne({ _id: "b" });
  const third = things.insertOne({ _id: "c" });
  await new Promise((resolve) => setImmediate(resolve));
  await new Promise((resolve) => setImmediate(resolve));
  t.is(database.groupsCommitted, committed, "the next group waits while a sync runs");
  t.is(await things.findOne({ _id: "b" }), null);
  t.is(database.queuedWrites, 3, "the written and the waiting count as queued");

  syncs.shift()?.(null);
  await first;
  t.deepEqual(answered, ["a"]);
  t.is(database.groupsCommitted, committed + 1, "committed as the sync returned, as one group");
  t.is(syncs.length, 1, "and its own sync started");
  syncs.shift()?.(Object.assign(new Error("EIO: i/o error, fdatasync"), { code: "EIO" }));
  await t.throwsAsync(second, { code: "EIO" });
  await t.throwsAsync(third, { code: "EIO" });
  t.is(database.queuedWrites, 0);
});

test("with synchronous full, the log is synced by the operating system and every write is answered", async (t) => {
  const { database, things } = openDatabase(t);
  await Promise.all(
    Array.from({ length: 200 }, (_, index) => things.insertOne({ _id: `t${index}` })),
  );
  await things.insertOne({ _id: "last" });
  t.is(await things.countDocuments({}), 201);
  t.is(database.queuedWrites, 0);
});
