import type { Document, Filter, FindOptions } from "mongodb";
import type { StoreCollection } from "./collection.js";

/** A page request: how many to return and how many to skip. */
export interface PageRequest {
  readonly limit: number;
  readonly offset: number;
}

/**
 * The order of {@link findNewestFirst}, for documents sorted in memory:
 * newest first, then by id.
 */
export function compareNewestFirst(
  a: { readonly _id: string; readonly createdAt: Date },
  b: { readonly _id: string; readonly createdAt: Date },
): number {
  const byTime = b.createdAt.getTime() - a.createdAt.getTime();
  if (byTime !== 0) return byTime;
  return a._id < b._id ? 1 : a._id > b._id ? -1 : 0;
}

/**
 * One page of a query, newest first (`createdAt` then `_id`, so the order is
 * stable when times tie), and the number of all matches.
 */
export async function findNewestFirst<T extends Document & { _id: string; createdAt: Date }>(
  collection: StoreCollection<T>,
  query: Filter<T>,
  page: PageRequest,
): Promise<{ total: number; docs: T[] }> {
  const { total, docs } = await newestFirst(collection, query, page, {});
  return { total, docs: docs as T[] };
}

/** {@link findNewestFirst}, the ids of the page only (its documents are not read). */
export async function findIdsNewestFirst<T extends Document & { _id: string; createdAt: Date }>(
  collection: StoreCollection<T>,
  query: Filter<T>,
  page: PageRequest,
): Promise<{ total: number; ids: string[] }> {
  const { total, docs } = await newestFirst(collection, query, page, { projection: { _id: 1 } });
  return { total, ids: docs.map((doc) => doc._id as string) };
}

async function newestFirst<T extends Document>(
  collection: StoreCollection<T>,
  query: Filter<T>,
  page: PageRequest,
  options: FindOptions,
): Promise<{ total: number; docs: Document[] }> {
  const [total, docs] = await Promise.all([
    collection.countDocuments(query),
    collection
      .find(query, {
        ...options,
        sort: { createdAt: -1, _id: -1 },
        skip: page.offset,
        limit: page.limit,
      })
      .toArray(),
  ]);
  return { total, docs };
}
