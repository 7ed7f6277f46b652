/**
 * A script whose only work is writing to an embedded database whose log is
 * rewound often (see `test/store/wal-checkpoints.test.ts`): it prints how
 * many writes were answered, once every one was. Run as
 * `node --import tsx test/helpers/rewinding-writer.ts DIR COUNT`.
 */
import { join } from "node:path";
import { SqliteDatabase } from "../../src/store/engine/sqlite-database.js";

const [dir = ".", countText = "0"] = process.argv.slice(2);
const count = Number(countText);
const db = SqliteDatabase.open(join(dir, "db.sqlite"), "normal", {
  wal: { checkpointIntervalMs: 5, restartFrames: 64, backstopPages: 1_000_000 },
});
const things = db.collection<{ _id: string; payload: string }>("things");
const payload = "x".repeat(3000);
let answered = 0;
for (let start = 0; start < count; start += 50) {
  await Promise.all(
    Array.from({ length: Math.min(50, count - start) }, (_, k) =>
      things.insertOne({ _id: `t${start + k}`, payload }).then(() => {
        answered += 1;
      }),
    ),
  );
}
db.close();
process.stdout.write(`answered ${answered}\n`);
