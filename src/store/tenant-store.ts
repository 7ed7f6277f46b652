import type { ReferralStatusName } from "../domain/referral-status.js";
import type { RuledStatus, StatusChange } from "../domain/referral-transitions.js";
import type { GrantMove } from "../domain/reward-grant.js";
import type { EnvironmentName, Tenant } from "../domain/tenancy.js";
import {
  findCampaign,
  findCampaigns,
  findCampaignsByIds,
  findDefaultCampaign,
  updateCampaignPing,
} from "./campaigns.js";
import { checkpointWrite, findCheckpointsOfCustomer, insertCheckpoint } from "./checkpoints.js";
import { countClicksFromNetwork, findClick } from "./clicks.js";
import type { Collections, WriteTogether } from "./collection.js";
import { customerMessages, customerPage, customerView } from "./customer-records.js";
import type { CustomerViews } from "./customer-views.js";
import {
  type CustomerFilter,
  findCustomer,
  findCustomerByExternalId,
  findCustomerByReferralCode,
  findCustomersByIds,
  type IdentifyInput,
  type IdentifyWrite,
  upsertCustomer,
} from "./customers.js";
import { findDeliveries, findDelivery, requeueDelivery } from "./deliveries.js";
import type {
  CheckpointDoc,
  DeliveryDoc,
  IdempotencyKeyDoc,
  OutboxEntryDoc,
  ReferralDoc,
  RewardGrantDoc,
} from "./documents.js";
import { eraseEverywhere } from "./erasure.js";
import { findEventsAboutCustomer } from "./events.js";
import { findIdempotencyRecords, removeIdempotencyKey } from "./idempotency.js";
import { findReferralsToExport, tenantInsights } from "./insights.js";
import type { PageRequest } from "./paging.js";
import {
  clearAwaitsConfirmation,
  clearReviewDue,
  countEvidence,
  endRewardsHold,
  findConvertibleReferralsOfReferee,
  findReferral,
  findReferralOfReferee,
  findReferrals,
  findReferralsForReview,
  insertReferral,
  isMailboxAlreadyReferred,
  type ReferralRewardWork,
  reattributeReferral,
  referralsOfCampaignBetween,
  transitionReferral,
} from "./referrals.js";
import {
  clearReleasePending,
  clearReversalPending,
  countSlotsHeld,
  findGrantsOfReferral,
  findRewardGrant,
  findRewardGrants,
  findRewardSnapshots,
  findSlotsHeld,
  giveRoomBack,
  insertRewardGrant,
  moveRewardGrant,
  type PlacedGrant,
  planCustomerGrants,
  removeFromCustomerPlan,
  removeFromReferralPlan,
  rewardBalanceOf,
  roomToTake,
  storeRewardSnapshot,
  takeRoom,
  transitionWithGrants,
} from "./reward-grants.js";
import type { StatsStore } from "./stats.js";
import { ensureNetworkKey, findApplicationCached } from "./tenants.js";
import type { WebhookAudience } from "./webhook-audience.js";
import { findWebhook, findWebhooks, insertWebhook, updateWebhook } from "./webhooks.js";

/**
 * The events a write raises, or how to build them: a write nobody listens
 * to (see webhook-audience.ts) never builds them.
 */
export type Outbox = readonly OutboxEntryDoc[] | (() => readonly OutboxEntryDoc[]);

const eventsOf = (outbox: Outbox) => (typeof outbox === "function" ? outbox() : outbox);
const noEvents = () => [];

/** A checkpoint not stored yet, with the events it raises: stored in the write of the conversion it makes. */
export interface UnstoredCheckpoint {
  readonly doc: CheckpointDoc;
  readonly outbox: Outbox;
}

/** A repository function with the collections and the tenant already given. */
type Bound<F> = F extends (db: Collections, tenant: Tenant, ...rest: infer A) => infer R
  ? (...rest: A) => R
  : never;

/**
 * One application's data: every repository a service may use, bound to the
 * caller's tenant, so a query that forgets the tenant cannot be written.
 * Services get it from the call (`callerOf(context).store`); the system
 * paths use `store.system` instead.
 */
export type TenantStore = ReturnType<typeof createTenantStore>;

/**
 * What the store keeps in memory where it sees every write (the embedded
 * engine): customers' views, and who listens to webhook events.
 */
export interface KeptInMemory {
  readonly views: CustomerViews;
  readonly audience: WebhookAudience;
  /** Leaves no copy of erased data in the database's files (see `SqliteDatabase.forgetFreed`). */
  readonly afterErasure?: () => Promise<void>;
}

