import { randomUUID } from "node:crypto";
import type { SQLInputValue } from "node:sqlite";
import * as mingoUpdateOperators from "mingo/operators/update";
import type {
  CreateIndexesOptions,
  DeleteResult,
  Document,
  Filter,
  FindOneAndUpdateOptions,
  FindOptions,
  IndexSpecification,
  InsertManyResult,
  InsertOneResult,
  OptionalUnlessRequiredId,
  Sort,
  UpdateFilter,
  UpdateOptions,
  UpdateResult,
  WithId,
} from "mongodb";
import type { JointOperation, StoreCollection } from "../collection.js";
import { DuplicateKeyError } from "../errors.js";
import { type CounterDeclaration, fieldFanout } from "../indexes.js";
import type { SqliteConnection } from "./sqlite-connection.js";
import { type Place, SqliteCounters } from "./sqlite-counters.js";
import {
  compileFilter,
  compileSort,
  decodeDocument,
  encodeColumns,
  equalityFields,
  fieldExpression,
  isSidePath,
  project,
  sideFieldsRemoved,
  sideTableOf,
  UnsupportedQueryError,
} from "./sqlite-query.js";

interface Row {
  id: string;
  doc: string;
  side: string | null;
}

/**
 * A `StoreCollection` on one table. Filters, sort, skip, limit and count run
 * in SQL on the declared indexes; update operators are applied with mingo
 * (MongoDB's semantics) to the document read in the same synchronous step.
 */
export class SqliteCollection<T extends Document> implements StoreCollection<T> {
  /**
   * Moves with every commit that wrote a document of this table (not one
   * that only emptied its outbox, which no view shows): a view read at one
   * version is current for as long as the version stays (see
   * {@link SqliteDatabase.versionOf}), so views kept in memory can be exact.
   */
  get version(): number {
    return this.database.versionOf(this.name);
  }
  private readonly indexes: {
    name: string;
    /** The collection's table, or its side table for an index of side fields. */
    table: string;
    key: Record<string, 1 | -1>;
    unique: boolean;
    /** Sparse, or partial on equalities: it holds a few of the documents. */
    sparse: boolean;
  }[] = [];

  /**
   * Told of each change of a document inside the write that makes it, so
   * what it moves (the program's numbers) commits or rolls back with it.
   * `before` is a shallow copy taken before the update.
   */
  private watcher: ((before: Document | null, after: Document) => void) | undefined;

  /** The totals this table keeps, and the counts and aggregations they answer. */
  private readonly counters: SqliteCounters;

  /** Where the documents' side fields are (see `sideTableOf`). */
  private readonly sideTable: string;

  /** What a find reads of each document: its id, its row and its side row. */
  private readonly documentColumns: string;

  constructor(
    private readonly database: SqliteConnection,
    readonly name: string,
  ) {
    this.counters = new SqliteCounters(database, name);
    this.sideTable = sideTableOf(name);
    this.documentColumns = `id, json(doc) AS doc, (SELECT json(side) FROM "${this.sideTable}" WHERE id = "${name}".id) AS side`;
  }

  /** Sets the collection's watcher (see {@link watcher}). */
  watch(watcher: (before: Document | null, after: Document) => void): void {
    this.watcher = watcher;
  }

  insertOne(doc: OptionalUnlessRequiredId<T>): Promise<InsertOneResult<T>> {
    return this.database.write(() => this.insertOneNow(doc));
  }

  private insertOneNow(doc: OptionalUnlessRequiredId<T>): InsertOneResult<T> {
    return { acknowledged: true, insertedId: this.insertRow(doc as Document) as never };
  }

  async insertMany(docs: readonly OptionalUnlessRequiredId<T>[]): Promise<InsertManyResult<T>> {
    const insertedIds: Record<number, string> = {};
    // Like MongoDB's ordered insertMany, the documents before a failure are kept.
    const failure = await this.database.write(() => {
      for (const [index, doc] of docs.entries()) {
        try {
          insertedIds[index] = this.insertRow(doc as Document);
        } catch (error) {
          return error;
        }
      }
      return undefined;
    });
    if (failure) throw failure;
    return {
      acknowledged: true,
      insertedCount: docs.length,
      insertedIds: insertedIds as never,
    };
  }

