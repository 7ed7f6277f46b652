import type { SQLInputValue } from "node:sqlite";
import type { Document } from "mongodb";
import type { CounterDeclaration } from "../indexes.js";
import { GroupedAdditions } from "./grouped-additions.js";
import type { SqliteConnection } from "./sqlite-connection.js";
import {
  compileFilter,
  decodeValue,
  encodeScalar,
  fieldExpression,
  isSidePath,
  UnsupportedQueryError,
} from "./sqlite-query.js";

/**
 * The totals one table keeps per group of documents (see
 * `CounterDeclaration`), and the counts and aggregations they answer; an
 * aggregation that no kept total answers runs as a GROUP BY.
 */
export class SqliteCounters {
  /** The kept totals, with their names and lookup SQL worked out once. */
  private readonly totals: KeptTotal[] = [];
  /** What the writes add to the totals, written once per group (see {@link flush}); the writer's only. */
  private additions: GroupedAdditions<Delta> | undefined;

  constructor(
    private readonly database: SqliteConnection,
    private readonly table: string,
  ) {}

  /**
   * Keeps a total per group of documents, and the declared sums: the
   * table's writes tell what each document adds or takes away (see
   * {@link added}, {@link removed}, {@link moved}), gathered per write and
   * per group and written once per group just before its commit, in its
   * transaction, so they are exact; the first declaration on existing data
   * counts them once.
   */
  keep(counter: CounterDeclaration): void {
    const name = counterName(this.table, counter);
    const sums = counter.sums ?? [];
    for (const path of [...counter.groupBy, ...(counter.nullFields ?? []), ...sums]) {
      if (isSidePath(path))
        throw new Error(`a kept total of ${this.table} by the side field ${path}`);
    }
    // A reader uses the counters its writer keeps.
    if (this.database.writes)
      this.database.transaction(() => {
        const known = this.database
          .statement("SELECT 1 FROM counter_definitions WHERE name = ?")
          .get(name);
        if (known) return;
        const group = counter.groupBy.map((path) => fieldExpression(path)).join(", ");
        const where = (counter.nullFields ?? []).map((path) => `${fieldExpression(path)} IS NULL`);
        const existing = [
          { name, value: "count(*)" },
          ...sums.map((path) => ({
            name: sumCounterName(name, path),
            value: `sum(coalesce(${fieldExpression(path)}, 0))`,
          })),
        ];
        for (const tally of existing) {
          this.database
            .statement(
              `INSERT INTO counters (name, key, n) SELECT ?, json_array(${group}), ${tally.value} ` +
                `FROM "${this.table}" WHERE ${where.join(" AND ") || "1"} GROUP BY ${group}`,
            )
            .run(tally.name);
        }
        this.database.statement("INSERT INTO counter_definitions (name) VALUES (?)").run(name);
      });
    if (this.database.writes && !this.additions) {
      this.additions = new GroupedAdditions(this.database, (deltas) => this.flush(deltas));
    }
    const keys = counter.groupBy.map(() => "?").join(", ");
    this.totals.push({
      declaration: counter,
      name,
      sumNames: sums.map((path) => sumCounterName(name, path)),
      lookup: `SELECT n FROM counters WHERE name = ? AND key = json_array(${keys})`,
    });
  }

  /** Whether the table keeps any total: its writes then say what they move. */
  get kept(): boolean {
    return this.totals.length > 0;
  }

  /**
   * Where a document counts in each kept total: its group's key values as
   * SQL reads them out of the stored document, and its sums; null for a
   * total that does not count it.
   */
  placesOf(doc: Document): (Place | null)[] {
    return this.totals.map(({ declaration }) => {
      for (const path of declaration.nullFields ?? []) {
        if (valueAt(doc, path) != null) return null;
      }
      return {
        values: declaration.groupBy.map((path) => keyValue(valueAt(doc, path))),
        sums: (declaration.sums ?? []).map((path) => sumValue(valueAt(doc, path))),
      };
    });
  }

