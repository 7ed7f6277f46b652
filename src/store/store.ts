import { closeSync, mkdirSync, openSync, readFileSync, rmSync, writeSync } from "node:fs";
import { join } from "node:path";
import { type Document, MongoClient } from "mongodb";
import type { Tenant } from "../domain/tenancy.js";
import type { Collections } from "./collection.js";
import { type CollectionName, counterDeclarations, ensureIndexes } from "./indexes.js";
import { type ImportReport, importNedbDirectory } from "./nedb-import.js";
import {
  type QueryPlan,
  type SqliteCollection,
  SqliteDatabase,
  type SqliteSynchronous,
} from "./sqlite.js";
import { createTenantStore, type TenantStore } from "./tenant-store.js";

/**
 * The data, two ways in: `forTenant` gives one application's repositories
 * (what services use), `system` every collection unscoped (authentication,
 * provisioning, admin, the webhook relay and workers, tests).
 */
export interface Store {
  /** Every collection, unscoped: for the system paths only. */
  readonly system: Collections;
  /** The tenant's repositories; the same object for the same tenant object. */
  forTenant(tenant: Tenant): TenantStore;
  /** `mongodb` or `embedded`, for logs. */
  readonly engine: "mongodb" | "embedded";
  /** Set when this start imported a data directory of the previous embedded engine. */
  readonly imported?: ImportReport;
  /** The embedded engine's plan for every distinct query run so far (diagnostics, tests). */
  readonly queryPlans?: () => QueryPlan[];
  /** Resolves when the store answers; rejects otherwise (readiness). */
  ping(): Promise<void>;
  /** Releases connections, files and locks. */
  close(): Promise<void>;
}

/** Where the data lives. */
export type StoreConfig =
  | { readonly mongodbUri: string; readonly mongodbDb: string }
  | { readonly dataDir: string; readonly synchronous?: SqliteSynchronous };

/** The embedded engine's database file in DATA_DIR. */
export const embeddedDatabaseFile = "referrals.sqlite";

const collectionNames: readonly CollectionName[] = [
  "organizations",
  "applications",
  "apiKeys",
  "customers",
  "referrals",
  "checkpoints",
  "campaigns",
  "webhooks",
  "events",
  "deliveries",
];

/** Opens the configured store and creates its indexes. */
export async function openStore(config: StoreConfig): Promise<Store> {
  if ("mongodbUri" in config) return withIndexes(await openMongo(config));
  const { store, database } = openEmbedded(config);
  await withIndexes(store);
  // The planner's statistics, now that every index exists.
  database.declareStatistics();
  return store;
}

async function withIndexes(store: Store): Promise<Store> {
  try {
    await ensureIndexes(store.system);
  } catch (error) {
    await store.close();
    throw error;
  }
  return store;
}

async function openMongo(config: { mongodbUri: string; mongodbDb: string }): Promise<Store> {
  const client = new MongoClient(config.mongodbUri, { serverSelectionTimeoutMS: 10_000 });
  await client.connect();
  const db = client.db(config.mongodbDb);
  const collections = Object.fromEntries(
    collectionNames.map((name) => [name, db.collection<Document>(name)]),
  );
  return {
    ...tenantAccess(collections as unknown as Collections),
    engine: "mongodb",
    async ping() {
      await db.command({ ping: 1 });
    },
    close: () => client.close(),
  };
}

function openEmbedded(config: { dataDir: string; synchronous?: SqliteSynchronous }): {
  store: Store;
  database: SqliteDatabase;
} {
  const releaseLock = acquireLock(config.dataDir);
  let database: SqliteDatabase | undefined;
  try {
    const db = SqliteDatabase.open(
      join(config.dataDir, embeddedDatabaseFile),
      config.synchronous ?? "normal",
    );
    database = db;
    const collections = Object.fromEntries(
      collectionNames.map((name) => [name, db.collection<Document>(name)]),
    ) as Record<CollectionName, SqliteCollection<Document>>;
    for (const [name, counters] of Object.entries(counterDeclarations)) {
      for (const counter of counters) collections[name as CollectionName].keepCounter(counter);
    }
    const imported = importNedbDirectory(config.dataDir, db, collections);
    const store: Store = {
      ...tenantAccess(collections as unknown as Collections),
      engine: "embedded",
      ...(imported ? { imported } : {}),
      queryPlans: () => db.queryPlans(),
      async ping() {
        db.ping();
      },
      async close() {
        db.close();
        releaseLock();
      },
    };
    return { store, database: db };
  } catch (error) {
    database?.close();
    releaseLock();
    throw error;
  }
}

/**
 * `system` and `forTenant` over the collections. A tenant's repositories are
 * kept per tenant object (the authenticator hands out one per key while it is
 * cached), so a call does not rebuild them.
 */
function tenantAccess(system: Collections): Pick<Store, "system" | "forTenant"> {
  const tenantStores = new WeakMap<Tenant, TenantStore>();
  return {
    system,
    forTenant(tenant) {
      let tenantStore = tenantStores.get(tenant);
      if (!tenantStore) {
        tenantStore = createTenantStore(system, tenant);
        tenantStores.set(tenant, tenantStore);
      }
      return tenantStore;
    },
  };
}

/**
 * The embedded engine makes each read-modify-write atomic by running it
 * synchronously in one process, so a second process on the same database
 * could interleave with it. A lock file with the owner's pid refuses the
 * second; a lock whose process is gone is taken over.
 */
function acquireLock(dataDir: string): () => void {
  mkdirSync(dataDir, { recursive: true });
  const path = join(dataDir, "LOCK");
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(path, "wx");
      writeSync(fd, String(process.pid));
      closeSync(fd);
      heldLocks.add(path);
      return () => {
        heldLocks.delete(path);
        rmSync(path, { force: true });
      };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
      const owner = Number(readFileSync(path, "utf8"));
      const ownedElsewhere = owner !== process.pid || heldLocks.has(path);
      if (owner && ownedElsewhere && isAlive(owner)) {
        throw new Error(
          `${dataDir} is in use by process ${owner}: the embedded store has a single writer. ` +
            "Use the running service's API (npm run admin) or stop it first.",
        );
      }
      rmSync(path, { force: true });
    }
  }
  throw new Error(`could not lock ${dataDir}`);
}

/** Lock files this process holds, so a second open in-process is refused too. */
const heldLocks = new Set<string>();

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}
