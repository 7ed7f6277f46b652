import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DatabaseSync } from "node:sqlite";
import test, { type ExecutionContext } from "ava";
import { SqliteDatabase } from "../../src/store/engine/sqlite-database.js";
import { WalIndexWatch } from "../../src/store/engine/wal-index-watch.js";
import { ForwardedWrites, type StoreRequest } from "../../src/store/forwarded-writes.js";
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
  const sent: StoreRequest[] = [];
  const writes = new ForwardedWrites({ send: (request) => sent.push(request) });
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
  const request = sent.at(-1);
  if (!request || worker.engine !== "embedded" || worker.role !== "reader")
    return t.fail("a write was sent; a worker's store reads the file");
  const before = worker.system.customers.version ?? 0;
  commit();
  t.is(worker.system.customers.version, before, "kept within the turn");
  writes.settle({ type: "store-reply", id: request.id, result: { deletedCount: 0 } });
  t.is(worker.system.customers.version, before + 1, "looked again at the writer's answer");
  commit();
  worker.seeNewCommits();
  t.is(worker.system.customers.version, before + 2, "looked again as a call entered");
});
