import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import { SqliteDatabase } from "../../src/store/sqlite.js";

const pageBytes = 4096;

test("the write-ahead log is rewound under writes that never pause", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "referral-wal-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, "db.sqlite");
  // The service's own checkpoint is pushed out of reach, so only the worker
  // keeps the log short.
  const db = SqliteDatabase.open(file, "normal", {
    checkpointIntervalMs: 20,
    restartFrames: 256,
    backstopPages: 1_000_000,
  });
  t.teardown(() => db.close());
  const things = db.collection<{ _id: string; payload: string }>("things");

  // Like a busy service: each group of writes stays open while other work
  // runs (here half a millisecond of it), and the next group begins as soon
  // as the last is committed. Passive checkpoints alone never catch up with
  // that log, and the lock is never free long enough for SQLite's own
  // waiting to take it.
  const payload = "x".repeat(3000);
  const documents = 12_000;
  const perCommit = 8;
  let longestLog = 0;
  for (let written = 0; written < documents; written += perCommit) {
    const inserted = Array.from({ length: perCommit }, (_, k) =>
      things.insertOne({ _id: `t${written + k}`, payload }),
    );
    const busyUntil = performance.now() + 0.5;
    while (performance.now() < busyUntil) {}
    await Promise.all(inserted);
    if (written % (perCommit * 16) === 0) {
      longestLog = Math.max(longestLog, statSync(`${file}-wal`).size);
    }
  }

  // Never rewound, the log would hold every page written: at least 36 MB.
  const writtenBytes = documents * payload.length;
  t.true(
    longestLog < writtenBytes / 3,
    `the log reached ${Math.round(longestLog / pageBytes)} pages`,
  );
  t.is(await things.countDocuments({}), documents);
});
