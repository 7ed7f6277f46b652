import type { Document } from "mongodb";
import type { CounterDeclaration } from "../indexes.js";
import type { SqliteConnection } from "./sqlite-connection.js";
import {
  compileFilter,
  decodeValue,
  encodeScalar,
  fieldExpression,
  UnsupportedQueryError,
} from "./sqlite-query.js";

/**
 * The totals one table keeps per group of documents (see
 * `CounterDeclaration`), and the counts and aggregations they answer; an
 * aggregation that no kept total answers runs as a GROUP BY.
 */
export class SqliteCounters {
  /** The kept totals, with their names and lookup SQL worked out once. */
  private readonly totals: { declaration: CounterDeclaration; name: string; lookup: string }[] = [];

  constructor(
    private readonly database: SqliteConnection,
    private readonly table: string,
  ) {}

  /**
   * Keeps a total per group of documents, and the declared sums: triggers
   * adjust them in the same transaction as every insert, update and
   * delete, so they are exact; the first declaration on existing data
   * counts them once.
   */
  keep(counter: CounterDeclaration): void {
    const name = counterName(this.table, counter);
    const sums = counter.sums ?? [];
    const key = (row: "NEW" | "OLD") =>
      `json_array(${counter.groupBy.map((path) => rowField(row, path)).join(", ")})`;
    const counted = (row: "NEW" | "OLD") =>
      (counter.nullFields ?? []).map((path) => `${rowField(row, path)} IS NULL`).join(" AND ") ||
      "1";
    // The count, then each sum: a row of `counters` each, under its own name.
    const tallies = (row: "NEW" | "OLD") => [
      { name, value: "1" },
      ...sums.map((path) => ({
        name: sumCounterName(name, path),
        value: `coalesce(${rowField(row, path)}, 0)`,
      })),
    ];
    const add = (row: "NEW" | "OLD") =>
      tallies(row)
        .map(
          (tally) =>
            `INSERT INTO counters (name, key, n) SELECT '${tally.name}', ${key(row)}, ${tally.value} ` +
            `WHERE ${counted(row)} ON CONFLICT (name, key) DO UPDATE SET n = n + excluded.n;`,
        )
        .join(" ");
    const remove = (row: "NEW" | "OLD") =>
      tallies(row)
        .map(
          (tally) =>
            `UPDATE counters SET n = n - ${tally.value} WHERE ${counted(row)} ` +
            `AND name = '${tally.name}' AND key = ${key(row)};`,
        )
        .join(" ");
    const moved = (row: "NEW" | "OLD") =>
      [counted(row), key(row), ...sums.map((path) => rowField(row, path))].join(", ");
    const trigger = `"${name.replaceAll(/[^A-Za-z0-9_]/g, "_")}`;
    // A reader uses the counters its writer keeps.
    if (this.database.writes)
      this.database.transaction(() => {
        const known = this.database
          .statement("SELECT 1 FROM counter_definitions WHERE name = ?")
          .get(name);
        if (known) return;
        this.database.exec(
          `CREATE TRIGGER ${trigger}_insert" AFTER INSERT ON "${this.table}" BEGIN ${add("NEW")} END;` +
            `CREATE TRIGGER ${trigger}_delete" AFTER DELETE ON "${this.table}" BEGIN ${remove("OLD")} END;` +
            // Most updates move no document between groups; they touch no counter.
            `CREATE TRIGGER ${trigger}_update" AFTER UPDATE OF doc ON "${this.table}" ` +
            `WHEN (${moved("OLD")}) IS NOT (${moved("NEW")}) ` +
            `BEGIN ${remove("OLD")} ${add("NEW")} END;`,
        );
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
    const keys = counter.groupBy.map(() => "?").join(", ");
    this.totals.push({
      declaration: counter,
      name,
      lookup: `SELECT n FROM counters WHERE name = ? AND key = json_array(${keys})`,
    });
  }

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

/** A field of a trigger's NEW or OLD row, as the counted filter compares it. */
function rowField(row: "NEW" | "OLD", path: string): string {
  return fieldExpression(path)
    .replace(/json_extract\((doc|side),/, `json_extract(${row}.$1,`)
    .replace(/^id$/, `${row}.id`);
}

function isScalar(value: unknown): boolean {
  return (
    value !== null && (typeof value !== "object" || value instanceof Date) && value !== undefined
  );
}
