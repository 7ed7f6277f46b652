import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DatabaseSync } from "node:sqlite";
import test from "ava";
import fc from "fast-check";
import type { Document } from "mongodb";
import { unleased } from "../../src/store/deliveries.js";
import type { DeliveryDoc } from "../../src/store/documents.js";
import { embeddedDatabaseFile } from "../../src/store/embedded-file.js";
import { decodeDocument, encodeDate } from "../../src/store/engine/sqlite-query.js";
import { storedFormat } from "../../src/store/engine/stored-format.js";
import { openStore, type Store } from "../../src/store/store.js";

/**
 * The embedded engine's stored format: dates as compact text that sorts in
 * time order, and the upgrade of a store written in the format before it
 * (dates as tagged ISO 8601 text), which runs before the service serves.
 */

test("a date's stored text sorts in time order and reads back as the same date, across Date's whole range", (t) => {
  const anyDate = fc.oneof(
    fc.date({ noInvalidDate: true }),
    // The bounds of each of the three forms, and around them.
    fc
      .constantFrom(
        -8.64e15,
        -62_135_596_800_001,
        -62_135_596_800_000,
        0,
        3_594_000_000_000_000,
        8.64e15,
      )
      .map((ms) => new Date(ms)),
    fc.integer({ min: -62_135_596_800_100, max: -62_135_596_799_900 }).map((ms) => new Date(ms)),
  );
  fc.assert(
    fc.property(anyDate, anyDate, (a, b) => {
      const [storedA, storedB] = [encodeDate(a), encodeDate(b)];
      const textOrder = Math.sign(storedA < storedB ? -1 : storedA > storedB ? 1 : 0);
      const timeOrder = Math.sign(a.getTime() - b.getTime());
      const back = decodeDocument<{ at: Date }>(JSON.stringify({ at: storedA })).at;
      return textOrder === timeOrder && back.getTime() === a.getTime();
    }),
    { numRuns: 2_000 },
  );
  t.is(
    encodeDate(new Date("2026-11-29T21:55:51.177Z")).length,
    11,
    "a date of our time takes eleven characters",
  );
  t.throws(() => encodeDate(new Date(Number.NaN)), { instanceOf: RangeError });
});

const now = new Date("2026-11-29T12:00:00.000Z");
const hours = 3_600_000;
const tricky = {
  // Strings that look like either format's dates or escapes stay strings.
  oldDate: "\u0001D2026-01-01T00:00:00.000Z",
  oldEscape: "\u0001Sx",
  newDate: "\u00010000000000",
  newFarDate: "\u0001~00000000000",
  del: "\u007fx",
  plain: "2026-01-01T00:00:00.000Z",
};

function delivery(id: string, nextAttemptAt: Date | null, createdAt: Date): DeliveryDoc {
  return {
    _id: id,
    organizationId: "org_1",
    applicationId: "app_1",
    webhookId: "whk_1",
    eventId: `evt_${id}`,
    eventType: "customer.created",
    status: nextAttemptAt ? "pending" : "succeeded",
    attempts: [{ attemptedAt: createdAt, statusCode: 503, durationMs: 1, error: "HTTP 503" }],
    scheduleAttempts: 1,
    nextAttemptAt,
    leaseUntil: unleased,
    leaseOwner: null,
    createdAt,
    updatedAt: createdAt,
  };
}

/**
 * Writes a store as the first format did, the state an upgrade starts from:
 * dates as ISO text (in the rows `rows` picks), side fields in the
 * document's row, their indexes on the collection's table.
 */
function writeInOldFormat(
  file: string,
  rows: (table: string, index: number) => boolean = () => true,
): void {
  const db = new DatabaseSync(file);
  try {
    const tables = db
      .prepare(
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND sql LIKE '%doc BLOB NOT NULL, side BLOB%'",
      )
      .all() as { name: string }[];
    for (const { name } of tables) {
      const sideIndexes = db
        .prepare("SELECT name, sql FROM sqlite_schema WHERE type = 'index' AND tbl_name = ?")
        .all(`${name}_side`) as { name: string; sql: string | null }[];
      db.exec(
        `UPDATE "${name}" SET side = (SELECT side FROM "${name}_side" AS s WHERE s.id = "${name}".id)`,
      );
      db.exec(`DROP TABLE "${name}_side"`);
      for (const index of sideIndexes) {
        if (index.sql) db.exec(index.sql.replace(`ON "${name}_side"`, `ON "${name}"`));
      }
    }
    for (const { name } of tables) {
      const all = db
        .prepare(
          `SELECT rowid AS row, json(doc) AS doc, json(side) AS side FROM "${name}" ORDER BY rowid`,
        )
        .all() as {
        row: number;
        doc: string;
        side: string | null;
      }[];
      const rewrite = db.prepare(
        `UPDATE "${name}" SET doc = jsonb(?), side = jsonb(?) WHERE rowid = ?`,
      );
      all.forEach(({ row, doc, side }, index) => {
        if (!rows(name, index)) return;
        const old = (json: string) => JSON.stringify(oldFormat(decodeDocument<Document>(json)));
        rewrite.run(old(doc), side === null ? null : old(side), row);
      });
    }
    db.exec("PRAGMA user_version = 0");
  } finally {
    db.close();
  }
}