  async findOne(filter: Filter<T>, options: FindOptions = {}): Promise<WithId<T> | null> {
    const [first] = this.select(filter, { ...options, limit: 1 });
    return first ?? null;
  }

  find(filter: Filter<T>, options: FindOptions = {}): { toArray(): Promise<WithId<T>[]> } {
    return { toArray: async () => this.select(filter, options) };
  }

  async countDocuments(filter: Filter<T> = {}, options: { limit?: number } = {}): Promise<number> {
    const { limit } = options;
    const kept = this.counters.total(filter as Document);
    if (kept !== undefined) return limit === undefined ? kept : Math.min(kept, limit);
    const { sql, params } = this.countStatement(filter, limit);
    this.database.noteQuery(sql, this.name, filter, params);
    const row = this.database.statement(sql).get(...params) as { n: number };
    return row.n;
  }

  async countMany(filters: readonly Filter<T>[], limit: number): Promise<number[]> {
    // One statement of bounded counts, one per filter: each walks its index
    // range, at most `limit` entries. The limit is written into the
    // statement (see `countStatement`).
    const params: SQLInputValue[] = [];
    const counts = filters.map((filter, i) => {
      const where = compileFilter(filter as Document, this.name);
      params.push(...where.params);
      return `(SELECT count(*) FROM (SELECT 1 FROM "${this.name}" WHERE ${where.sql} LIMIT ${sqlLimit(limit)})) AS n${i}`;
    });
    const sql = `SELECT ${counts.join(", ")}`;
    this.database.noteQuery(sql, this.name, (filters[0] ?? {}) as Document, params);
    const row = this.database.statement(sql).get(...params) as Record<string, number>;
    return filters.map((_, i) => row[`n${i}`] ?? 0);
  }

  updateOne(
    filter: Filter<T>,
    update: UpdateFilter<T>,
    options: UpdateOptions = {},
  ): Promise<UpdateResult<T>> {
    return this.database.write(() => this.updateOneNow(filter, update, options));
  }

  private updateOneNow(
    filter: Filter<T>,
    update: UpdateFilter<T>,
    options: UpdateOptions,
  ): UpdateResult<T> {
    const removed = options.upsert ? undefined : sideFieldsRemoved(update as Document);
    if (removed) {
      const { matched, modified } = this.removeSideFields(filter, removed);
      return updatedWithoutUpsert(matched, modified);
    }
    const result = this.updateFirst(filter, update, options.upsert ?? false, undefined);
    return {
      acknowledged: true,
      matchedCount: result.upserted ? 0 : result.matched,
      modifiedCount: result.modified ? 1 : 0,
      upsertedCount: result.upserted ? 1 : 0,
      upsertedId: (result.upserted ? result.doc?._id : null) as never,
    };
  }

  async updateMany(filter: Filter<T>, update: UpdateFilter<T>): Promise<UpdateResult<T>> {
    const operators = updateOperators(update);
    const { matched, modified } = await this.database.write(() => {
      const matches = this.select(filter, {});
      let changed = 0;
      for (const doc of matches) {
        const before = this.watcher ? { ...doc } : null;
        const places = this.counters.kept ? this.counters.placesOf(doc) : null;
        const modified = applyUpdate(doc, operators);
        if (modified.length === 0) continue;
        this.writeRow(doc, modified, before, places);
        changed += 1;
      }
      return { matched: matches.length, modified: changed };
    });
    return updatedWithoutUpsert(matched, modified);
  }

  async findOneAndUpdate(
    filter: Filter<T>,
    update: UpdateFilter<T>,
    options: FindOneAndUpdateOptions,
  ): Promise<WithId<T> | null> {
    return this.database.write(() => this.findOneAndUpdateNow(filter, update, options));
  }