/** The repositories of one tenant over the collections. */
export function createTenantStore(
  db: Collections,
  tenant: Tenant,
  stats: StatsStore,
  kept?: KeptInMemory,
  /** Writes made together, where the engine makes them (see `WriteTogether`). */
  together?: WriteTogether,
) {
  // biome-ignore lint/suspicious/noExplicitAny: binding is checked by the Bound type above.
  const bind = <F extends (db: Collections, tenant: Tenant, ...rest: any[]) => unknown>(
    repository: F,
  ) => ((...rest: unknown[]) => repository(db, tenant, ...rest)) as Bound<F>;
  const views = kept?.views;
  // Writes with events keep only those someone listens to (see
  // webhook-audience.ts), and build them only then. The decision is made
  // in the step that starts the write, so no endpoint can be created in
  // between.
  const keeping = async <R>(
    environment: EnvironmentName,
    write: (keep: (outbox: Outbox) => readonly OutboxEntryDoc[]) => Promise<R>,
  ): Promise<R> => {
    if (!kept) return write(eventsOf);
    for (;;) {
      const listens = kept.audience.listens(tenant.applicationId, environment);
      if (!(listens instanceof Promise)) return write(listens ? eventsOf : noEvents);
      await listens;
    }
  };
  const listened = <R>(
    environment: EnvironmentName,
    outbox: Outbox,
    write: (outbox: readonly OutboxEntryDoc[]) => Promise<R>,
  ): Promise<R> => keeping(environment, (keep) => write(keep(outbox)));
  return {
    tenant,
    /** The tenant's application: its identity secret and verification mode (docs/trust.md). */
    application: {
      find: () => findApplicationCached(db, tenant.applicationId),
      /** Its network key, sealed, made now with `sealed` unless it exists. */
      ensureNetworkKey: (sealed: string) => ensureNetworkKey(db, tenant.applicationId, sealed),
    },
    customers: {
      identify: (input: IdentifyInput, write: IdentifyWrite) =>
        listened(input.environment, write.outbox, (outbox) =>
          upsertCustomer(db, tenant, input, { ...write, outbox }),
        ),
      find: bind(findCustomer),
      /**
       * Erases the customer's personal data, in its record and in what
       * else holds it (its checkpoints, the stored events about it).
       */
      erase: (id: string, at: Date, outbox: readonly OutboxEntryDoc[]) =>
        eraseEverywhere(
          db,
          tenant,
          id,
          at,
          (environment, write) => listened(environment, outbox, write),
          kept?.afterErasure,
        ),
      findByExternalId: bind(findCustomerByExternalId),
      findByReferralCode: bind(findCustomerByReferralCode),
      /** The API's view of customers: stored fields and referral facts. */
      messages: bind(customerMessages),
      /** The API's view of one customer by id (kept in memory where the engine allows). */
      view: (id: string) => customerView(db, tenant, id, views),
      /** A page of ListCustomers as the API shows it (kept views where the engine allows). */
      page: (filter: CustomerFilter, page: PageRequest) =>
        customerPage(db, tenant, filter, page, views),
    },
    referrals: {
      find: bind(findReferral),
      findOfReferee: bind(findReferralOfReferee),
      findConvertibleOfReferee: bind(findConvertibleReferralsOfReferee),
      clearAwaitsConfirmation: bind(clearAwaitsConfirmation),
      clearReviewDue: bind(clearReviewDue),
      endRewardsHold: (referral: ReferralDoc, at: Date, outbox: readonly OutboxEntryDoc[]) =>
        listened(referral.environment, outbox, (events) =>
          endRewardsHold(db, tenant, referral._id, at, events),
        ),
      findMany: bind(findReferrals),
      countEvidence: bind(countEvidence),
      isMailboxAlreadyReferred: bind(isMailboxAlreadyReferred),
      findForReview: bind(findReferralsForReview),
      ofCampaignBetween: bind(referralsOfCampaignBetween),
      insert: (doc: ReferralDoc, outbox: readonly OutboxEntryDoc[]) =>
        listened(doc.environment, outbox, (events) => insertReferral(db, tenant, doc, events)),
      reattribute: (
        current: ReferralDoc,
        referrerId: string,
        ruled: RuledStatus,
        change: StatusChange,
        outbox: readonly OutboxEntryDoc[],
      ) =>
        listened(current.environment, outbox, (events) =>
          reattributeReferral(db, tenant, current, referrerId, ruled, change, events),
        ),
      transition: (
        current: ReferralDoc,
        change: StatusChange & { fromStatus: ReferralStatusName },
        outbox: Outbox,
        rewards?: ReferralRewardWork,
      ) =>
        listened(current.environment, outbox, (events) =>
          transitionReferral(db, tenant, current, change, events, rewards),
        ),
      /**
       * `transition` with the grants the change earns, in one atomic write
       * (see `transitionWithGrants`). Absent where the engine cannot write
       * several documents together (MongoDB): the grants are planned there
       * (see `makePlannedGrants`).
       */
      transitionWithGrants: together
        ? (
            current: ReferralDoc,
            change: StatusChange & { fromStatus: ReferralStatusName },
            outbox: Outbox,
            grants: readonly PlacedGrant[],
            rewards?: ReferralRewardWork,
            /** The checkpoint that makes the change, stored in the same write (see `storeCheckpointAndConvert`). */
            checkpoint?: UnstoredCheckpoint,
          ) =>
            keeping(current.environment, (keep) =>
              transitionWithGrants(
                together,
                tenant,
                current,
                change,
                keep(outbox),
                grants,
                rewards,
                checkpoint
                  ? [checkpointWrite(tenant, checkpoint.doc, keep(checkpoint.outbox))]
                  : [],
              ),
            )
        : undefined,
    },
    rewards: {
      find: bind(findRewardGrant),
      findMany: bind(findRewardGrants),
      findOfReferral: bind(findGrantsOfReferral),
      insert: (doc: RewardGrantDoc, outbox: Outbox) =>
        listened(doc.environment, outbox, (events) => insertRewardGrant(db, tenant, doc, events)),
      move: (current: RewardGrantDoc, move: GrantMove, outbox: Outbox) =>
        listened(current.environment, outbox, (events) =>
          moveRewardGrant(db, tenant, current, move, events),
        ),
      clearReleasePending: bind(clearReleasePending),
      balance: bind(rewardBalanceOf),
      takeRoom: bind(takeRoom),
      roomToTake: bind(roomToTake),
      countSlotsHeld: bind(countSlotsHeld),
      findSlotsHeld: bind(findSlotsHeld),
      giveRoomBack: bind(giveRoomBack),
      planForCustomer: bind(planCustomerGrants),
      removeFromReferralPlan: bind(removeFromReferralPlan),
      removeFromCustomerPlan: bind(removeFromCustomerPlan),
      clearReversalPending: bind(clearReversalPending),
      snapshots: bind(findRewardSnapshots),
      storeSnapshot: bind(storeRewardSnapshot),
    },
    clicks: {
      /** A click by id (`rclk`), in the tenant. */
      find: bind(findClick),
      countFromNetwork: bind(countClicksFromNetwork),
    },
    checkpoints: {
      insert: (doc: CheckpointDoc, outbox: Outbox) =>
        listened(doc.environment, outbox, (events) => insertCheckpoint(db, tenant, doc, events)),
      findOfCustomer: bind(findCheckpointsOfCustomer),
    },
    events: {
      /** The stored events about a customer, payloads as JSON (ExportCustomer). */
      aboutCustomer: bind(findEventsAboutCustomer),
    },
    idempotency: {
      /** The calls kept for replay under this application's keys. */
      records: () => findIdempotencyRecords(db, tenant.applicationId),
      /** Forgets a kept call: a retry with its key then runs again. */
      forget: (record: IdempotencyKeyDoc) => removeIdempotencyKey(db, record),
    },
    campaigns: {
      find: bind(findCampaign),
      findDefault: bind(findDefaultCampaign),
      findMany: bind(findCampaigns),
      findByIds: bind(findCampaignsByIds),
      updatePing: bind(updateCampaignPing),
    },
    insights: {
      ...tenantInsights(stats, tenant),
      /** The customers among `ids` by id, erased ones included (their tombstones). */
      customersByIds: async (ids: readonly string[]) =>
        new Map(
          (await findCustomersByIds(db, tenant, [...new Set(ids)])).map((doc) => [doc._id, doc]),
        ),
      /** A page of ExportReferrals, oldest first, after a cursor. */
      exportPage: bind(findReferralsToExport),
    },
    webhooks: {
      find: bind(findWebhook),
      findMany: bind(findWebhooks),
      insert: bind(insertWebhook),
      update: bind(updateWebhook),
    },
    deliveries: {
      find: bind(findDelivery),
      findMany: bind(findDeliveries),
      requeue: (delivery: DeliveryDoc, now: Date) =>
        requeueDelivery(db, tenant, delivery, now, together),
    },
  };
}