  /** An inserted document counts in its groups. */
  added(doc: Document): void {
    this.move(null, this.placesOf(doc));
  }

  /** A deleted document counts no more. */
  removed(doc: Document): void {
    this.move(this.placesOf(doc), null);
  }

  /** An updated document leaves the groups it was in (`before`, see {@link placesOf}) for its own. */
  moved(before: readonly (Place | null)[], after: Document): void {
    this.move(before, this.placesOf(after));
  }

  private move(from: readonly (Place | null)[] | null, to: readonly (Place | null)[] | null): void {
    this.totals.forEach((total, index) => {
      const left = from?.[index] ?? null;
      const entered = to?.[index] ?? null;
      if (samePlace(left, entered)) return;
      if (left) this.tally(total, left, -1);
      if (entered) this.tally(total, entered, 1);
    });
  }

  private tally(total: KeptTotal, place: Place, sign: 1 | -1): void {
    this.add(total.name, place.values, sign);
    total.sumNames.forEach((name, index) => {
      this.add(name, place.values, sign * (place.sums[index] ?? 0));
    });
  }

  private add(name: string, values: readonly SQLInputValue[], n: number): void {
    const additions = this.additions;
    if (!additions) return;
    const key = `${name}\u0000${JSON.stringify(values)}`;
    if (!additions.addTo(key, n)) additions.start(key, { name, values, n });
  }

  /** A group's additions, a statement each (one text per key width), before its commit. */
  private flush(deltas: readonly Delta[]): void {
    for (const { name, values, n } of deltas) {
      let sql = this.flushStatements[values.length];
      if (!sql) {
        const keys = values.map(() => "?").join(", ");
        sql =
          `INSERT INTO counters (name, key, n) VALUES (?, json_array(${keys}), ?) ` +
          "ON CONFLICT (name, key) DO UPDATE SET n = n + excluded.n";
        this.flushStatements[values.length] = sql;
      }
      this.database.statement(sql).run(name, ...values, n);
    }
  }

  /** The upsert of {@link flush} per number of key values. */
  private readonly flushStatements: string[] = [];

  /**
   * The one aggregation the repositories run (see `StoreCollection.aggregate`):
   * from kept counters when a declaration matches it, else in SQL.
   */
  aggregate(pipeline: Document[]): Document[] {
    const grouping = groupingOf(pipeline);
    return this.keptGroups(grouping) ?? this.selectGroups(grouping);
  }

  /**
   * The groups an aggregation asks for, read from a kept counter whose
   * groups are the match's equalities then the grouped fields: one range of
   * the counters' primary key per tally, however many documents there are.
   */
  private keptGroups(grouping: Grouping): Document[] | undefined {
    const fields = grouping.match;
    const matched = Object.keys(fields).filter((path) => fields[path] !== undefined);
    const found = this.totals.find(({ declaration }) => {
      const nulls = declaration.nullFields ?? [];
      const equal = matched.filter((path) => !nulls.includes(path));
      return (
        nulls.every((path) => fields[path] === null) &&
        equal.length + nulls.length === matched.length &&
        declaration.groupBy.length === equal.length + grouping.groups.length &&
        declaration.groupBy
          .slice(0, equal.length)
          .every((path) => equal.includes(path) && isScalar(fields[path])) &&
        declaration.groupBy
          .slice(equal.length)
          .every((path, index) => path === grouping.groups[index]?.path) &&
        grouping.tallies.every(
          (tally) => tally.path === null || (declaration.sums ?? []).includes(tally.path),
        )
      );
    });
    if (!found) return undefined;
    const prefixLength = found.declaration.groupBy.length - grouping.groups.length;
    const values = found.declaration.groupBy
      .slice(0, prefixLength)
      .map((path) => encodeScalar(fields[path]));
    const { array } = this.database
      .statement(`SELECT json_array(${values.map(() => "?").join(", ")}) AS array`)
      .get(...values) as { array: string };
    // Every key of the groups starts with the prefix's elements and a comma.
    const from = `${array.slice(0, -1)}${prefixLength > 0 ? "," : ""}`;
    const below = from.slice(0, -1) + String.fromCharCode(from.charCodeAt(from.length - 1) + 1);
    const range = "SELECT key, n FROM counters WHERE name = ? AND key >= ? AND key < ?";
    const read = (name: string) =>
      new Map(
        (this.database.statement(range).all(name, from, below) as { key: string; n: number }[]).map(
          (row) => [row.key, row.n],
        ),
      );
    const counts = read(found.name);
    const sums = new Map(
      grouping.tallies
        .filter((tally) => tally.path !== null)
        .map((tally) => [tally.path, read(sumCounterName(found.name, tally.path as string))]),
    );
    const groups: Document[] = [];
    for (const [key, count] of counts) {
      if (count === 0) continue;
      const elements = (JSON.parse(key) as unknown[]).slice(prefixLength);
      const group: Document = { _id: groupId(grouping, elements) };
      for (const tally of grouping.tallies) {
        group[tally.name] = tally.path === null ? count : (sums.get(tally.path)?.get(key) ?? 0);
      }
      groups.push(group);
    }
    return groups;
  }

