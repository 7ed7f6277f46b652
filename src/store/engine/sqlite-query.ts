import type { SQLInputValue } from "node:sqlite";
import type { Document, Sort } from "mongodb";

/**
 * The translation of the MongoDB query language the repositories use into
 * SQL over tables of JSON documents (`id TEXT PRIMARY KEY, doc BLOB` in
 * SQLite's JSONB form, with a side table for {@link sideFields}), and the
 * document encoding that keeps BSON's types apart inside JSON.
 *
 * Every field is read through one expression, `json_extract(doc, '$.path')`,
 * written by {@link fieldExpression} for queries and indexes alike: SQLite
 * uses an expression index only when the query names the same expression.
 */

/** A filter or sort this engine does not translate; a programming error, never user input. */
export class UnsupportedQueryError extends Error {
  constructor(message: string) {
    super(`the embedded engine does not support ${message}`);
    this.name = "UnsupportedQueryError";
  }
}

const pathSegment = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * Fields kept beside the document, in a side table of their own (see
 * `sideTableOf`): the webhook outbox, which the relay empties soon after
 * nearly every write, and the reward ledger's flags and plans, set by a
 * write and removed right after it. A change to them alone rewrites neither
 * the document nor its indexes, and removing them does not even read the
 * document. A condition on one is answered from the side table (see
 * `sideCondition`).
 */
const sideFields: ReadonlySet<string> = new Set([
  "outbox",
  "outboxPending",
  "grantPlan",
  "grantPlanPending",
  "reversalPending",
  "releasePending",
]);

/**
 * The side fields an update only removes (`{ $unset: { outbox: "", ... } }`
 * naming whole side fields), or undefined for any other update: those the
 * engine applies in SQL, without reading the document.
 */
export function sideFieldsRemoved(update: Document): string[] | undefined {
  const keys = Object.keys(update);
  if (keys.length !== 1 || keys[0] !== "$unset") return undefined;
  const fields = Object.keys(update.$unset as Document);
  return fields.length > 0 && fields.every((field) => sideFields.has(field)) ? fields : undefined;
}

/**
 * The table holding a collection's side fields: one row per document that
 * has any, removed with the last of them. Apart from the document's row,
 * which the outbox would otherwise grow at its insert and leave with a
 * hole when the relay empties it (a third of the customers table was
 * such holes), and small enough to stay in memory.
 */
export function sideTableOf(table: string): string {
  return `${table}_side`;
}

/** The side table of a collection's table, and the trigger that removes a document's side row with it. */
export function sideTableSchema(table: string): string {
  const side = sideTableOf(table);
  return (
    `CREATE TABLE IF NOT EXISTS "${side}" (id TEXT PRIMARY KEY NOT NULL, side BLOB NOT NULL) WITHOUT ROWID, STRICT;` +
    `CREATE TRIGGER IF NOT EXISTS "${side}_delete" AFTER DELETE ON "${table}" BEGIN DELETE FROM "${side}" WHERE id = OLD.id; END`
  );
}

/** Whether a field path lies in the side table (see {@link sideFields}). */
export function isSidePath(path: string): boolean {
  const dot = path.indexOf(".");
  return sideFields.has(dot === -1 ? path : path.slice(0, dot));
}

/** The column that holds a field: `doc`, or the side table's `side` for {@link sideFields}. */
function columnOf(path: string): "doc" | "side" {
  return isSidePath(path) ? "side" : "doc";
}

/** The SQL expression of a document field (`_id` is the primary key column). */
export function fieldExpression(path: string): string {
  if (path === "_id") return "id";
  return `json_extract(${columnOf(path)}, '${jsonPath(path)}')`;
}

/** A document's fields as the JSON of its row and of its side row; `side` is null when it has none. */
export function encodeColumns(fields: Document): { doc: string; side: string | null } {
  // One walk copies each value into its column's object (then a plain
  // stringify, several times faster than a replacer).
  const main: Document = {};
  let side: Document | undefined;
  for (const [key, value] of Object.entries(fields)) {
    if (value === undefined) continue;
    if (sideFields.has(key)) {
      side ??= {};
      side[key] = storable(value);
    } else {
      setOwn(main, key, storable(value));
    }
  }
  return { doc: JSON.stringify(main), side: side ? JSON.stringify(side) : null };
}

function jsonPath(path: string): string {
  const segments = path.split(".");
  for (const segment of segments) {
    // Paths come from repository code, not from requests; refusing anything
    // unusual keeps quoting out of the SQL entirely.
    if (!pathSegment.test(segment)) throw new UnsupportedQueryError(`the field path "${path}"`);
  }
  return `$.${path}`;
}

