import { spawnSync } from "node:child_process";
import { closeSync, existsSync, mkdtempSync, openSync, readSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import { SqliteDatabase } from "../../src/store/engine/sqlite-database.js";

const pageBytes = 4096;

/**
 * How many times the log open at `fd` has started over: the checkpoint
 * sequence number in its header (bytes 12-15, big-endian), which SQLite
 * increments each time the next writer rewinds the log to its beginning.
 */
function walResets(fd: number): number {
  const header = Buffer.alloc(16);
  return readSync(fd, header, 0, header.length, 0) === header.length ? header.readUInt32BE(12) : 0;
}

test("the write-ahead log is rewound under writes that never pause", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "referral-wal-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, "db.sqlite");
  // The service's own checkpoint is pushed out of reach, so only the worker
  // keeps the log short.
  const db = SqliteDatabase.open(file, "normal", {
    wal: { checkpointIntervalMs: 20, restartFrames: 256, backstopPages: 1_000_000 },
  });
  t.teardown(() => db.close());
  const things = db.collection<{ _id: string; payload: string }>("things");

  // Like a busy service: each group of writes stays open while other work
  // runs (here half a millisecond of it), and the next group begins as soon
  // as the last is committed. Passive checkpoints alone never catch up with
  // that log, and the lock is never free long enough for SQLite's own
  // waiting to take it.
  //
  // The writer goes on until the log has started over `wantedRewinds` times
  // (each rewind is due after 256 pages, about 1 MB): how long that takes
  // depends on how much of the machine the worker gets, so the test counts
  // rewinds rather than measuring the log after a fixed amount of writing.
  // Never rewound, the log would keep growing until `maxDocuments`.
  const payload = "x".repeat(3000);
  const perCommit = 8;
  const wantedRewinds = 10;
  const maxDocuments = 24_000;
  const walFile = `${file}-wal`;
  let wal: number | undefined;
  t.teardown(() => {
    if (wal !== undefined) closeSync(wal);
  });
  let firstReset = 0;
  let rewinds = 0;
  let written = 0;
  let longestLog = 0;
  while (rewinds < wantedRewinds && written < maxDocuments) {
    const inserted = Array.from({ length: perCommit }, (_, k) =>
      things.insertOne({ _id: `t${written + k}`, payload }),
    );
    const busyUntil = performance.now() + 0.5;
    while (performance.now() < busyUntil) {}
    await Promise.all(inserted);
    written += perCommit;
    if (wal === undefined && existsSync(walFile)) {
      wal = openSync(walFile, "r");
      firstReset = walResets(wal);
    }
    if (wal !== undefined) rewinds = walResets(wal) - firstReset;
    if (written % (perCommit * 16) === 0) {
      longestLog = Math.max(longestLog, statSync(walFile).size);
    }
  }

  t.true(
    rewinds >= wantedRewinds,
    `the log started over ${rewinds} times in ${written} documents (${Math.round(
      (written * payload.length) / 2 ** 20,
    )} MB); it reached ${Math.round(longestLog / pageBytes)} pages`,
  );
  t.is(await things.countDocuments({}), written);
});

test("writes wait for a rewind of the log without holding the event loop, and keep their order", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "referral-wal-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  let wanted = true;
  let rewound = () => {};
  const parks: number[] = [];
  const db = SqliteDatabase.open(join(dir, "db.sqlite"), "full", {
    checkpointer: {
      letRewind: () => {},
      rewindWanted: () => wanted,
      parkForRewind: () => {
        parks.push(performance.now());
        return new Promise((resolve) => {
          rewound = () => {
            wanted = false;
            resolve();
          };
        });
      },
      close: () => {},
    },
  });
  t.teardown(() => db.close());
  const things = db.collection<{ _id: string; order?: number }>("things");
  const answered: string[] = [];
  const first = things.insertOne({ _id: "a" }).then(() => answered.push("a"));
  const second = things
    .updateOne({ _id: "a" }, { $set: { order: 2 } })
    .then(() => answered.push("b"));
  t.is(parks.length, 1, "one park for the writes that wait together");
  t.is(db.queuedWrites, 2);
  // The loop turns while they wait: a timer runs, reads are answered.
  await new Promise((resolve) => setTimeout(resolve, 20));
  t.is(await things.findOne({ _id: "a" }), null, "nothing written during the rewind");
  t.deepEqual(answered, []);
  rewound();
  await Promise.all([first, second]);
  t.deepEqual(answered, ["a", "b"]);
  t.like(await things.findOne({ _id: "a" }), { order: 2 }, "run in the order they came");
  await things.insertOne({ _id: "c" });
  t.is(parks.length, 1, "no rewind wanted: no wait");
});

test("a process whose only work is its writes answers them all across rewinds of the log", (t) => {
  // A write waiting for a rewind keeps the process alive: V8's wait for the
  // worker's signal alone does not, and a seeding script exited with its
  // writes parked (`Detected unsettled top-level await`).
  const dir = mkdtempSync(join(tmpdir(), "referral-wal-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const script = new URL("../helpers/rewinding-writer.ts", import.meta.url).pathname;
  const run = spawnSync(process.execPath, ["--import", "tsx", script, dir, "6000"], {
    encoding: "utf8",
    timeout: 60_000,
  });
  t.is(run.status, 0, run.stderr);
  t.is(run.stdout.trim(), "answered 6000");
});
