import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DatabaseSync } from "node:sqlite";
import test, { type ExecutionContext } from "ava";
import { SqliteDatabase } from "../../src/store/engine/sqlite-database.js";
import { WalIndexWatch } from "../../src/store/engine/wal-index-watch.js";
import {
  ForwardedWrites,
  StoreReplyBatches,
  type StoreRequests,
} from "../../src/store/forwarded-writes.js";
import { embeddedDatabaseFile, openStore } from "../../src/store/store.js";

/**
 * How a cluster worker's reader learns of the writer's commits: it looks at
 * the file once, then again when told (each call, each answer of the writer)
 * or in the next turn of the event loop; the look reads the wal-index header
 * first and asks SQLite only when it moved.
 */

function openFile(t: ExecutionContext) {
  const dir = mkdtempSync(join(tmpdir(), "referrals-reader-"));
  const database = SqliteDatabase.open(join(dir, "db.sqlite"), "full");
  database.collection("things");
  const reader = SqliteDatabase.openReader(database.file);
  // Another connection commits at once, inside the test's turn.
  const other = new DatabaseSync(database.file);
  t.teardown(() => {
    other.close();
    reader.close();
    database.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const commitVersion = () =>
    other.exec(
      "INSERT INTO versions (name, v) VALUES ('things', 1) ON CONFLICT(name) DO UPDATE SET v = v + 1",
    );
  return { database, reader, commitVersion };
}

test("a reader keeps the versions it read until told to look again", (t) => {
  const { reader, commitVersion } = openFile(t);
  const before = reader.versionOf("things");
  commitVersion();
  t.is(reader.versionOf("things"), before, "not looked at again within the turn");
  reader.forgetVersionsRead();
  t.is(reader.versionOf("things"), before + 1, "seen once told to look");
  commitVersion();
  reader.forgetVersionsRead();
  t.is(reader.versionOf("things"), before + 2);
});

test("a reader looks at the file again in the next turn of the event loop", async (t) => {
  const { reader, commitVersion } = openFile(t);
  const before = reader.versionOf("things");
  commitVersion();
  await new Promise((resolve) => setImmediate(resolve));
  t.is(reader.versionOf("things"), before + 1);
});

test("the wal-index header moves with each commit, and only then", (t) => {
  const { database, commitVersion } = openFile(t);
  const watch = WalIndexWatch.open(database.file);
  if (!watch) return t.fail("the -shm file of a WAL database opens");
  t.teardown(() => watch.close());
  t.true(watch.moved(), "moved until a header is accepted");
  watch.accept();
  t.false(watch.moved(), "no commit since");
  commitVersion();
  t.true(watch.moved(), "a commit rewrote the header");
  t.true(watch.moved(), "still moved until accepted");
  watch.accept();
  t.false(watch.moved());
  for (let i = 0; i < 3; i++) commitVersion();
  t.true(watch.moved());
});

test("a worker's store looks again when the writer answers, and when a call enters", async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), "referrals-reader-"));
  const writer = await openStore({ dataDir });
  const sent: StoreRequests[] = [];
  const writes = new ForwardedWrites({ send: (requests) => sent.push(requests) });
  const worker = await openStore({ dataDir }, { forwardWrites: writes });
  const other = new DatabaseSync(join(dataDir, embeddedDatabaseFile));
  t.teardown(async () => {
    other.close();
    await worker.close();
    await writer.close();
    rmSync(dataDir, { recursive: true, force: true });
  });
  // The writer commits at once, as another process would, while this turn reads.
  const commit = () => other.exec("UPDATE versions SET v = v + 1 WHERE name = 'customers'");
  await writer.system.customers.insertOne({ _id: "cus_seed" } as never);
  void worker.system.customers.deleteOne({ _id: "cus_none" }).catch(() => undefined);
  // The commands of a turn are sent together as it ends.
  await new Promise((resolve) => setImmediate(resolve));
  const request = sent.at(-1)?.requests.at(-1);
  if (!request || worker.engine !== "embedded" || worker.role !== "reader")
    return t.fail("a write was sent; a worker's store reads the file");
  const before = worker.system.customers.version ?? 0;
  commit();
  t.is(worker.system.customers.version, before, "kept within the turn");
  writes.settle({
    type: "store-reply",
    replies: [{ id: request.id, result: { deletedCount: 0 } }],
  });
  t.is(worker.system.customers.version, before + 1, "looked again at the writer's answer");
  commit();
  worker.seeNewCommits();
  t.is(worker.system.customers.version, before + 2, "looked again as a call entered");
});

test("a worker sends one turn's writes in one message, and the writer answers a commit's in one per worker", async (t) => {
  const sent: StoreRequests[] = [];
  const writes = new ForwardedWrites({ send: (requests) => sent.push(requests) });
  const command = { kind: "probeWrite" } as const;
  const answers = [writes.run(command), writes.run(command), writes.run(command)];
  t.is(sent.length, 0, "nothing is sent before the turn ends");
  await new Promise((resolve) => setImmediate(resolve));
  t.is(sent.length, 1);
  const ids = sent[0]?.requests.map((request) => request.id) ?? [];
  t.is(ids.length, 3);

  const messages: { worker: string; ids: number[] }[] = [];
  const replies = new StoreReplyBatches<string>((worker, message) =>
    messages.push({ worker, ids: message.replies.map((reply) => reply.id) }),
  );
  await Promise.resolve().then(() => {
    for (const id of ids) replies.add("worker 1", { id, result: id });
    replies.add("worker 2", { id: 99, result: 0 });
  });
  await new Promise((resolve) => setImmediate(resolve));
  t.deepEqual(messages, [
    { worker: "worker 1", ids },
    { worker: "worker 2", ids: [99] },
  ]);
  writes.settle({ type: "store-reply", replies: ids.map((id) => ({ id, result: id * 10 })) });
  t.deepEqual(
    await Promise.all(answers),
    ids.map((id) => id * 10),
  );
  t.is(writes.pending, 0);
});