// Dates and strings are both strings in JSON. A date is stored as a tagged
// string of fixed width that sorts in time order (see `encodeDate`); a
// caller's string that starts with the tag is escaped, so nothing a caller
// sends can read back as a date.
//
// Stores written before format 1 (see `upgradeStoredFormat`) tagged a date
// as U+0001, 'D' and its ISO 8601 text, and escaped with U+0001 'S', as
// this format still does: the second character tells every form apart (a
// date's is a base-36 digit, '#' or '~'), so a value reads back the same
// whichever format wrote it, and an upgrade stopped part-way is safe.
const tag = "\u0001";
const escapedTag = "\u0001S";
const legacyDateTag = "\u0001D";

// Milliseconds from the year 1 (proto's Timestamp starts there), so every
// date a caller or the service can make is a positive number of ten base-36
// digits (to about the year 113,000): eleven characters where the ISO text
// took twenty-five. Dates outside that span (a query's open bound at the
// limits of `Date`) take a longer form that still sorts below or above them.
const yearOneMs = 62_135_596_800_000;
const dateDigits = 10;
const dateSpanMs = 36 ** dateDigits;
const widest = 11; // 36 ** 11 exceeds every Date's milliseconds
const beforeYearOne = "#"; // sorts before the digits
const afterSpan = "~"; // sorts after them
const maxDateMs = 8.64e15;

/** A date as the fixed-width text stored for it (`Date`'s own range; an invalid date throws, as `toISOString` does). */
export function encodeDate(date: Date): string {
  const ms = date.getTime();
  if (Number.isNaN(ms)) throw new RangeError("Invalid time value");
  const fromYearOne = ms + yearOneMs;
  if (fromYearOne < 0) {
    return tag + beforeYearOne + (ms + maxDateMs).toString(36).padStart(widest, "0");
  }
  if (fromYearOne >= dateSpanMs) return tag + afterSpan + ms.toString(36).padStart(widest, "0");
  return tag + fromYearOne.toString(36).padStart(dateDigits, "0");
}

/** A tagged value back: a date in either format's form, or an escaped string. */
function decodeTagged(stored: string): Date | string {
  const form = stored[1];
  if (form === "S") return stored.slice(escapedTag.length);
  if (form === "D") return new Date(stored.slice(legacyDateTag.length));
  if (form === beforeYearOne) return new Date(Number.parseInt(stored.slice(2), 36) - maxDateMs);
  if (form === afterSpan) return new Date(Number.parseInt(stored.slice(2), 36));
  return new Date(Number.parseInt(stored.slice(1), 36) - yearOneMs);
}

/** A value as it is stored inside a document and compared in SQL. */
export function encodeScalar(value: unknown): SQLInputValue {
  if (value instanceof Date) return encodeDate(value);
  if (typeof value === "string") return value.startsWith(tag) ? escapedTag + value : value;
  if (typeof value === "boolean") return value ? 1 : 0; // json_extract reads true as 1
  if (typeof value === "number") return value;
  throw new UnsupportedQueryError(`comparing with ${describe(value)}`);
}

/** A document from its JSON text, with dates as `Date`s again. */
export function decodeDocument<T>(json: string): T {
  return revive(JSON.parse(json)) as T;
}

/** A value as SQL or a JSON array read it out of a document, with dates as `Date`s again. */
export function decodeValue(value: unknown): unknown {
  return revive(value);
}

function storable(value: unknown): unknown {
  if (typeof value === "string") return value.startsWith(tag) ? escapedTag + value : value;
  if (typeof value !== "object" || value === null) return value;
  if (value instanceof Date) return encodeDate(value);
  if (Array.isArray(value)) return value.map(storable);
  const out: Document = {};
  for (const [key, child] of Object.entries(value)) {
    if (child !== undefined) setOwn(out, key, storable(child));
  }
  return out;
}

/** Turns tagged strings back into dates and strings, in place (the object is JSON.parse's). */
function revive(value: unknown): unknown {
  if (typeof value === "string") return value.startsWith(tag) ? decodeTagged(value) : value;
  if (typeof value !== "object" || value === null) return value;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) value[i] = revive(value[i]);
    return value;
  }
  const object = value as Document;
  // for-in allocates nothing per object (JSON.parse's objects have no
  // inherited enumerable keys), unlike Object.entries.
  for (const key in object) {
    // An own "__proto__" key (JSON.parse makes one) shadows the accessor.
    const child = object[key];
    if (
      (typeof child === "object" && child !== null) ||
      (typeof child === "string" && child.charCodeAt(0) === 1)
    ) {
      setOwn(object, key, revive(child));
    }
  }
  return object;
}

/**
 * A column's JSON text written again in this format: the old format's
 * dates and escapes read back, then stored as new ones (see
 * `upgradeStoredFormat`).
 */