  private findOneAndUpdateNow(
    filter: Filter<T>,
    update: UpdateFilter<T>,
    options: FindOneAndUpdateOptions,
  ): WithId<T> | null {
    if (options.returnDocument !== "after") {
      throw new UnsupportedQueryError("findOneAndUpdate without returnDocument 'after'");
    }
    return this.updateFirst(filter, update, options.upsert ?? false, options.sort).doc;
  }

  /**
   * One write of a group made together (see `WriteTogether`), run inside
   * the group's open write: it stands or falls with the others.
   */
  writeInside(operation: JointOperation, args: readonly unknown[]): unknown {
    switch (operation) {
      case "insertOne":
        return this.insertOneNow(args[0] as OptionalUnlessRequiredId<T>);
      case "updateOne":
        return this.updateOneNow(
          args[0] as Filter<T>,
          args[1] as UpdateFilter<T>,
          (args[2] ?? {}) as UpdateOptions,
        );
      case "findOneAndUpdate":
        return this.findOneAndUpdateNow(
          args[0] as Filter<T>,
          args[1] as UpdateFilter<T>,
          args[2] as FindOneAndUpdateOptions,
        );
    }
  }

  deleteOne(filter: Filter<T>): Promise<DeleteResult> {
    return this.database.write(() => {
      this.database.touch(this.name);
      const where = compileFilter(filter, this.name);
      const sql = `DELETE FROM "${this.name}" WHERE rowid = (SELECT rowid FROM "${this.name}" WHERE ${where.sql} LIMIT 1)`;
      this.database.noteQuery(sql, this.name, filter, where.params);
      return { acknowledged: true, deletedCount: this.deleteRows(sql, where.params) };
    });
  }

  deleteMany(filter: Filter<T>): Promise<DeleteResult> {
    return this.database.write(() => {
      this.database.touch(this.name);
      const where = compileFilter(filter, this.name);
      const sql = `DELETE FROM "${this.name}" WHERE ${where.sql}`;
      this.database.noteQuery(sql, this.name, filter, where.params);
      return { acknowledged: true, deletedCount: this.deleteRows(sql, where.params) };
    });
  }

  /** Runs a DELETE; the documents it removes leave the kept totals. Returns how many. */
  private deleteRows(sql: string, params: readonly SQLInputValue[]): number {
    if (!this.counters.kept) return Number(this.database.statement(sql).run(...params).changes);
    const rows = this.database.statement(`${sql} RETURNING json(doc) AS doc`).all(...params) as {
      doc: string;
    }[];
    for (const row of rows) this.counters.removed(decodeDocument<Document>(row.doc));
    return rows.length;
  }

  /** Removes an index by its MongoDB name, which is this engine's after the table's name. */
  async dropIndex(name: string): Promise<void> {
    const sqliteName = `${this.name}_${name}`.replaceAll(/[^A-Za-z0-9_]/g, "_");
    const known = this.database
      .statement("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?")
      .get(sqliteName);
    if (!known) throw new Error(`index not found: ${name}`);
    this.database.exec(`DROP INDEX "${sqliteName}"`);
    const at = this.indexes.findIndex((index) => index.name === sqliteName);
    if (at >= 0) this.indexes.splice(at, 1);
  }

