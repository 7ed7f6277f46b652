import type { Clock } from "../domain/tenancy.js";
import { endpointWants } from "../domain/webhook-events.js";
import { eventOf, eventTypeOf } from "../events/events.js";
import { type QueuedLease, queueDelivery } from "../store/deliveries.js";
import type { DeliveryDoc, EventDoc, WebhookDoc } from "../store/documents.js";
import { withErasedScrubbed } from "../store/erasure.js";
import {
  findOutboxHolders,
  type HolderCollection,
  removeFromOutbox,
  storeEvent,
} from "../store/events.js";
import type { Store } from "../store/store.js";
import { findEnabledWebhooks } from "../store/webhooks.js";

/** How many documents the relay takes from a collection per pass. */
const batchSize = 100;

/**
 * Moves events from the documents' outboxes to the `events` collection and
 * queues a delivery for each endpoint that wants them. Every step is
 * idempotent (event ids and (event, endpoint) pairs are unique keys), so a
 * crash at any point only repeats work; the outbox entry is removed last.
 */
export function createOutboxRelay(deps: {
  store: Store;
  clock: Clock;
  /**
   * The local workers, to queue deliveries already leased to them and hand
   * them over in memory (see `createDispatcher`); without them, workers
   * claim every delivery from the store.
   */
  workers?: {
    leaseForQueued(): QueuedLease | undefined;
    handOver(delivery: DeliveryDoc, event: EventDoc): void;
  };
}) {
  const { store, clock } = deps;

  const db = store.system;

  async function relayCollection(
    collection: HolderCollection,
    endpointsOf: (applicationId: string) => Promise<WebhookDoc[]>,
  ): Promise<RelayCount> {
    const holders = await findOutboxHolders(collection, batchSize);
    // Holders are relayed concurrently: each write waits for a commit, and
    // the embedded engine commits the writes of one turn together, so a
    // batch costs a few commits rather than a few per event.
    const counts = await Promise.all(
      holders.map(async (holder): Promise<RelayCount> => {
        const entries = holder.outbox ?? [];
        let queued = 0;
        for (const entry of entries) {
          const type = eventTypeOf(holder, entry);
          const wanted = (await endpointsOf(holder.applicationId)).filter((webhook) =>
            endpointWants(webhook, { type, environment: holder.environment }),
          );
          // An event no endpoint wants is dropped here rather than stored.
          if (wanted.length === 0) continue;
          const stored = await storeEvent(db, await eventOf(db, holder, entry, type));
          const event = await withErasedScrubbed(db, stored);
          const now = clock();
          await Promise.all(
            wanted.map(async (webhook) => {
              const lease = deps.workers?.leaseForQueued();
              const delivery = await queueDelivery(db, event, webhook, now, lease);
              if (delivery && lease) deps.workers?.handOver(delivery, event);
            }),
          );
          queued += wanted.length;
        }
        // Last, and all of the holder's entries at once: a crash before this
        // only relays them again, which queues nothing new.
        await removeFromOutbox(
          collection,
          holder,
          entries.map((entry) => entry.id),
        );
        return { relayed: entries.length, queued };
      }),
    );
    return sumCounts(counts);
  }

  return {
    /** One pass over every outbox: how many events it relayed and deliveries it queued. */
    async relayOnce(): Promise<RelayCount> {
      const endpoints = new Map<string, Promise<WebhookDoc[]>>();
      const endpointsOf = (applicationId: string) => {
        let found = endpoints.get(applicationId);
        if (!found) {
          found = findEnabledWebhooks(db, applicationId);
          endpoints.set(applicationId, found);
        }
        return found;
      };
      const relayed = await Promise.all([
        relayCollection(db.customers, endpointsOf),
        relayCollection(db.referrals, endpointsOf),
        relayCollection(db.checkpoints, endpointsOf),
        relayCollection(db.rewardGrants, endpointsOf),
      ]);
      return sumCounts(relayed);
    },
  };
}

/** What a relay pass did: events taken from outboxes, deliveries queued for them. */
export interface RelayCount {
  readonly relayed: number;
  readonly queued: number;
}

function sumCounts(counts: readonly RelayCount[]): RelayCount {
  return {
    relayed: counts.reduce((sum, count) => sum + count.relayed, 0),
    queued: counts.reduce((sum, count) => sum + count.queued, 0),
  };
}