export function reencodeColumn(json: string): string {
  return JSON.stringify(storable(revive(JSON.parse(json))));
}

/** Sets an own property, even one named `__proto__` (plain assignment would set the prototype). */
function setOwn(target: Document, key: string, value: unknown): void {
  if (key === "__proto__") {
    Object.defineProperty(target, key, {
      value,
      enumerable: true,
      writable: true,
      configurable: true,
    });
  } else {
    target[key] = value;
  }
}

/** A WHERE clause and its parameters. */
export interface SqlCondition {
  readonly sql: string;
  readonly params: SQLInputValue[];
}

/**
 * Translates a filter. MongoDB's semantics are kept where naive SQL would
 * differ: `{ field: null }` also matches a missing field, `$ne` matches
 * missing fields, `$size` matches arrays only. Anything else is refused
 * loudly rather than answered differently.
 */
export function compileFilter(filter: Document, table?: string): SqlCondition {
  const clauses: string[] = [];
  const params: SQLInputValue[] = [];
  // One document (by id): its side row is looked up by its id; any other
  // filter reads the side table's matches, through its own index.
  const oneDocument = filter._id !== undefined && !isOperatorObject(filter._id);
  for (const [key, condition] of Object.entries(filter)) {
    if (condition === undefined) continue;
    if (key === "$and" || key === "$or") {
      const parts = (condition as Document[]).map((part) => compileFilter(part, table));
      if (parts.length === 0) throw new UnsupportedQueryError(`an empty ${key}`);
      clauses.push(`(${parts.map((part) => part.sql).join(key === "$and" ? " AND " : " OR ")})`);
      for (const part of parts) params.push(...part.params);
      continue;
    }
    if (key.startsWith("$")) throw new UnsupportedQueryError(`the operator ${key}`);
    const expression = fieldExpression(key);
    if (isSidePath(key)) {
      if (table === undefined) throw new UnsupportedQueryError(`the side field ${key} here`);
      const operators = isOperatorObject(condition)
        ? Object.entries(condition)
        : [["$eq", condition]];
      for (const [operator, operand] of operators) {
        const clause = compileOperator(key, expression, operator as string, operand, params);
        const meetsMissing = matchesMissing(operator as string, operand);
        clauses.push(sideCondition(table, clause, meetsMissing, oneDocument));
      }
      continue;
    }
    if (isOperatorObject(condition)) {
      for (const [operator, operand] of Object.entries(condition)) {
        clauses.push(compileOperator(key, expression, operator, operand, params));
      }
    } else {
      clauses.push(equality(expression, condition, params));
    }
  }
  return { sql: clauses.length > 0 ? clauses.join(" AND ") : "1", params };
}

function compileOperator(
  path: string,
  expression: string,
  operator: string,
  operand: unknown,
  params: SQLInputValue[],
): string {
  switch (operator) {
    case "$eq":
      return equality(expression, operand, params);
    case "$ne":
      if (operand === null) return `${expression} IS NOT NULL`;
      params.push(encodeScalar(operand));
      return `(${expression} IS NULL OR ${expression} != ?)`;
    case "$gt":
    case "$gte":
    case "$lt":
    case "$lte": {
      params.push(encodeScalar(operand));
      const sign = { $gt: ">", $gte: ">=", $lt: "<", $lte: "<=" }[operator];
      return `${expression} ${sign} ?`;
    }
    case "$in":
    case "$nin": {
      if (!Array.isArray(operand)) throw new UnsupportedQueryError(`${operator} without an array`);
      const values = operand.filter((value) => value !== null);
      const matchesNull = values.length < operand.length;
      for (const value of values) params.push(encodeScalar(value));
      const list = `${expression} IN (${values.map(() => "?").join(", ")})`;
      const inList = values.length === 0 ? "0" : list;
      const positive = matchesNull ? `(${expression} IS NULL OR ${inList})` : inList;
      return operator === "$in" ? positive : `NOT ${positive}`;
    }
    case "$exists": {
      if (path === "_id") return operand ? "1" : "0";
      const type = `json_type(${columnOf(path)}, '${jsonPath(path)}')`;
      return operand ? `${type} IS NOT NULL` : `${type} IS NULL`;
    }
    case "$size": {
      params.push(encodeScalar(operand));
      const at = `${columnOf(path)}, '${jsonPath(path)}'`;
      return `(json_type(${at}) = 'array' AND json_array_length(${at}) = ?)`;
    }
    default:
      throw new UnsupportedQueryError(`the operator ${operator}`);
  }
}