  /**
   * A real SQLite index on the same expressions queries use: unique stays
   * unique, a sparse index becomes a partial one over documents that have
   * the field, as MongoDB's sparse index leaves the others out, and a
   * partial filter of equalities (`{ status: "pending" }`) becomes the same
   * partial index, which SQLite uses for a query that binds those values
   * (see `equalityPartial`). Other partial filters are left out: the index
   * holds every document, and serves the same queries.
   */
  async createIndex(spec: IndexSpecification, options: CreateIndexesOptions = {}): Promise<string> {
    const key = spec as Record<string, 1 | -1>;
    const keyName = Object.entries(key)
      .map(([path, direction]) => `${path}_${direction}`)
      .join("_");
    const name = `${this.name}_${options.name ?? keyName}`.replaceAll(/[^A-Za-z0-9_]/g, "_");
    // Built ascending whatever the declared direction: SQLite reads an index
    // backwards as fast as forwards (each declared index sorts its trailing
    // fields one way), and a descending index filled in time order inserts
    // at its front, where each page split leaves half a page empty: the
    // deliveries' list index was half empty that way. A database created
    // before keeps its descending indexes (same names), which work alike.
    const paths = Object.keys(key);
    // An index of side fields is the side table's (see `sideTableOf`).
    const onSide = paths.every(isSidePath);
    if (!onSide && paths.some(isSidePath)) {
      throw new UnsupportedQueryError(`an index of side and document fields (${name})`);
    }
    const columns = paths.map((path) => `${fieldExpression(path)} ASC`);
    const equalities = equalityPartial(options.partialFilterExpression);
    const partial = options.sparse
      ? ` WHERE ${paths.map((path) => `${fieldExpression(path)} IS NOT NULL`).join(" OR ")}`
      : equalities
        ? ` WHERE ${equalities}`
        : "";
    this.database.exec(
      `CREATE ${options.unique ? "UNIQUE " : ""}INDEX IF NOT EXISTS "${name}" ON "${onSide ? this.sideTable : this.name}" (${columns.join(", ")})${partial}`,
    );
    this.indexes.push({
      name,
      table: onSide ? this.sideTable : this.name,
      key,
      unique: options.unique ?? false,
      sparse: (options.sparse ?? false) || equalities !== undefined,
    });
    return name;
  }

  /**
   * The planner statistics of this table and its indexes, from the declared
   * fan-out of each field (`sqlite_stat1`: the rows, then how many rows one
   * value of each leading prefix of the index matches), at a nominal size.
   */
  statistics(): { table: string; index: string | null; stat: string }[] {
    const rows = nominalRows;
    const few = Math.ceil(rows / 10_000);
    const stats = [
      { table: this.name, index: null, stat: String(rows) },
      { table: this.name, index: `sqlite_autoindex_${this.name}_1`, stat: `${rows} 1` },
      // Documents whose events or grants wait: a few at any time.
      {
        table: this.sideTable,
        index: `sqlite_autoindex_${this.sideTable}_1`,
        stat: `${few} 1`,
      },
    ];
    for (const index of this.indexes) {
      // A sparse or partial index holds the few documents that have the field, or match.
      const indexed = index.sparse ? few : rows;
      let groups = 1;
      const perPrefix = Object.keys(index.key).map((field, position, fields) => {
        groups *= field === "_id" ? rows : (fieldFanout[field] ?? rows);
        const last = position === fields.length - 1;
        return index.unique && last ? 1 : Math.max(1, Math.round(indexed / groups));
      });
      stats.push({
        table: index.table,
        index: index.name,
        stat: [indexed, ...perPrefix].join(" "),
      });
    }
    return stats;
  }

  /**
   * Keeps a total per group of documents, and the declared sums, exact in
   * every write (see `SqliteCounters.keep`).
   */
  keepCounter(counter: CounterDeclaration): void {
    this.counters.keep(counter);
  }

  /** The one aggregation the repositories run (see `SqliteCounters.aggregate`). */
  aggregate(pipeline: Document[]): { toArray(): Promise<Document[]> } {
    return { toArray: async () => this.counters.aggregate(pipeline) };
  }

