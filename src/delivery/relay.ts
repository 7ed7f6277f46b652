import {
  CampaignSchema,
  CustomerSchema,
  type Reward,
  RewardParty,
  RewardSchema,
} from "../../gen/referral/v1/resources_pb.js";
import { toPlain } from "../contract/plain-codec.js";
import { endpointWants, type WebhookEventType } from "../domain/webhook-events.js";
import { customerMessages } from "../services/customer-records.js";
import { type Clock, messageFromDoc } from "../services/records.js";
import { findCampaignById } from "../store/campaigns.js";
import type { StoreCollection } from "../store/collection.js";
import { queueDelivery } from "../store/deliveries.js";
import type {
  CustomerDoc,
  EnvironmentName,
  EventDoc,
  OutboxEntryDoc,
  WebhookDoc,
} from "../store/documents.js";
import {
  findOutboxHolders,
  type OutboxHolder,
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
export function createOutboxRelay(deps: { store: Store; clock: Clock }) {
  const { store, clock } = deps;

  async function eventFrom(
    holder: OutboxHolder & { environment: EnvironmentName },
    entry: OutboxEntryDoc,
    type: WebhookEventType,
  ): Promise<EventDoc> {
    let data = entry.data;
    if (entry.type === "customer.identified") {
      const [customer] = await customerMessages(store, [holder as unknown as CustomerDoc]);
      data = customer ? toPlain(CustomerSchema, customer) : {};
    }
    if (type === "referral.accepted" && data) {
      data = { ...data, rewards: await rewardsOf(store, String(data.campaignId)) };
    }
    return {
      _id: entry.id,
      organizationId: holder.organizationId,
      applicationId: holder.applicationId,
      environment: holder.environment,
      type,
      payload: JSON.stringify({
        type,
        timestamp: entry.occurredAt.toISOString(),
        data: data ?? {},
      }),
      createdAt: entry.occurredAt,
    };
  }

  async function relayCollection<T extends OutboxHolder & { environment: EnvironmentName }>(
    collection: StoreCollection<T>,
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
          const type = typeOf(holder, entry);
          const wanted = (await endpointsOf(holder.applicationId)).filter((webhook) =>
            endpointWants(webhook, { type, environment: holder.environment }),
          );
          // An event no endpoint wants is dropped here rather than stored.
          if (wanted.length === 0) continue;
          const event = await storeEvent(store, await eventFrom(holder, entry, type));
          const now = clock();
          await Promise.all(wanted.map((webhook) => queueDelivery(store, event, webhook, now)));
          queued += wanted.length;
        }
        // Last, and all of the holder's entries at once: a crash before this
        // only relays them again, which queues nothing new.
        await removeFromOutbox(
          collection,
          holder._id,
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
          found = findEnabledWebhooks(store, applicationId);
          endpoints.set(applicationId, found);
        }
        return found;
      };
      const relayed = await Promise.all([
        relayCollection(store.customers, endpointsOf),
        relayCollection(store.referrals, endpointsOf),
        relayCollection(store.checkpoints, endpointsOf),
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

/** An entry's event type; an identify created the customer if it got the attempt's id. */
function typeOf(holder: OutboxHolder, entry: OutboxEntryDoc): WebhookEventType {
  if (entry.type !== "customer.identified") return entry.type;
  return holder._id === entry.newCustomerId ? "customer.created" : "customer.updated";
}

/** A campaign's enabled rewards for each party, as `referral.accepted` carries them. */
async function rewardsOf(
  store: Store,
  campaignId: string,
): Promise<{ referrer: unknown[]; referee: unknown[] }> {
  const campaign = await findCampaignById(store, campaignId);
  const rewards: Reward[] = campaign ? messageFromDoc(CampaignSchema, campaign).rewards : [];
  const enabled = rewards.filter((reward) => !reward.disabled);
  const forParty = (party: RewardParty) =>
    enabled
      .filter((reward) => reward.party === party)
      .map((reward) => toPlain(RewardSchema, reward));
  return {
    referrer: forParty(RewardParty.REFERRER),
    referee: forParty(RewardParty.REFEREE),
  };
}
