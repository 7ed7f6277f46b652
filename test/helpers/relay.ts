import type { Collections, StoreCollection } from "../../src/store/collection.js";
import { deliveryKeptIn } from "../../src/store/deliveries.js";
import type { DeliveryDoc, EventDoc, KeptDeliveryDoc } from "../../src/store/documents.js";
import type { TestServer } from "./server.js";

/** The collections whose documents carry a webhook outbox. */
export type OutboxCollection = "customers" | "referrals" | "checkpoints";

/** The fields of an outbox holder that say whether the relay is done with it. */
interface OutboxState {
  _id: string;
  outbox?: readonly { id: string }[];
  outboxPending?: true;
}

/** How long and how often `waitForRelay` looks. */
export interface RelayWaitOptions {
  /** When to give up and reject; 10 s unless set. */
  readonly timeoutMs?: number;
  /** The pause between two reads; 10 ms unless set. */
  readonly intervalMs?: number;
}

/**
 * Resolves once the outbox relay has processed every event written to one
 * document so far: the document exists, its outbox is empty and
 * `outboxPending` is unset. The relay stores an event and queues all of its
 * deliveries (or stores them with their first attempts) before it removes
 * the event from the outbox, so from then on the
 * `deliveries` collection holds every delivery those events will ever get,
 * and a test can assert that an endpoint got none without sleeping for a
 * guessed time. Waiting for the event in `events` would not be enough: the
 * relay stores only the events some endpoint wants, and drops the others.
 *
 * Call it after the API call that wrote the events has answered (the events
 * are written in the same atomic update as the change). Rejects after
 * `timeoutMs`, naming the document and the event ids it still holds.
 */
export async function waitForRelay(
  server: TestServer,
  collection: OutboxCollection,
  id: string,
  options: RelayWaitOptions = {},
): Promise<void> {
  const { timeoutMs = 10_000, intervalMs = 10 } = options;
  // Every outbox collection has these fields; one view of them avoids a union of collections.
  const holders = server.app.store.system[collection] as unknown as StoreCollection<OutboxState>;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const doc = await holders.findOne({ _id: id });
    const outbox = doc?.outbox ?? [];
    if (doc && outbox.length === 0 && doc.outboxPending === undefined) return;
    if (Date.now() > deadline) {
      const state = doc
        ? `outbox [${outbox.map((entry) => entry.id).join(", ")}], outboxPending ${doc.outboxPending}`
        : "no such document";
      throw new Error(`relay: ${collection} ${id} not relayed in ${timeoutMs} ms (${state})`);
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/** Every delivery queued for one endpoint, oldest first, read from the store. */
export function deliveriesOf(server: TestServer, webhookId: string): Promise<DeliveryDoc[]> {
  return deliveriesIn(server.app.store.system, webhookId);
}

/**
 * The deliveries in a store, of one endpoint or of all, oldest first: those
 * stored on their own and those kept in their events (see `EventDoc.delivered`).
 */
export async function deliveriesIn(db: Collections, webhookId?: string): Promise<DeliveryDoc[]> {
  const [stored, keeping] = await Promise.all([
    db.deliveries.find(webhookId ? { webhookId } : {}).toArray(),
    db.events
      .find(webhookId ? { "delivered.webhookId": webhookId } : { delivered: { $exists: true } })
      .toArray(),
  ]);
  const kept = keeping.map((event) =>
    deliveryKeptIn(event as EventDoc & { delivered: KeptDeliveryDoc }),
  );
  return [...stored, ...kept].sort((a, b) => a.createdAt.getTime() - b.createdAt.getTime());
}
