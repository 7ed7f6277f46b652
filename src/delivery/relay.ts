import type { Clock } from "../domain/tenancy.js";
import { endpointWants } from "../domain/webhook-events.js";
import { eventOf, eventTypeOf } from "../events/events.js";
import { type FirstAttempt, type QueuedLease, queueDelivery } from "../store/deliveries.js";
import type { DeliveryDoc, EventDoc, WebhookDoc } from "../store/documents.js";
import { withErasedScrubbed } from "../store/erasure.js";
import {
  findEvent,
  findOutboxHolders,
  type HolderCollection,
  type HolderName,
  removeFromOutbox,
  storeEvent,
  storeRelayed,
} from "../store/events.js";
import { keptWhileMarkStays } from "../store/kept-reads.js";
import { changeMarksOf, erasureMarkOf, forgetFreedOf, type Store } from "../store/store.js";
import { findEnabledWebhooks } from "../store/webhooks.js";

/** How many documents the relay takes from a collection per pass. */
const batchSize = 100;

/** Applications whose enabled endpoints the relay keeps at most (see `enabledEndpointsOf`). */
const maxApplicationsKept = 1_000;

/**
 * Moves events from the documents' outboxes to the `events` collection and
 * delivers them to each endpoint that wants them. Every step is idempotent
 * (event ids and (event, endpoint) pairs are unique keys), so a crash at any
 * point only repeats work; the outbox entry is removed last.
 *
 * A new event's deliveries are attempted before anything is stored
 * (`attemptFirst`); then the event, each delivery with its attempt (the
 * first that succeeded kept in the event itself, see `EventDoc.delivered`)
 * and the emptied outbox are stored in one write (see `storeRelayed`):
 * where queueing a delivery, recording its attempt and clearing the outbox
 * took three. The events stay in the document's outbox until that write,
 * so a crash or a stop before it loses nothing: they are relayed again,
 * their deliveries queued then, and sent again (deliveries are at least
 * once). Meanwhile the document is not relayed again by this relay.
 */
