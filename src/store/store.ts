import { closeSync, mkdirSync, openSync, readFileSync, rmSync, writeSync } from "node:fs";
import { join } from "node:path";
import { type Document, MongoClient } from "mongodb";
import type { StoreCollection } from "./collection.js";
import type {
  ApiKeyDoc,
  ApplicationDoc,
  CampaignDoc,
  CheckpointDoc,
  CustomerDoc,
  DeliveryDoc,
  EventDoc,
  OrganizationDoc,
  ReferralDoc,
  WebhookDoc,
} from "./documents.js";
import { EmbeddedCollection } from "./embedded.js";
import { type CollectionName, ensureIndexes } from "./indexes.js";

/** Every collection, plus the store's lifecycle. */
export interface Store {
  readonly organizations: StoreCollection<OrganizationDoc>;
  readonly applications: StoreCollection<ApplicationDoc>;
  readonly apiKeys: StoreCollection<ApiKeyDoc>;
  readonly customers: StoreCollection<CustomerDoc>;
  readonly referrals: StoreCollection<ReferralDoc>;
  readonly checkpoints: StoreCollection<CheckpointDoc>;
  readonly campaigns: StoreCollection<CampaignDoc>;
  readonly webhooks: StoreCollection<WebhookDoc>;
  readonly events: StoreCollection<EventDoc>;
  readonly deliveries: StoreCollection<DeliveryDoc>;
  /** `mongodb` or `embedded`, for logs. */
  readonly engine: "mongodb" | "embedded";
  /** Resolves when the store answers; rejects otherwise (readiness). */
  ping(): Promise<void>;
  /** Releases connections, files and locks. */
  close(): Promise<void>;
}

/** Where the data lives. */
export type StoreConfig =
  | { readonly mongodbUri: string; readonly mongodbDb: string }
  | { readonly dataDir: string };

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
  const store =
    "mongodbUri" in config ? await openMongo(config) : await openEmbedded(config.dataDir);
  try {
    await ensureIndexes(store);
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
    ...(collections as unknown as Pick<Store, CollectionName>),
    engine: "mongodb",
    async ping() {
      await db.command({ ping: 1 });
    },
    close: () => client.close(),
  };
}

async function openEmbedded(dataDir: string): Promise<Store> {
  const releaseLock = acquireLock(dataDir);
  try {
    const collections: Record<string, EmbeddedCollection<Document>> = {};
    for (const name of collectionNames) {
      collections[name] = await EmbeddedCollection.open(dataDir, name);
    }
    return {
      ...(collections as unknown as Pick<Store, CollectionName>),
      engine: "embedded",
      async ping() {},
      async close() {
        for (const collection of Object.values(collections)) collection.close();
        releaseLock();
      },
    };
  } catch (error) {
    releaseLock();
    throw error;
  }
}

/**
 * The embedded engine keeps each collection in memory and appends to its
 * file, so two processes on one directory would overwrite each other. A lock
 * file with the owner's pid refuses the second; a lock whose process is gone
 * is taken over.
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