  private findStatement(
    filter: Filter<T>,
    options: FindOptions = {},
  ): { sql: string; params: SQLInputValue[] } {
    const where = compileFilter(filter, this.name);
    const params = [...where.params];
    // Only ids asked for (a rule counting up to a limit, a set of matches):
    // the documents are neither read out as JSON nor parsed.
    const columns = isIdsOnly(options.projection) ? "id" : this.documentColumns;
    let sql = `SELECT ${columns} FROM "${this.name}" WHERE ${where.sql}${compileSort(options.sort)}`;
    if (options.limit || options.skip) {
      // The limit is written into the statement: bound as a parameter, it
      // about doubles the cost of a lookup by id.
      // Lists use a handful of page sizes, so statements stay few.
      sql += ` LIMIT ${sqlLimit(options.limit)}`;
      if (options.skip) {
        sql += " OFFSET ?";
        params.push(options.skip);
      }
    }
    return { sql, params };
  }

  private countStatement(
    filter: Filter<T>,
    limit?: number,
  ): { sql: string; params: SQLInputValue[] } {
    const where = compileFilter(filter, this.name);
    if (limit === undefined) {
      return {
        sql: `SELECT count(*) AS n FROM "${this.name}" WHERE ${where.sql}`,
        params: where.params,
      };
    }
    // Counted in SQL, up to the limit: no document is decoded. The limit is
    // written into the statement: bound as a parameter, SQLite runs the
    // bounded subquery about five times slower (16 µs against 3 µs for a
    // referrer's few referrals of the day).
    return {
      sql: `SELECT count(*) AS n FROM (SELECT 1 FROM "${this.name}" WHERE ${where.sql} LIMIT ${sqlLimit(limit)})`,
      params: where.params,
    };
  }

  private select(filter: Filter<T>, options: FindOptions): WithId<T>[] {
    const { sql, params } = this.findStatement(filter, options);
    this.database.noteQuery(sql, this.name, filter, params, options.sort);
    const rows = this.database.statement(sql).all(...params) as unknown as Row[];
    if (isIdsOnly(options.projection))
      return rows.map((row) => ({ _id: row.id }) as unknown as WithId<T>);
    return rows.map((row) => project(this.decode(row), options.projection) as WithId<T>);
  }

  private decode(row: Row): WithId<T> {
    const doc = decodeDocument<Document>(row.doc);
    if (row.side !== null) Object.assign(doc, decodeDocument<Document>(row.side));
    // The primary key is the column (set, not spread first: no copy).
    doc._id = row.id;
    return doc as WithId<T>;
  }

  /**
   * MongoDB's update of the first match, or its upsert: when nothing
   * matches, the new document is the filter's equalities with the update
   * (`$setOnInsert` included) applied. A unique index violated by the write
   * is the typed duplicate-key error the repositories retry on.
   */
  private updateFirst(
    filter: Filter<T>,
    update: UpdateFilter<T>,
    upsert: boolean,
    sort: Sort | undefined,
  ): { matched: number; modified: boolean; upserted: boolean; doc: WithId<T> | null } {
    const { $setOnInsert, ...rest } = update as Record<string, Document>;
    const [current] = this.select(filter, { limit: 1, sort });
    if (current) {
      const before = this.watcher ? { ...current } : null;
      const places = this.counters.kept ? this.counters.placesOf(current) : null;
      const modified = applyUpdate(current, updateOperators(rest));
      if (modified.length > 0) this.writeRow(current, modified, before, places);
      return { matched: 1, modified: modified.length > 0, upserted: false, doc: current };
    }
    if (!upsert) return { matched: 0, modified: false, upserted: false, doc: null };
    const inserted = equalityFields(filter) as WithId<T>;
    // mingo refuses to $set `_id` (immutable in MongoDB's updates), but an
    // upsert may choose the new document's id with $setOnInsert.
    const { _id: chosenId, ...onInsert } = $setOnInsert ?? {};
    if (chosenId !== undefined) inserted._id = chosenId as never;
    const operators = updateOperators(rest);
    operators.$set = { ...operators.$set, ...onInsert };
    applyUpdate(inserted, operators);
    inserted._id = this.insertRow(inserted) as never;
    return { matched: 0, modified: false, upserted: true, doc: inserted };
  }

