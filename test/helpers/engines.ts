import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test, { type ExecutionContext } from "ava";
import { MongoClient } from "mongodb";
import { openStore, type Store } from "../../src/store/store.js";

/**
 * The storage engines a suite runs on: the embedded engine always, MongoDB
 * as well when MONGODB_URI is set (each run in a fresh database, dropped
 * afterwards).
 */
export type EngineName = "embedded" | "mongodb";

/** The engines available in this run. */
export const engineNames: readonly EngineName[] = process.env.MONGODB_URI
  ? ["embedded", "mongodb"]
  : ["embedded"];

/** The MONGODB_URI of this run; throws when the suite asks for MongoDB without one. */
export function mongodbUri(): string {
  const uri = process.env.MONGODB_URI;
  if (!uri) throw new Error("MONGODB_URI is not set");
  return uri;
}

/** A database name no other run uses. */
export function freshDatabaseName(purpose: string): string {
  return `referrals_${purpose}_${process.pid}_${Date.now()}_${Math.floor(Math.random() * 1e6)}`;
}

/** Drops a test database. */
export async function dropDatabase(name: string): Promise<void> {
  const client = await MongoClient.connect(mongodbUri());
  try {
    await client.db(name).dropDatabase();
  } finally {
    await client.close();
  }
}

/** A store on an engine, and how to throw it away. */
export interface TestStore {
  readonly store: Store;
  cleanup(): Promise<void>;
}

/** Opens an empty store on the engine: a temporary directory, or a fresh MongoDB database. */
export async function openTestStore(engine: EngineName): Promise<TestStore> {
  if (engine === "mongodb") {
    const mongodbDb = freshDatabaseName("store");
    const store = await openStore({ mongodbUri: mongodbUri(), mongodbDb });
    return {
      store,
      async cleanup() {
        await store.close();
        await dropDatabase(mongodbDb);
      },
    };
  }
  const dir = mkdtempSync(join(tmpdir(), "referrals-store-"));
  const store = await openStore({ dataDir: dir });
  return {
    store,
    async cleanup() {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Declares a test, titled with the engine, that runs `body` on an empty store of it. */
export function storeTest(
  engine: EngineName,
  title: string,
  body: (t: ExecutionContext, store: Store) => Promise<void>,
): void {
  test(`${engine}: ${title}`, async (t) => {
    const { store, cleanup } = await openTestStore(engine);
    try {
      await body(t, store);
    } finally {
      await cleanup();
    }
  });
}
