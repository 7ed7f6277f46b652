import { mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import type {
  CreateIndexesOptions,
  DeleteResult,
  Document,
  Filter,
  FindOneAndUpdateOptions,
  FindOptions,
  IndexSpecification,
  InsertOneResult,
  OptionalUnlessRequiredId,
  UpdateFilter,
  UpdateOptions,
  UpdateResult,
  WithId,
} from "mongodb";
import type { StoreCollection } from "./collection.js";
import { DuplicateKeyError } from "./errors.js";

// nedb is CommonJS; under NodeNext its default export is the module object,
// so take the class from require.
type Nedb = import("@seald-io/nedb").default<Record<string, unknown>>;
const Datastore: typeof import("@seald-io/nedb").default = createRequire(import.meta.url)(
  "@seald-io/nedb",
);

/**
 * A `StoreCollection` on `@seald-io/nedb`: an in-memory document store with
 * unique and compound indexes, persisted to an append-only file. It speaks the
 * MongoDB query language the repositories use; what nedb lacks
 * (`$setOnInsert`, typed duplicate-key errors) is adapted here.
 */
export class EmbeddedCollection<T extends Document> implements StoreCollection<T> {
  private readonly db: Nedb;

  private constructor(db: Nedb) {
    this.db = db;
  }

  /** Opens (and compacts) the collection's file under `directory`. */
  static async open<T extends Document>(
    directory: string,
    name: string,
  ): Promise<EmbeddedCollection<T>> {
    mkdirSync(directory, { recursive: true });
    const db: Nedb = new Datastore<Record<string, unknown>>({
      filename: join(directory, `${name}.db`),
    });
    await db.loadDatabaseAsync();
    // The file only grows between compactions; rewrite it now and then.
    db.setAutocompactionInterval(10 * 60 * 1000);
    return new EmbeddedCollection<T>(db);
  }

  /** Stops background compaction (its timer would keep the process alive). */
  close(): void {
    this.db.stopAutocompaction();
  }

  async insertOne(doc: OptionalUnlessRequiredId<T>): Promise<InsertOneResult<T>> {
    const inserted = await translateErrors(() =>
      this.db.insertAsync(doc as Record<string, unknown>),
    );
    return { acknowledged: true, insertedId: inserted._id as never };
  }

  async findOne(filter: Filter<T>, options: FindOptions = {}): Promise<WithId<T> | null> {
    const [first] = await this.find(filter, { ...options, limit: 1 }).toArray();
    return first ?? null;
  }

  find(filter: Filter<T>, options: FindOptions = {}): { toArray(): Promise<WithId<T>[]> } {
    return {
      toArray: async () => {
        let cursor = this.db.findAsync(filter as Record<string, unknown>, options.projection ?? {});
        if (options.sort) cursor = cursor.sort(options.sort as Record<string, 1 | -1>);
        if (options.skip) cursor = cursor.skip(options.skip);
        if (options.limit) cursor = cursor.limit(options.limit);
        return (await cursor.execAsync()) as unknown as WithId<T>[];
      },
    };
  }

  countDocuments(filter: Filter<T> = {}): Promise<number> {
    return this.db.countAsync(filter as Record<string, unknown>);
  }

  async updateOne(
    filter: Filter<T>,
    update: UpdateFilter<T>,
    options: UpdateOptions = {},
  ): Promise<UpdateResult<T>> {
    const result = await this.update(filter, update, options.upsert ?? false, false);
    return {
      acknowledged: true,
      matchedCount: result.upsertedId ? 0 : result.count,
      modifiedCount: result.upsertedId ? 0 : result.count,
      upsertedCount: result.upsertedId ? 1 : 0,
      upsertedId: (result.upsertedId ?? null) as never,
    };
  }

  async updateMany(filter: Filter<T>, update: UpdateFilter<T>): Promise<UpdateResult<T>> {
    const result = await this.update(filter, update, false, true);
    return {
      acknowledged: true,
      matchedCount: result.count,
      modifiedCount: result.count,
      upsertedCount: 0,
      upsertedId: null,
    };
  }

  async findOneAndUpdate(
    filter: Filter<T>,
    update: UpdateFilter<T>,
    options: FindOneAndUpdateOptions,
  ): Promise<WithId<T> | null> {
    if (options.returnDocument !== "after") {
      throw new Error(
        "the embedded engine supports findOneAndUpdate with returnDocument 'after' only",
      );
    }
    const result = await this.update(filter, update, options.upsert ?? false, false);
    return (result.document ?? null) as WithId<T> | null;
  }

  async deleteOne(filter: Filter<T>): Promise<DeleteResult> {
    const deletedCount = await this.db.removeAsync(filter as Record<string, unknown>, {
      multi: false,
    });
    return { acknowledged: true, deletedCount };
  }

  async createIndex(spec: IndexSpecification, options: CreateIndexesOptions = {}): Promise<string> {
    const fields = Object.keys(spec as Record<string, unknown>);
    await this.db.ensureIndexAsync({
      fieldName: fields.length === 1 ? (fields[0] as string) : fields,
      unique: options.unique ?? false,
      sparse: options.sparse ?? false,
    });
    return fields.join("_");
  }

  /**
   * An update with MongoDB's upsert semantics. nedb's own upsert does not know
   * `$setOnInsert`, so an upsert first updates; when nothing matched it
   * inserts the document built from the filter's equalities, `$set` and
   * `$setOnInsert`. A concurrent insert of the same key then fails on the
   * unique index, exactly as MongoDB's upsert does, and callers retry.
   */
  private async update(
    filter: Filter<T>,
    update: UpdateFilter<T>,
    upsert: boolean,
    multi: boolean,
  ): Promise<{ count: number; document?: Record<string, unknown>; upsertedId?: unknown }> {
    const { $setOnInsert, ...modifiers } = update as Record<string, Record<string, unknown>>;
    const query = filter as Record<string, unknown>;
    if (Object.keys(modifiers).length > 0) {
      const result = await translateErrors(() =>
        this.db.updateAsync(query, modifiers, { multi, returnUpdatedDocs: true }),
      );
      if (result.numAffected > 0 || !upsert) {
        const document = Array.isArray(result.affectedDocuments)
          ? result.affectedDocuments[0]
          : (result.affectedDocuments ?? undefined);
        return { count: result.numAffected, document: document ?? undefined };
      }
    } else if (!upsert) {
      return { count: await this.db.countAsync(query) };
    } else {
      const existing = await this.db.findOneAsync(query);
      if (existing) return { count: 1, document: existing };
    }
    const document: Record<string, unknown> = { ...equalityFields(query), ...$setOnInsert };
    for (const [path, value] of Object.entries(modifiers.$set ?? {})) {
      setPath(document, path, value);
    }
    for (const [path, value] of Object.entries(modifiers.$push ?? {})) {
      const each = (value as { $each?: unknown[] } | null)?.$each;
      setPath(document, path, Array.isArray(each) ? [...each] : [value]);
    }
    for (const [path, amount] of Object.entries(modifiers.$inc ?? {})) {
      setPath(document, path, ((document[path] as number | undefined) ?? 0) + (amount as number));
    }
    const inserted = await translateErrors(() => this.db.insertAsync(document));
    return { count: 1, document: inserted, upsertedId: inserted._id };
  }
}

/** The `field: value` pairs of a filter, the base of an upserted document. */
function equalityFields(query: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(query)) {
    if (key.startsWith("$")) continue;
    const isOperator =
      typeof value === "object" &&
      value !== null &&
      !(value instanceof Date) &&
      Object.keys(value).some((k) => k.startsWith("$"));
    if (!isOperator) out[key] = value;
  }
  return out;
}

/** Sets a dotted path ("a.b") in a new document, creating objects on the way. */
function setPath(document: Record<string, unknown>, path: string, value: unknown): void {
  const keys = path.split(".");
  const last = keys.pop() as string;
  let target = document;
  for (const key of keys) {
    target[key] ??= {};
    target = target[key] as Record<string, unknown>;
  }
  target[last] = value;
}

async function translateErrors<R>(operation: () => Promise<R>): Promise<R> {
  try {
    return await operation();
  } catch (error) {
    if ((error as { errorType?: string }).errorType === "uniqueViolated") {
      throw new DuplicateKeyError(`duplicate key: ${(error as { key?: unknown }).key}`);
    }
    throw error;
  }
}