export function createOutboxRelay(deps: {
  store: Store;
  clock: Clock;
  /**
   * The local workers, to hand deliveries over in memory (see
   * `createDispatcher`): attempted first, or queued already leased to them;
   * without them, workers claim every delivery from the store.
   */
  workers?: {
    /**
     * Takes a new event's delivery to attempt before it is stored; resolves
     * with how the attempt went, or null when it was not made (a stop).
     * None while the workers hold enough already (a slow endpoint): the
     * delivery is then queued in the store first, so the documents whose
     * outbox waits for an attempt stay bounded. The relay adds no lower
     * bound of its own: with one (256), deliveries to a fast endpoint went
     * through the store whenever the writes kept the workers behind, three
     * writes more each, and fell further behind.
     */
    attemptFirst(
      event: EventDoc,
      webhook: WebhookDoc,
      now: Date,
    ): Promise<FirstAttempt | null> | undefined;
    leaseForQueued(): QueuedLease | undefined;
    handOver(delivery: DeliveryDoc, event: EventDoc): void;
  };
  /** Told when a document whose outbox waited for first attempts still holds events to relay. */
  wake?: () => void;
  log?: (error: unknown, message: string) => void;
}) {
  const { store, clock } = deps;

  const db = store.system;
  // One relay writes the embedded store. On MongoDB every instance relays,
  // and one that finds an event another stored queues its deliveries at
  // once: a first attempt made meanwhile would be sent twice.
  const firstHere = store.engine === "embedded" && deps.workers !== undefined;
  /** Documents whose outbox waits for first attempts, by collection, then id. */
  const awaitingIn: Record<HolderName, Map<string, Promise<void>>> = {
    customers: new Map(),
    referrals: new Map(),
    checkpoints: new Map(),
    rewardGrants: new Map(),
  };
  // Per collection, its change mark (see `EmbeddedWriter.changeMarkOf`)
  // when a pass last found nothing to relay there: while the mark stays,
  // the collection is not read. At a moderate rate a pass runs for nearly
  // every event, and reading the four collections cost more than the event.
  const markOf = changeMarksOf(store);
  const erasureMark = erasureMarkOf(store);
  const forgetFreed = forgetFreedOf(store);
  const scrubbed = (event: EventDoc) => withErasedScrubbed(db, event, erasureMark, forgetFreed);
  const nothingAt: Partial<Record<HolderName, number>> = {};
  // Per collection, the documents a pass read past while their first
  // attempts were out (see `findOutboxHolders`). A write may append an
  // event to one after its storing read the outbox and before it is
  // released: the pass that read past it may have recorded "nothing" at a
  // mark that already counts the append, and the event would wait for the
  // collection's next change. Releasing one clears that record and wakes
  // the relay; a pass during which one was released records nothing.
  const readPast: Record<HolderName, Set<string>> = {
    customers: new Set(),
    referrals: new Set(),
    checkpoints: new Set(),
    rewardGrants: new Set(),
  };
  // The enabled endpoints of each application, kept while the webhooks'
  // change mark stays: a read would answer the same. Without a mark
  // (MongoDB), once per pass (`passes` stands in for the mark).
  let passes = 0;
  const enabledEndpointsOf = keptWhileMarkStays(
    () => markOf?.("webhooks") ?? passes,
    (applicationId: string) => findEnabledWebhooks(db, applicationId),
    maxApplicationsKept,
  );

  /**
   * Queues an event's deliveries to endpoints, its event stored already;
   * not the one the event keeps (made before a stop cut its other attempts short).
   */
  async function queue(
    event: EventDoc,
    endpoints: readonly WebhookDoc[],
    now: Date,
  ): Promise<number> {
    const keptFor = event.delivered?.webhookId;
    const forAny = await Promise.all(
      endpoints.map(async (webhook) => {
        if (webhook._id === keptFor) return 0;
        const lease = deps.workers?.leaseForQueued();
        const delivery = await queueDelivery(db, event, webhook, now, lease);
        if (delivery && lease) deps.workers?.handOver(delivery, event);
        return delivery && !lease ? 1 : 0;
      }),
    );
    return forAny.reduce<number>((sum, count) => sum + count, 0);
  }

  async function relayCollection(
    name: HolderName,
    collection: HolderCollection,
    endpointsOf: (applicationId: string) => Promise<WebhookDoc[]>,
  ): Promise<RelayCount> {
    const awaiting = awaitingIn[name];
    const mark = markOf?.(name);
    if (mark !== undefined && nothingAt[name] === mark) return nothingRelayed;
    // Documents whose outbox waits for first attempts are still flagged,
    // and found again: read past them.
    const passedNow: string[] = [];
    const holders = await findOutboxHolders(collection, batchSize, {
      get size() {
        return awaiting.size;
      },
      has(id) {
        if (!awaiting.has(id)) return false;
        readPast[name].add(id);
        passedNow.push(id);
        return true;
      },
    });
    const noneReleased = passedNow.every((id) => awaiting.has(id));
    if (holders.length === 0 && noneReleased) nothingAt[name] = mark;
    else delete nothingAt[name];
    // Holders are relayed concurrently: each write waits for a commit, and
    // the embedded engine commits the writes of one turn together, so a
    // batch costs a few commits rather than a few per event.
    const counts = await Promise.all(
      holders.map(async (holder): Promise<RelayCount> => {
        const entries = holder.outbox ?? [];
        const entryIds = entries.map((entry) => entry.id);
        let queued = 0;
        let forAnyWorker = 0;
        /** Events built for their first attempts, stored with them. */
        const unstored: EventDoc[] = [];
        const attempted: Promise<FirstAttempt | null>[] = [];
        for (const entry of entries) {
          const type = eventTypeOf(holder, entry);
          const wanted = (await endpointsOf(holder.applicationId)).filter((webhook) =>
            endpointWants(webhook, { type, environment: holder.environment }),
          );
          // An event no endpoint wants is dropped here rather than stored.
          if (wanted.length === 0) continue;
          queued += wanted.length;
          // Stored already when relayed again after a crash: its first
          // payload is the one sent, and its deliveries are queued (kept once).
          const storedBefore = firstHere ? await findEvent(db, entry.id) : null;
          if (!firstHere || storedBefore) {
            const stored =
              storedBefore ?? (await storeEvent(db, await eventOf(db, holder, entry, type)));
            forAnyWorker += await queue(await scrubbed(stored), wanted, clock());
            continue;
          }
          // A customer erased already is scrubbed before the event is built
          // into attempts; one erased since, before its attempt (the
          // dispatcher reads again) and before it is stored (see below).
          const event = await scrubbed(await eventOf(db, holder, entry, type));
          const now = clock();
          const toQueue: WebhookDoc[] = [];
          for (const webhook of wanted) {
            const first = deps.workers?.attemptFirst(event, webhook, now);
            if (first) attempted.push(first);
            else toQueue.push(webhook);
          }
          if (toQueue.length === 0) {
            unstored.push(event);
            continue;
          }
          // The rest wait in the store for any worker, which reads the event there.
          const stored = await scrubbed(await storeEvent(db, event));
          forAnyWorker += await queue(stored, toQueue, now);
        }
        if (attempted.length === 0) {
          // Last, and all of the holder's entries at once: a crash before
          // this only relays them again, which queues nothing new.
          await removeFromOutbox(collection, holder, entryIds);
          return { relayed: entries.length, queued, forAnyWorker, more: false };
        }
        // Once every first attempt is made; the pass goes on meanwhile.
        const key = holder._id;
        // Whether the outbox may hold events still (unknown until stored).
        let left = true;
        const storing = Promise.all(attempted)
          .then(async (attempts) => {
            const made = attempts.filter((attempt) => attempt !== null);
            // Each event as its attempts sent it: scrubbed of a customer
            // erased while it waited for a worker, it is stored so.
            const sent = new Map(
              made.flatMap((attempt) => (attempt.sent ? [[attempt.sent._id, attempt.sent]] : [])),
            );
            const events = unstored.map((event) => sent.get(event._id) ?? event);
            left = await storeRelayed(
              db,
              store.together,
              {
                collection: name,
                holder,
                entryIds,
                events,
                attempts: made,
                done: made.length === attempts.length,
              },
              clock(),
            );
            // Read after the events are stored, as `withErasedScrubbed` requires.
            await Promise.all(events.map(scrubbed));
          })
          .catch((error: unknown) =>
            deps.log?.(error, "storing relayed events failed; they are relayed again"),
          )
          .finally(() => {
            awaiting.delete(key);
            const wasReadPast = readPast[name].delete(key);
            // Not emptied, or read past by a pass that may have missed an
            // event appended meanwhile: read again.
            if (!left && !wasReadPast) return;
            delete nothingAt[name];
            deps.wake?.();
          });
        awaiting.set(key, storing);
        return { relayed: entries.length, queued, forAnyWorker, more: false };
      }),
    );
    return { ...sumCounts(counts), more: holders.length >= batchSize };
  }

  return {
    /** Resolves once no outbox waits for a first attempt (after a stop released them). */
    async settled(): Promise<void> {
      const all = () => Object.values(awaitingIn).flatMap((awaiting) => [...awaiting.values()]);
      for (let left = all(); left.length > 0; left = all()) await Promise.all(left);
    },
    /** One pass over every outbox: how many events it relayed and deliveries it queued. */
    async relayOnce(): Promise<RelayCount> {
      passes += 1;
      const relayed = await Promise.all([
        relayCollection("customers", db.customers, enabledEndpointsOf),
        relayCollection("referrals", db.referrals, enabledEndpointsOf),
        relayCollection("checkpoints", db.checkpoints, enabledEndpointsOf),
        relayCollection("rewardGrants", db.rewardGrants, enabledEndpointsOf),
      ]);
      return sumCounts(relayed);
    },
  };
}

/** What a relay pass did: events taken from outboxes, deliveries queued for them. */
export interface RelayCount {
  readonly relayed: number;
  readonly queued: number;
  /** Of those, the ones queued in the store for any worker to claim (none handed over). */
  readonly forAnyWorker: number;
  /** Whether a collection had more documents to relay than a pass takes. */
  readonly more: boolean;
}

const nothingRelayed: RelayCount = { relayed: 0, queued: 0, forAnyWorker: 0, more: false };

function sumCounts(counts: readonly RelayCount[]): RelayCount {
  return {
    relayed: counts.reduce((sum, count) => sum + count.relayed, 0),
    queued: counts.reduce((sum, count) => sum + count.queued, 0),
    forAnyWorker: counts.reduce((sum, count) => sum + count.forAnyWorker, 0),
    more: counts.some((count) => count.more),
  };
}
