import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import fc from "fast-check";
import type { SqliteCollection } from "../../src/store/engine/sqlite-collection.js";
import { SqliteDatabase } from "../../src/store/engine/sqlite-database.js";
import { DuplicateKeyError } from "../../src/store/errors.js";

/**
 * The embedded engine's kept totals (`counterDeclarations`): moved by the
 * writes themselves and written once per group commit, they must equal a
 * recount of the table after any mix of inserts, updates that move
 * documents between groups or in and out of a counted state, deletes,
 * writes that fail part-way, and a reopened file.
 */

interface Grant {
  _id: string;
  app: string;
  status?: string | null;
  deletedAt?: Date | null;
  amount?: number;
  slot?: string;
}

const apps = ["a1", "a2"] as const;
const statuses = ["pending", "approved", null] as const;

const operation = fc.oneof(
  fc.record({
    kind: fc.constant("insert" as const),
    id: fc.integer({ min: 0, max: 11 }),
    app: fc.constantFrom(...apps),
    status: fc.constantFrom(...statuses),
    amount: fc.option(fc.integer({ min: -500, max: 5000 }), { nil: undefined }),
  }),
  fc.record({
    kind: fc.constant("update" as const),
    id: fc.integer({ min: 0, max: 11 }),
    status: fc.constantFrom(...statuses),
    amount: fc.integer({ min: 0, max: 5000 }),
  }),
  fc.record({
    kind: fc.constant("move app" as const),
    from: fc.constantFrom(...apps),
    to: fc.constantFrom(...apps),
  }),
  fc.record({ kind: fc.constant("delete" as const), id: fc.integer({ min: 0, max: 11 }) }),
  fc.record({ kind: fc.constant("erase" as const), id: fc.integer({ min: 0, max: 11 }) }),
  fc.record({ kind: fc.constant("delete many" as const), app: fc.constantFrom(...apps) }),
  fc.record({ kind: fc.constant("fail part-way" as const), id: fc.integer({ min: 0, max: 11 }) }),
);

type Operation = typeof operation extends fc.Arbitrary<infer O> ? O : never;

function run(
  database: SqliteDatabase,
  grants: SqliteCollection<Grant>,
  op: Operation,
): Promise<unknown> {
  const id = "id" in op ? `g${op.id}` : "";
  switch (op.kind) {
    case "insert":
      return grants.insertOne({
        _id: id,
        app: op.app,
        status: op.status,
        ...(op.amount === undefined ? {} : { amount: op.amount }),
      });
    case "update":
      return grants.updateOne({ _id: id }, { $set: { status: op.status, amount: op.amount } });
    case "move app":
      return grants.updateMany({ app: op.from }, { $set: { app: op.to } });
    case "delete":
      return grants.deleteOne({ _id: id });
    case "erase":
      return grants.updateOne({ _id: id }, { $set: { deletedAt: new Date(0) } });
    case "delete many":
      return grants.deleteMany({ app: op.app, status: "pending" });
    case "fail part-way":
      // Moves a grant, then violates the unique slot: the move is undone with the write.
      return database.write(() => {
        grants.writeInside("updateOne", [{ _id: id }, { $set: { status: "approved" } }]);
        grants.writeInside("insertOne", [{ _id: `slot-${op.id}`, app: "a1", slot: "taken" }]);
        grants.writeInside("insertOne", [{ _id: `slot2-${op.id}`, app: "a1", slot: "taken" }]);
      });
  }
}

test("kept totals equal a recount after any mix of writes, failed ones and a reopen included", async (t) => {
  await fc.assert(
    fc.asyncProperty(
      fc.array(fc.array(operation, { maxLength: 6 }), { maxLength: 8 }),
      async (turns) => {
        const dir = mkdtempSync(join(tmpdir(), "referrals-kept-"));
        const file = join(dir, "db.sqlite");
        const open = () => {
          const database = SqliteDatabase.open(file, "normal");
          const grants = database.collection<Grant>("grants");
          void grants.createIndex({ slot: 1 }, { unique: true, sparse: true });
          grants.keepCounter({ groupBy: ["app"], nullFields: ["deletedAt"], serves: "test" });
          grants.keepCounter({ groupBy: ["app", "status"], sums: ["amount"], serves: "test" });
          return { database, grants };
        };
        let { database, grants } = open();
        try {
          for (const [index, turn] of turns.entries()) {
            // The writes of a turn share a group commit.
            const settled = await Promise.allSettled(turn.map((op) => run(database, grants, op)));
            for (const outcome of settled) {
              if (outcome.status === "rejected" && !(outcome.reason instanceof DuplicateKeyError)) {
                throw outcome.reason;
              }
            }
            if (index === 3) {
              database.close();
              ({ database, grants } = open());
            }
          }
          const all = await grants.find({}).toArray();
          for (const app of apps) {
            const live = all.filter((grant) => grant.app === app && grant.deletedAt == null);
            t.is(await grants.countDocuments({ app, deletedAt: null }), live.length);
            for (const status of ["pending", "approved"]) {
              const counted = all.filter((grant) => grant.app === app && grant.status === status);
              t.is(await grants.countDocuments({ app, status }), counted.length);
            }
            const groups = await grants
              .aggregate([
                { $match: { app } },
                {
                  $group: {
                    _id: { status: "$status" },
                    n: { $sum: 1 },
                    total: { $sum: "$amount" },
                  },
                },
              ])
              .toArray();
            const expected = new Map<string | null, { n: number; total: number }>();
            for (const grant of all.filter((one) => one.app === app)) {
              const key = grant.status ?? null;
              const group = expected.get(key) ?? { n: 0, total: 0 };
              group.n += 1;
              group.total += grant.amount ?? 0;
              expected.set(key, group);
            }
            // Compared by status, whatever the order of the groups.
            const byStatus = (entries: [unknown, { n: number; total: number }][]) =>
              Object.fromEntries(entries.map(([status, group]) => [String(status), group]));
            t.deepEqual(
              byStatus(
                groups.map((group) => [
                  group._id.status ?? null,
                  { n: group.n, total: group.total },
                ]),
              ),
              byStatus([...expected]),
            );
          }
        } finally {
          database.close();
          rmSync(dir, { recursive: true, force: true });
        }
      },
    ),
    { numRuns: 40 },
  );
});