  /** The groups an aggregation asks for, by a GROUP BY over the match's index. */
  private selectGroups(grouping: Grouping): Document[] {
    const where = compileFilter(grouping.match);
    const groupBy = grouping.groups.map((group) => fieldExpression(group.path));
    const columns = [
      ...groupBy.map((expression, index) => `${expression} AS g${index}`),
      "count(*) AS n",
      ...grouping.tallies.map((tally, index) =>
        tally.path === null
          ? `count(*) AS t${index}`
          : `sum(coalesce(${fieldExpression(tally.path)}, 0)) AS t${index}`,
      ),
    ];
    const sql =
      `SELECT ${columns.join(", ")} FROM "${this.table}" WHERE ${where.sql}` +
      (groupBy.length > 0 ? ` GROUP BY ${groupBy.join(", ")}` : "");
    this.database.noteQuery(sql, this.table, grouping.match, where.params);
    const rows = this.database.statement(sql).all(...where.params) as Record<string, unknown>[];
    return rows
      .filter((row) => Number(row.n) > 0)
      .map((row) => {
        const group: Document = {
          _id: groupId(
            grouping,
            grouping.groups.map((_, index) => row[`g${index}`]),
          ),
        };
        grouping.tallies.forEach((tally, index) => {
          group[tally.name] = Number(row[`t${index}`]);
        });
        return group;
      });
  }

  /** The kept total a count's filter asks for, if a declared counter matches it exactly. */
  total(fields: Document): number | undefined {
    let size = 0;
    for (const key in fields) if (fields[key] !== undefined) size += 1;
    const counter = this.totals.find(
      ({ declaration }) =>
        size === declaration.groupBy.length + (declaration.nullFields?.length ?? 0) &&
        declaration.groupBy.every((path) => isScalar(fields[path])) &&
        (declaration.nullFields ?? []).every((path) => fields[path] === null),
    );
    if (!counter) return undefined;
    const values = counter.declaration.groupBy.map((path) => encodeScalar(fields[path]));
    const row = this.database.statement(counter.lookup).get(counter.name, ...values) as
      | { n: number }
      | undefined;
    return row?.n ?? 0;
  }
}

/** A counter's name: its collection, groups, conditions and sums. */
function counterName(collection: string, counter: CounterDeclaration): string {
  const nulls = counter.nullFields?.length ? `|null:${counter.nullFields.join(",")}` : "";
  const sums = counter.sums?.length ? `|sums:${counter.sums.join(",")}` : "";
  return `${collection}|${counter.groupBy.join(",")}${nulls}${sums}`;
}

/** The name of the row of `counters` that holds one sum of a counter. */
function sumCounterName(counter: string, path: string): string {
  return `${counter}|sum:${path}`;
}

