import type { Tenant } from "../domain/tenancy.js";
import {
  findCampaign,
  findCampaigns,
  findCampaignsByIds,
  findDefaultCampaign,
  updateCampaignPing,
} from "./campaigns.js";
import { insertCheckpoint } from "./checkpoints.js";
import type { Collections } from "./collection.js";
import { customerMessages, customerPage, customerView } from "./customer-records.js";
import type { CustomerViews } from "./customer-views.js";
import {
  type CustomerFilter,
  findCustomer,
  findCustomerByExternalId,
  findCustomerByReferralCode,
  upsertCustomer,
} from "./customers.js";
import { findDeliveries, findDelivery, requeueDelivery } from "./deliveries.js";
import type { CustomerDoc } from "./documents.js";
import type { PageRequest } from "./paging.js";
import {
  countReferralsAttributedSince,
  findPendingReferralsOfReferee,
  findReferral,
  findReferralOfReferee,
  findReferrals,
  insertReferral,
  isMailboxAlreadyReferred,
  reattributeReferral,
  transitionReferral,
} from "./referrals.js";
import { findWebhook, findWebhooks, insertWebhook, updateWebhook } from "./webhooks.js";

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

/** The repositories of one tenant over the collections. */
export function createTenantStore(db: Collections, tenant: Tenant, views?: CustomerViews) {
  // biome-ignore lint/suspicious/noExplicitAny: binding is checked by the Bound type above.
  const bind = <F extends (db: Collections, tenant: Tenant, ...rest: any[]) => unknown>(
    repository: F,
  ) => ((...rest: unknown[]) => repository(db, tenant, ...rest)) as Bound<F>;
  return {
    tenant,
    customers: {
      identify: bind(upsertCustomer),
      find: bind(findCustomer),
      findByExternalId: bind(findCustomerByExternalId),
      findByReferralCode: bind(findCustomerByReferralCode),
      /** The API's view of customers: stored fields and referral facts. */
      messages: (docs: readonly CustomerDoc[]) => customerMessages(db, tenant, docs, views),
      /** The API's view of one customer by id (kept in memory where the engine allows). */
      view: (id: string) => customerView(db, tenant, id, views),
      /** A page of ListCustomers as the API shows it (kept views where the engine allows). */
      page: (filter: CustomerFilter, page: PageRequest) =>
        customerPage(db, tenant, filter, page, views),
    },
    referrals: {
      find: bind(findReferral),
      findOfReferee: bind(findReferralOfReferee),
      findPendingOfReferee: bind(findPendingReferralsOfReferee),
      findMany: bind(findReferrals),
      countAttributedSince: bind(countReferralsAttributedSince),
      isMailboxAlreadyReferred: bind(isMailboxAlreadyReferred),
      insert: bind(insertReferral),
      reattribute: bind(reattributeReferral),
      transition: bind(transitionReferral),
    },
    checkpoints: { insert: bind(insertCheckpoint) },
    campaigns: {
      find: bind(findCampaign),
      findDefault: bind(findDefaultCampaign),
      findMany: bind(findCampaigns),
      findByIds: bind(findCampaignsByIds),
      updatePing: bind(updateCampaignPing),
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
      requeue: bind(requeueDelivery),
    },
  };
}
