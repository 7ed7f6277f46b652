import { existsSync, readFileSync, renameSync } from "node:fs";
import { join } from "node:path";
import type { Document } from "mongodb";
import type { SqliteCollection, SqliteDatabase } from "./sqlite.js";

/** What an import of the previous engine's files moved, per collection. */
export interface ImportReport {
  /** Documents imported, per collection. */
  readonly counts: Readonly<Record<string, number>>;
  /** The files read, now renamed with {@link importedSuffix}. */
  readonly files: readonly string[];
}

/** Appended to each imported file's name; the file is kept, not deleted. */
export const importedSuffix = ".imported";

/**
 * Imports a data directory written by the previous embedded engine (nedb:
 * one `<collection>.db` file of JSON lines per collection) into SQLite, so
 * an upgrade loses nothing. All collections are imported in one transaction
 * together with a marker row; only then are the files renamed, so a crash at
 * any point either re-runs the whole import or only finishes the renaming.
 * A line that does not parse stops the start with its file and line number:
 * nothing is dropped silently.
 */
export function importNedbDirectory(
  dataDir: string,
  database: SqliteDatabase,
  collections: Readonly<Record<string, SqliteCollection<Document>>>,
): ImportReport | undefined {
  const files = Object.keys(collections)
    .map((name) => ({ name, path: join(dataDir, `${name}.db`) }))
    .filter(({ path }) => existsSync(path));
  if (files.length === 0) return undefined;

  database.exec("CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY NOT NULL) STRICT");
  const done = database.statement("SELECT name FROM migrations WHERE name = 'nedb-import'").get();
  const counts: Record<string, number> = {};
  if (!done) {
    database.transaction(() => {
      for (const { name, path } of files) {
        counts[name] = (collections[name] as SqliteCollection<Document>).insertImported(
          readNedbFile(path),
        );
      }
      database.statement("INSERT INTO migrations (name) VALUES ('nedb-import')").run();
    });
  }
  for (const { path } of files) renameSync(path, path + importedSuffix);
  return { counts, files: files.map(({ path }) => path) };
}

/**
 * The live documents of one nedb file. The file is a log: a later line for
 * an `_id` replaces the earlier one, `$$deleted` removes it, index lines
 * carry no data, and dates are `{ "$$date": milliseconds }`.
 */
export function readNedbFile(path: string): Document[] {
  const docs = new Map<string, Document>();
  const lines = readFileSync(path, "utf8").split("\n");
  lines.forEach((line, index) => {
    if (line.trim() === "") return;
    let doc: Document;
    try {
      doc = JSON.parse(line, (_key, value) =>
        isNedbDate(value) ? new Date(value.$$date) : value,
      ) as Document;
    } catch (error) {
      throw new Error(
        `${path}:${index + 1} is not a JSON document (${(error as Error).message}); ` +
          "nothing was imported",
      );
    }
    if ("$$indexCreated" in doc || "$$indexRemoved" in doc) return;
    if (typeof doc._id !== "string") {
      throw new Error(`${path}:${index + 1} has no _id; nothing was imported`);
    }
    if (doc.$$deleted === true) docs.delete(doc._id);
    else docs.set(doc._id, doc);
  });
  return [...docs.values()];
}

function isNedbDate(value: unknown): value is { $$date: number } {
  return (
    typeof value === "object" &&
    value !== null &&
    Object.keys(value).length === 1 &&
    typeof (value as { $$date?: unknown }).$$date === "number"
  );
}