/** An aggregation of the one supported shape, taken apart. */
interface Grouping {
  readonly match: Document;
  /** The group id's fields: their names in the result, and the paths grouped by. */
  readonly groups: readonly { name: string; path: string }[];
  /** The accumulators: a count (no path) or the sum of a field. */
  readonly tallies: readonly { name: string; path: string | null }[];
}

/** Reads `[{ $match }, { $group }]`; refuses any other pipeline loudly. */
function groupingOf(pipeline: Document[]): Grouping {
  const [matchStage, groupStage, ...rest] = pipeline;
  const only = (stage: Document | undefined, name: string) =>
    stage !== undefined && Object.keys(stage).length === 1 && name in stage;
  if (rest.length > 0 || !only(matchStage, "$match") || !only(groupStage, "$group")) {
    throw new UnsupportedQueryError("an aggregation other than [$match, $group]");
  }
  const { _id: id, ...accumulators } = (groupStage as Document).$group as Document;
  if (typeof id !== "object" || id === null || Array.isArray(id)) {
    throw new UnsupportedQueryError("a $group _id that is not an object of fields");
  }
  const fieldOf = (reference: unknown): string => {
    if (typeof reference !== "string" || !reference.startsWith("$")) {
      throw new UnsupportedQueryError(`the $group expression ${JSON.stringify(reference)}`);
    }
    return reference.slice(1);
  };
  const groups = Object.entries(id as Document).map(([name, reference]) => ({
    name,
    path: fieldOf(reference),
  }));
  const tallies = Object.entries(accumulators).map(([name, accumulator]) => {
    const operand = (accumulator as Document | null)?.$sum;
    if (Object.keys(accumulator ?? {}).length !== 1 || operand === undefined) {
      throw new UnsupportedQueryError(`the accumulator of ${name}: only $sum`);
    }
    return { name, path: operand === 1 ? null : fieldOf(operand) };
  });
  return { match: (matchStage as Document).$match as Document, groups, tallies };
}

/** A group's `_id` from its values, in the order of the grouped fields. */
function groupId(grouping: Grouping, values: readonly unknown[]): Document {
  const id: Document = {};
  grouping.groups.forEach((group, index) => {
    id[group.name] = decodeValue(values[index] ?? null);
  });
  return id;
}

function isScalar(value: unknown): boolean {
  return (
    value !== null && (typeof value !== "object" || value instanceof Date) && value !== undefined
  );
}

interface KeptTotal {
  readonly declaration: CounterDeclaration;
  readonly name: string;
  /** The names of its sums' rows, in the order of `declaration.sums`. */
  readonly sumNames: readonly string[];
  readonly lookup: string;
}

/** Where a document counts in one kept total (see `SqliteCounters.placesOf`). */
export interface Place {
  readonly values: readonly SQLInputValue[];
  readonly sums: readonly number[];
}

/** What a group's writes add to one row of `counters`. */
interface Delta {
  readonly name: string;
  readonly values: readonly SQLInputValue[];
  n: number;
}

function samePlace(a: Place | null, b: Place | null): boolean {
  if (a === null || b === null) return a === b;
  return (
    a.values.length === b.values.length &&
    a.values.every((value, index) => value === b.values[index]) &&
    a.sums.every((sum, index) => sum === b.sums[index])
  );
}

/** The value at a dotted path of a document (undefined when a step is missing). */
function valueAt(doc: Document, path: string): unknown {
  if (path === "_id") return doc._id;
  let value: unknown = doc;
  for (const step of path.split(".")) {
    if (value === null || typeof value !== "object") return undefined;
    value = (value as Document)[step];
  }
  return value;
}

/** A key's value as `json_extract` reads it out of the stored document (null when missing). */
function keyValue(value: unknown): SQLInputValue {
  return value === undefined || value === null ? null : encodeScalar(value);
}

/** A summed field as `coalesce(json_extract(...), 0)` reads it. */
function sumValue(value: unknown): number {
  return typeof value === "number" ? value : 0;
}