  /**
   * `$unset` of whole side fields, in SQL: the first match's side row
   * loses them (and goes with the last), its document is neither read nor
   * rewritten (the relay and the reward ledger clear their marks so after
   * nearly every write).
   */
  private removeSideFields(
    filter: Filter<T>,
    fields: readonly string[],
  ): { matched: number; modified: number } {
    const where = compileFilter(filter, this.name);
    const present = fields.map((field) => `${fieldExpression(field)} IS NOT NULL`).join(" OR ");
    const sql =
      `SELECT id, (SELECT ${present} FROM "${this.sideTable}" WHERE id = "${this.name}".id) AS present ` +
      `FROM "${this.name}" WHERE ${where.sql} LIMIT 1`;
    this.database.noteQuery(sql, this.name, filter, where.params);
    const found = this.database.statement(sql).get(...where.params) as
      | { id: string; present: number | null }
      | undefined;
    if (!found) return { matched: 0, modified: 0 };
    if (!found.present) return { matched: 1, modified: 0 };
    const paths = fields.map((field) => `'$.${field}'`).join(", ");
    // Nearly always the last of the document's side fields: the row goes in one statement.
    const removedRow = this.database
      .statement(
        `DELETE FROM "${this.sideTable}" WHERE id = ? AND jsonb_remove(side, ${paths}) = jsonb('{}')`,
      )
      .run(found.id);
    if (removedRow.changes === 0) {
      this.database
        .statement(
          `UPDATE "${this.sideTable}" SET side = jsonb_remove(side, ${paths}) WHERE id = ?`,
        )
        .run(found.id);
    }
    return { matched: 1, modified: 1 };
  }

  /** Inserts a document (its `_id` the key, a new one when it has none); returns the id. */
  private insertRow(doc: Document): string {
    const { _id, ...fields } = doc;
    const id = _id === undefined ? randomUUID() : String(_id);
    const columns = encodeColumns(fields);
    this.database.touch(this.name);
    translateConstraintErrors(() =>
      this.database
        .statement(`INSERT INTO "${this.name}" (id, doc) VALUES (?, jsonb(?))`)
        .run(id, columns.doc),
    );
    if (columns.side !== null) this.writeSide(id, columns.side);
    if (this.counters.kept) this.counters.added(doc);
    this.watcher?.(null, _id === undefined ? { ...doc, _id: id } : doc);
    return id;
  }

  /**
   * Writes a changed document: its row when document fields were modified,
   * its side row when side fields were.
   */
  private writeRow(
    doc: WithId<T>,
    modifiedPaths: readonly string[],
    before: Document | null,
    /** Where the document counted in the kept totals before the change (see `SqliteCounters.placesOf`). */
    places: readonly (Place | null)[] | null,
  ): void {
    const { _id, ...fields } = doc;
    const id = String(_id);
    const columns = encodeColumns(fields);
    const sideOnly = modifiedPaths.every(isSidePath);
    if (!sideOnly) {
      this.database.touch(this.name);
      translateConstraintErrors(() =>
        this.database
          .statement(`UPDATE "${this.name}" SET doc = jsonb(?) WHERE id = ?`)
          .run(columns.doc, id),
      );
      if (places) this.counters.moved(places, doc);
    }
    if (modifiedPaths.some(isSidePath)) this.writeSide(id, columns.side);
    if (!sideOnly && before) this.watcher?.(before, doc);
  }

  /** A document's side row: written, or removed with its last side field. */
  private writeSide(id: string, side: string | null): void {
    if (side === null) {
      this.database.statement(`DELETE FROM "${this.sideTable}" WHERE id = ?`).run(id);
      return;
    }
    this.database
      .statement(
        `INSERT INTO "${this.sideTable}" (id, side) VALUES (?, jsonb(?)) ON CONFLICT (id) DO UPDATE SET side = excluded.side`,
      )
      .run(id, side);
  }
}