/**
 * A condition on a side field, over the side table (see `sideTableOf`):
 * the documents whose side row matches, or, for a condition a missing field
 * meets (`null`, `$ne`, `$exists: false`), those without a side row that
 * fails it.
 */
function sideCondition(
  table: string,
  clause: string,
  meetsMissing: boolean,
  oneDocument: boolean,
): string {
  const side = sideTableOf(table);
  if (oneDocument) {
    // The side row's value of the clause, or, without a side row, whether
    // a missing field meets it. A scalar subquery: SQLite plans an EXISTS
    // here as a join, which cost 13 µs a statement against 1 µs.
    return `coalesce((SELECT coalesce(${clause}, 0) FROM "${side}" AS s WHERE s.id = "${table}".id), ${meetsMissing ? 1 : 0})`;
  }
  return meetsMissing
    ? `id NOT IN (SELECT id FROM "${side}" WHERE NOT coalesce(${clause}, 0))`
    : `id IN (SELECT id FROM "${side}" WHERE ${clause})`;
}

/** Whether an operator matches a document without the field, as MongoDB's do. */
function matchesMissing(operator: string, operand: unknown): boolean {
  switch (operator) {
    case "$eq":
      return operand === null;
    case "$ne":
      return operand !== null;
    case "$in":
      return Array.isArray(operand) && operand.includes(null);
    case "$nin":
      return Array.isArray(operand) && !operand.includes(null);
    case "$exists":
      return !operand;
    default:
      return false;
  }
}

function equality(expression: string, value: unknown, params: SQLInputValue[]): string {
  if (value === null) return `${expression} IS NULL`;
  params.push(encodeScalar(value));
  return `${expression} = ?`;
}

/** True for `{ $op: ... }`; a date or a plain value is not one. */
export function isOperatorObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== "object" || value === null || value instanceof Date) return false;
  if (Array.isArray(value)) throw new UnsupportedQueryError("matching a whole array");
  const keys = Object.keys(value);
  if (keys.length > 0 && keys.every((key) => key.startsWith("$"))) return true;
  throw new UnsupportedQueryError("matching a whole embedded document");
}

/** An ORDER BY clause, or "" without a sort. */
export function compileSort(sort: Sort | undefined): string {
  if (sort === undefined) return "";
  if (typeof sort !== "object" || Array.isArray(sort) || sort instanceof Map) {
    throw new UnsupportedQueryError("a sort that is not an object of directions");
  }
  const terms = Object.entries(sort as Record<string, unknown>).map(([path, direction]) => {
    if (direction !== 1 && direction !== -1) {
      throw new UnsupportedQueryError(`the sort direction ${String(direction)}`);
    }
    if (isSidePath(path)) throw new UnsupportedQueryError(`sorting by the side field ${path}`);
    return `${fieldExpression(path)} ${direction === 1 ? "ASC" : "DESC"}`;
  });
  return terms.length > 0 ? ` ORDER BY ${terms.join(", ")}` : "";
}

/** The top-level `field: value` equalities of a filter: the base of an upserted document. */
export function equalityFields(filter: Document): Document {
  const out: Document = {};
  for (const [key, condition] of Object.entries(filter)) {
    if (key.startsWith("$") || condition === undefined) continue;
    let value: unknown = condition;
    if (isOperatorObject(condition)) {
      if (!("$eq" in condition)) continue;
      value = condition.$eq;
    }
    setPath(out, key, value);
  }
  return out;
}

/** Keeps the fields an inclusion projection names (and `_id` unless excluded). */
export function project<T extends Document>(doc: T, projection: Document | undefined): T {
  if (projection === undefined) return doc;
  const out: Document = {};
  const entries = Object.entries(projection);
  if (entries.some(([key, include]) => key !== "_id" && !include)) {
    throw new UnsupportedQueryError("exclusion projections");
  }
  if (projection._id !== 0 && projection._id !== false) out._id = doc._id;
  for (const [path, include] of entries) {
    if (path === "_id" || !include) continue;
    const value = getPath(doc, path);
    if (value !== undefined) setPath(out, path, value);
  }
  return out as T;
}

function getPath(doc: Document, path: string): unknown {
  let value: unknown = doc;
  for (const key of path.split(".")) {
    if (typeof value !== "object" || value === null) return undefined;
    value = (value as Document)[key];
  }
  return value;
}

function setPath(doc: Document, path: string, value: unknown): void {
  const keys = path.split(".");
  const last = keys.pop() as string;
  let target = doc;
  for (const key of keys) {
    target[key] ??= {};
    target = target[key] as Document;
  }
  target[last] = value;
}

function describe(value: unknown): string {
  if (value === undefined) return "undefined";
  if (Array.isArray(value)) return "an array";
  return typeof value === "object" ? "an embedded document" : typeof value;
}
