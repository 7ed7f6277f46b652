import type { DatabaseSync } from "node:sqlite";
import { StoreOpenError } from "../errors.js";
import { reencodeColumn, sideTableOf, sideTableSchema } from "./sqlite-query.js";

/**
 * The format of the documents in an embedded database, kept in SQLite's
 * `user_version`: 0 for stores written before dates took their compact form
 * (see `encodeDate`), 1 with it, 2 with side fields in side tables of their
 * own (see `sideTableOf`), 3 with the kept totals moved by the writes
 * themselves rather than by triggers (see `SqliteCounters`): a version of
 * format 2 would find the totals without their triggers and let them drift,
 * so it refuses the file.
 */
export const storedFormat = 3;

/** Rows rewritten per transaction: the upgrade of a large store commits as it goes. */
const rowsPerCommit = 2_000;

/** How the old format's dates start in a document's JSON (U+0001 is escaped there): `\u0001D`. */
const legacyDateInJson = Buffer.from("\\u0001D");

/**
 * Brings an embedded database to this version's format before anything
 * reads it: the documents' dates are written again in the compact form,
 * and their side fields moved to the side tables. A date's order is the
 * order of its stored text, and the old text sorts below every new one, so
 * an index or a comparison mixing the two would put a reward's approval or
 * a delivery's retry due before its time: every stored row is upgraded
 * before the service serves. Each batch commits on its own (the WAL stays
 * small, progress survives a stop); the version is written after the last,
 * and a start interrupted before it goes on where the last committed batch
 * ended (rows already written again no longer hold the old dates, and
 * either format's values read back the same). A store written by a later
 * format is refused rather than misread. Returns the rows written again.
 */
export function upgradeStoredFormat(db: DatabaseSync, file: string): number {
  const { user_version: found } = db.prepare("PRAGMA user_version").get() as {
    user_version: number;
  };
  if (found === storedFormat) return 0;
  if (found > storedFormat) {
    throw new StoreOpenError(
      `${file} was written by a later version of the service (stored format ${found}, ` +
        `this version reads ${storedFormat} and earlier); run that version, or restore a backup`,
    );
  }
  let upgraded = 0;
  for (const table of documentTables(db)) {
    if (found < 1) upgraded += upgradeDates(db, table);
    if (found < 2) upgraded += moveSideFields(db, table);
  }
  dropCounterTriggers(db);
  db.exec(`PRAGMA user_version = ${storedFormat}`);
  return upgraded;
}

/** The tables holding documents: every collection's `(id, doc, side)`. */
function documentTables(db: DatabaseSync): string[] {
  const rows = db
    .prepare(
      "SELECT name FROM sqlite_schema WHERE type = 'table' AND sql LIKE '%(id TEXT PRIMARY KEY NOT NULL, doc BLOB NOT NULL, side BLOB)%'",
    )
    .all() as { name: string }[];
  return rows.map((row) => row.name);
}

function upgradeDates(db: DatabaseSync, table: string): number {
  const pending = db.prepare(
    `SELECT rowid AS row, json(doc) AS doc, json(side) AS side FROM "${table}" ` +
      "WHERE rowid > ? AND (instr(doc, ?) > 0 OR instr(side, ?) > 0) ORDER BY rowid LIMIT ?",
  );
  const rewrite = db.prepare(
    `UPDATE "${table}" SET doc = jsonb(?), side = jsonb(?) WHERE rowid = ?`,
  );
  let after = 0;
  let upgraded = 0;
  for (;;) {
    const rows = pending.all(after, legacyDateInJson, legacyDateInJson, rowsPerCommit) as {
      row: number;
      doc: string;
      side: string | null;
    }[];
    if (rows.length === 0) return upgraded;
    db.exec("BEGIN IMMEDIATE");
    try {
      for (const { row, doc, side } of rows) {
        rewrite.run(reencodeColumn(doc), side === null ? null : reencodeColumn(side), row);
      }
      db.exec("COMMIT");
    } catch (error) {
      db.exec("ROLLBACK");
      throw error;
    }
    upgraded += rows.length;
    after = rows[rows.length - 1]?.row ?? after;
  }
}

/**
 * Format 2: the side fields a document still holds (events its outbox has
 * not relayed, grants or reversals under way) move to the side table, and
 * the indexes of side fields go with them (dropped here, made on the side
 * table by `ensureIndexes` as the service starts). The document's own
 * `side` column is emptied where it held anything, so no copy of an
 * outbox's data stays behind; an empty one (`{}`) is left as it is.
 */
function moveSideFields(db: DatabaseSync, table: string): number {
  const side = sideTableOf(table);
  db.exec("BEGIN IMMEDIATE");
  try {
    db.exec(sideTableSchema(table));
    const sideIndexes = db
      .prepare(
        "SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = ? AND sql LIKE '%json_extract(side,%'",
      )
      .all(table) as { name: string }[];
    for (const { name } of sideIndexes) db.exec(`DROP INDEX "${name}"`);
    const moved = db
      .prepare(
        `INSERT INTO "${side}" (id, side) SELECT id, side FROM "${table}" ` +
          "WHERE side IS NOT NULL AND side != jsonb('{}') " +
          "ON CONFLICT (id) DO UPDATE SET side = excluded.side",
      )
      .run();
    db.exec(`UPDATE "${table}" SET side = NULL WHERE side IS NOT NULL AND side != jsonb('{}')`);
    db.exec("COMMIT");
    return Number(moved.changes);
  } catch (error) {
    db.exec("ROLLBACK");
    throw error;
  }
}

/**
 * Format 3: the triggers that kept the totals (`counters`) go; the writes
 * keep them from now on, in the same transaction, and the totals kept so
 * far stay as they are.
 */
function dropCounterTriggers(db: DatabaseSync): void {
  const triggers = db
    .prepare("SELECT name FROM sqlite_schema WHERE type = 'trigger' AND sql LIKE '%counters%'")
    .all() as { name: string }[];
  if (triggers.length === 0) return;
  db.exec("BEGIN IMMEDIATE");
  try {
    for (const { name } of triggers) db.exec(`DROP TRIGGER "${name.replaceAll('"', '""')}"`);
    db.exec("COMMIT");
  } catch (error) {
    db.exec("ROLLBACK");
    throw error;
  }
}