function oldFormat(value: unknown): unknown {
  if (value instanceof Date) return `\u0001D${value.toISOString()}`;
  if (typeof value === "string") return value.startsWith("\u0001") ? `\u0001S${value}` : value;
  if (Array.isArray(value)) return value.map(oldFormat);
  if (typeof value === "object" && value !== null) {
    return Object.fromEntries(Object.entries(value).map(([key, child]) => [key, oldFormat(child)]));
  }
  return value;
}

/** Where the customers' side fields are: document rows still holding any, side rows, the outbox index's table. */
function sideFieldsOf(file: string) {
  const db = new DatabaseSync(file, { readOnly: true });
  try {
    const count = (sql: string) => (db.prepare(sql).get() as { n: number }).n;
    const outboxIndex = db
      .prepare("SELECT tbl_name FROM sqlite_schema WHERE name = 'customers_outboxPending_1'")
      .get() as { tbl_name: string };
    return {
      leftInDocumentRows: count(
        "SELECT count(*) AS n FROM customers WHERE side IS NOT NULL AND side != jsonb('{}')",
      ),
      sideRows: count("SELECT count(*) AS n FROM customers_side"),
      outboxIndexOn: outboxIndex.tbl_name,
    };
  } finally {
    db.close();
  }
}

function storedFormatOf(file: string): number {
  const db = new DatabaseSync(file, { readOnly: true });
  try {
    return (db.prepare("PRAGMA user_version").get() as { user_version: number }).user_version;
  } finally {
    db.close();
  }
}

function upgradedRowsOf(store: Store): number {
  if (store.engine !== "embedded" || store.role !== "writer")
    throw new Error("not the embedded writer");
  return store.upgradedRows;
}

/** A store with deliveries due before and after `now`, and a customer holding look-alike strings. */
async function seededStore(): Promise<{ dataDir: string; file: string }> {
  const dataDir = mkdtempSync(join(tmpdir(), "referrals-format-"));
  const store = await openStore({ dataDir });
  try {
    await store.system.deliveries.insertOne(
      delivery("whd_due", new Date(now.getTime() - hours), new Date(now.getTime() - 3 * hours)),
    );
    await store.system.deliveries.insertOne(
      delivery(
        "whd_later",
        new Date(now.getTime() + 24 * hours),
        new Date(now.getTime() - 2 * hours),
      ),
    );
    await store.system.deliveries.insertOne(
      delivery("whd_done", null, new Date(now.getTime() - hours)),
    );
    await store.system.customers.insertOne({
      _id: "cus_1",
      organizationId: "org_1",
      applicationId: "app_1",
      environment: "production",
      externalUserId: "u1",
      referralCode: "CODE1",
      email: null,
      emailNormalized: null,
      emailCanonical: null,
      name: "n",
      customProperties: { ...tricky, nested: [{ at: "x", list: [tricky.oldEscape] }] },
      deletedAt: null,
      createdAt: now,
      updatedAt: now,
      // An event the relay has not taken yet: it must still be found and relayed after the upgrade.
      outbox: [{ id: "evt_1", type: "customer.created", occurredAt: now }],
      outboxPending: true,
    } as never);
  } finally {
    await store.close();
  }
  return { dataDir, file: join(dataDir, embeddedDatabaseFile) };
}

/** What a start on the store reads: the due deliveries, every delivery's dates in order, the customer. */
async function readBack(dataDir: string) {
  const store = await openStore({ dataDir });
  try {
    const due = await store.system.deliveries
      .find({ status: "pending", nextAttemptAt: { $lte: now } })
      .toArray();
    const newest = await store.system.deliveries
      .find(
        { createdAt: { $gt: new Date(now.getTime() - 2.5 * hours) } },
        { sort: { createdAt: -1 } },
      )
      .toArray();
    const customer = await store.system.customers.findOne({ _id: "cus_1" });
    const waiting = await store.system.customers.find({ outboxPending: true }).toArray();
    return {
      outboxes: waiting.map((doc) => [doc._id, doc.outbox]),
      upgradedRows: upgradedRowsOf(store),
      due: due.map((doc) => doc._id),
      newest: newest.map((doc) => doc._id),
      customerProperties: customer?.customProperties,
      customerCreatedAt: customer?.createdAt,
    };
  } finally {
    await store.close();
  }
}