/**
 * A partial filter of field equalities to literal strings or numbers, or of
 * fields that exist (as the index declarations write them) in SQL, or
 * undefined for any other filter.
 * A query naming the same fields equal to bound parameters of those values
 * uses the index: SQLite plans a statement again when the values bound to
 * a partial index's terms change.
 */
function equalityPartial(filter: Document | undefined): string | undefined {
  if (filter === undefined) return undefined;
  const terms = Object.entries(filter).map(([path, value]) => {
    if (path.startsWith("$")) return undefined;
    if (typeof value === "string")
      return `${fieldExpression(path)} = '${value.replaceAll("'", "''")}'`;
    if (typeof value === "number" && Number.isFinite(value))
      return `${fieldExpression(path)} = ${value}`;
    // Documents that have the field, which a query naming it equal to a
    // value uses. SQL reads null as missing: declared on fields never null.
    if (isExistsTrue(value)) return `${fieldExpression(path)} IS NOT NULL`;
    return undefined;
  });
  if (terms.length === 0 || terms.some((term) => term === undefined)) return undefined;
  return terms.join(" AND ");
}

function isExistsTrue(value: unknown): boolean {
  if (typeof value !== "object" || value === null) return false;
  const keys = Object.keys(value);
  return keys.length === 1 && keys[0] === "$exists" && (value as Document).$exists === true;
}

/** The update's operators as mingo takes them; a replacement document is refused. */
function updateOperators(update: Document): Record<string, Document> {
  for (const key of Object.keys(update)) {
    if (!key.startsWith("$")) throw new UnsupportedQueryError("replacement-style updates");
  }
  return { ...update } as Record<string, Document>;
}

type UpdateOperator = (expr: Document) => (doc: Document) => string[];
const operatorsByName = mingoUpdateOperators as unknown as Record<string, UpdateOperator>;

/**
 * Applies MongoDB update operators to a document in place with mingo's
 * operator functions; returns the paths they modified. They are called
 * directly with mingo's default options: its `update()` builds a fresh
 * operator context on every call, which costs more than the update itself.
 */
function applyUpdate(doc: Document, operators: Record<string, Document>): string[] {
  const modified: string[] = [];
  for (const [name, expression] of Object.entries(operators)) {
    const operator = operatorsByName[name];
    if (!operator) throw new UnsupportedQueryError(`the update operator ${name}`);
    modified.push(...operator(expression)(doc));
  }
  return modified;
}

// The size the declared statistics describe: large, so that an index on a
// selective field always wins over walking a broad one.
const nominalRows = 1_000_000;

// SQLITE_CONSTRAINT_UNIQUE and SQLITE_CONSTRAINT_PRIMARYKEY.
const duplicateKeyCodes = new Set([2067, 1555]);

function translateConstraintErrors(write: () => void): void {
  try {
    write();
  } catch (error) {
    const code = (error as { errcode?: number }).errcode;
    if (code !== undefined && duplicateKeyCodes.has(code)) {
      throw new DuplicateKeyError(`duplicate key: ${(error as Error).message}`);
    }
    throw error;
  }
}

/** Whether a projection keeps `_id` alone (`{ _id: 1 }`). */
function isIdsOnly(projection: Document | undefined): boolean {
  if (projection === undefined) return false;
  let keys = 0;
  for (const key in projection) {
    if (key !== "_id" || !projection[key]) return false;
    keys += 1;
  }
  return keys === 1;
}

/** A limit as SQL: a positive integer, or -1 (none). */
function sqlLimit(limit: number | undefined): number {
  return limit !== undefined && Number.isSafeInteger(limit) && limit > 0 ? limit : -1;
}

/** The driver's answer to an update that upserted nothing. */
function updatedWithoutUpsert<T extends Document>(
  matched: number,
  modified: number,
): UpdateResult<T> {
  return {
    acknowledged: true,
    matchedCount: matched,
    modifiedCount: modified,
    upsertedCount: 0,
    upsertedId: null,
  };
}