test("a store written in the first format is upgraded at start: documents read back the same, due dates compare in time order again, and side fields move to their table", async (t) => {
  const { dataDir, file } = await seededStore();
  try {
    const expected = {
      outboxes: [["cus_1", [{ id: "evt_1", type: "customer.created", occurredAt: now }]]],
      due: ["whd_due"],
      newest: ["whd_done", "whd_later"],
      customerProperties: { ...tricky, nested: [{ at: "x", list: [tricky.oldEscape] }] },
      customerCreatedAt: now,
    };
    t.like(
      await readBack(dataDir),
      { ...expected, upgradedRows: 0 },
      "a new store is in the current format",
    );
    t.is(storedFormatOf(file), storedFormat);

    writeInOldFormat(file);
    const upgraded = await readBack(dataDir);
    t.deepEqual(upgraded, { ...expected, upgradedRows: upgraded.upgradedRows });
    // Every row holds a date, and the upgrade skips tables' rows without the old tag: all of these have one.
    t.true(upgraded.upgradedRows >= 4, `rows upgraded: ${upgraded.upgradedRows}`);
    t.is(storedFormatOf(file), storedFormat);
    t.deepEqual(sideFieldsOf(file), {
      leftInDocumentRows: 0,
      sideRows: 1,
      outboxIndexOn: "customers_side",
    });
    t.like(
      await readBack(dataDir),
      { ...expected, upgradedRows: 0 },
      "the next start upgrades nothing",
    );
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test("an upgrade stopped part-way goes on at the next start, whichever rows it had written", async (t) => {
  const { dataDir, file } = await seededStore();
  try {
    // As if the upgrade had committed some batches: every other row is old.
    writeInOldFormat(file, (_table, index) => index % 2 === 0);
    const upgraded = await readBack(dataDir);
    t.deepEqual(upgraded.due, ["whd_due"]);
    t.deepEqual(upgraded.outboxes, [
      ["cus_1", [{ id: "evt_1", type: "customer.created", occurredAt: now }]],
    ]);
    t.deepEqual(upgraded.newest, ["whd_done", "whd_later"]);
    t.deepEqual(upgraded.customerProperties, {
      ...tricky,
      nested: [{ at: "x", list: [tricky.oldEscape] }],
    });
    t.deepEqual(upgraded.customerCreatedAt, now);
    t.is(storedFormatOf(file), storedFormat);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test("a store written by a later format is refused with its file named, not misread", async (t) => {
  const { dataDir, file } = await seededStore();
  try {
    const db = new DatabaseSync(file);
    db.exec(`PRAGMA user_version = ${storedFormat + 1}`);
    db.close();
    const error = await t.throwsAsync(() => openStore({ dataDir }));
    t.regex(error?.message ?? "", /was written by a later version of the service/);
    t.true(error?.message.includes(file));
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test("a store of format 2 keeps its totals: the triggers that kept them go at start, and each later write counts once", async (t) => {
  const { dataDir, file } = await seededStore();
  try {
    // Format 2 kept each total by triggers; one as it was, counting every insert.
    const db = new DatabaseSync(file);
    try {
      db.exec(
        `CREATE TRIGGER "customers_applicationId_null_deletedAt_insert" AFTER INSERT ON "customers" BEGIN ` +
          `INSERT INTO counters (name, key, n) SELECT 'customers|applicationId|null:deletedAt', ` +
          `json_array(json_extract(NEW.doc, '$.applicationId')), 1 ` +
          `WHERE json_extract(NEW.doc, '$.deletedAt') IS NULL ` +
          `ON CONFLICT (name, key) DO UPDATE SET n = n + excluded.n; END`,
      );
      db.exec("PRAGMA user_version = 2");
    } finally {
      db.close();
    }
    const store = await openStore({ dataDir });
    try {
      const live = { applicationId: "app_1", deletedAt: null };
      t.is(await store.system.customers.countDocuments(live), 1);
      await store.system.customers.insertOne({
        _id: "cus_2",
        organizationId: "org_1",
        applicationId: "app_1",
        environment: "production",
        externalUserId: "u2",
        referralCode: "CODE2",
        deletedAt: null,
        createdAt: now,
        updatedAt: now,
      } as never);
      t.is(await store.system.customers.countDocuments(live), 2, "counted once, not twice");
    } finally {
      await store.close();
    }
    t.is(storedFormatOf(file), storedFormat);
    const after = new DatabaseSync(file, { readOnly: true });
    try {
      t.deepEqual(
        after
          .prepare(
            "SELECT name FROM sqlite_schema WHERE type = 'trigger' AND sql LIKE '%counters%'",
          )
          .all(),
        [],
      );
    } finally {
      after.close();
    }
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});
