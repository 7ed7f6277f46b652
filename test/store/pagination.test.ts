import { deepStrictEqual } from "node:assert/strict";
import test from "ava";
import fc from "fast-check";
import type { ReferralStatusName } from "../../src/domain/referral-status.js";
import type { EnvironmentName, Tenant as TenantScope } from "../../src/domain/tenancy.js";
import type { Collections } from "../../src/store/collection.js";
import { type CustomerFilter, findCustomers } from "../../src/store/customers.js";
import type { PageRequest } from "../../src/store/paging.js";
import { findReferrals, type ReferralFilter } from "../../src/store/referrals.js";
import type { Store } from "../../src/store/store.js";
import { engineNames, openTestStore } from "../helpers/engines.js";

/**
 * Paging is correct for any data: walking every page with any limit yields
 * each matching record exactly once, newest first with ties broken by id,
 * and every page reports the exact total. Random data sets (with many equal
 * creation times, so the tie-break matters), random filters, random limits.
 */

const statuses: ReferralStatusName[] = ["pending", "flagged", "accepted", "rejected"];
const environments: EnvironmentName[] = ["production", "test"];
const base = Date.UTC(2026, 0, 1);

/** A record as generated: an id, one of a few creation times, and filterable fields. */
interface GeneratedRecord {
  readonly id: string;
  readonly createdAtSecond: number;
  readonly status: ReferralStatusName;
  readonly campaignId: string;
  readonly environment: EnvironmentName;
}

const recordsArbitrary: fc.Arbitrary<GeneratedRecord[]> = fc.uniqueArray(
  fc.record({
    id: fc.stringMatching(/^[0-9a-f]{1,6}$/),
    createdAtSecond: fc.integer({ min: 0, max: 4 }),
    status: fc.constantFrom(...statuses),
    campaignId: fc.constantFrom("cmp_a", "cmp_b"),
    environment: fc.constantFrom(...environments),
  }),
  { selector: (record) => record.id, maxLength: 45 },
);

const referralFilterArbitrary: fc.Arbitrary<ReferralFilter> = fc.record(
  {
    status: fc.constantFrom(...statuses),
    campaignId: fc.constantFrom("cmp_a", "cmp_b", "cmp_none"),
    environment: fc.constantFrom(...environments),
  },
  { requiredKeys: [] },
);

/** Ids are unique across runs (the store is shared): the tenant's name, then the generated id. */
const idIn = (tenant: TenantScope) => (id: string) => `${tenant.applicationId}_${id}`;

/** Every page, from offset 0 until a page comes back short. */
async function walk<T extends { _id: string }>(
  limit: number,
  fetchPage: (page: PageRequest) => Promise<{ total: number; docs: T[] }>,
): Promise<{ ids: string[]; totals: number[] }> {
  const ids: string[] = [];
  const totals: number[] = [];
  for (let offset = 0; ; offset += limit) {
    const { total, docs } = await fetchPage({ limit, offset });
    totals.push(total);
    ids.push(...docs.map((doc) => doc._id));
    if (docs.length < limit) return { ids, totals };
  }
}

/** The expected order: createdAt descending, then id descending. */
function newestFirst(records: readonly GeneratedRecord[]): string[] {
  return [...records]
    .sort(
      (a, b) => b.createdAtSecond - a.createdAtSecond || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0),
    )
    .map((record) => record.id);
}

/** How one list is paged: its filters, and how a generated record is stored and matched. */
interface PagedList<F> {
  readonly name: string;
  readonly filters: fc.Arbitrary<F>;
  matches(record: GeneratedRecord, filter: F): boolean;
  insert(store: Store, tenant: TenantScope, record: GeneratedRecord, at: Date): Promise<unknown>;
  find(
    db: Collections,
    tenant: TenantScope,
    filter: F,
    page: PageRequest,
  ): Promise<{ total: number; docs: { _id: string }[] }>;
}

const referralList: PagedList<ReferralFilter> = {
  name: "ListReferrals",
  filters: referralFilterArbitrary,
  matches: (record, filter) =>
    (filter.status === undefined || record.status === filter.status) &&
    (filter.campaignId === undefined || record.campaignId === filter.campaignId) &&
    (filter.environment === undefined || record.environment === filter.environment),
  insert: (store, tenant, record, at) =>
    store.system.referrals.insertOne({
      _id: idIn(tenant)(record.id),
      ...tenant,
      environment: record.environment,
      campaignId: record.campaignId,
      referrerId: "cus_referrer",
      refereeId: `cus_${record.id}`,
      status: record.status,
      suspectedFrauds: [],
      statusHistory: [],
      attributedAt: at,
      createdAt: at,
      updatedAt: at,
      deletedAt: null,
    }),
  find: findReferrals,
};

const customerList: PagedList<CustomerFilter> = {
  name: "ListCustomers",
  filters: fc.record({ environment: fc.constantFrom(...environments) }, { requiredKeys: [] }),
  matches: (record, filter) =>
    filter.environment === undefined || record.environment === filter.environment,
  insert: (store, tenant, record, at) =>
    store.system.customers.insertOne({
      _id: idIn(tenant)(record.id),
      ...tenant,
      environment: record.environment,
      externalUserId: `user-${record.id}`,
      email: null,
      emailNormalized: null,
      emailCanonical: null,
      name: record.id,
      referralCode: `CODE${record.id}`,
      customProperties: {},
      createdAt: at,
      updatedAt: at,
      deletedAt: null,
    }),
  find: findCustomers,
};

for (const engine of engineNames) {
  let runs = 0;
  /** A tenant no other run uses, so runs share one store without seeing each other. */
  const nextTenant = (): TenantScope => ({
    organizationId: "org_paging",
    applicationId: `app_paging_${++runs}`,
  });

  const pagingTest = <F>(list: PagedList<F>) =>
    test(`${engine}: ${list.name} pages hold every match exactly once, in order, with the exact total`, async (t) => {
      const { store, cleanup } = await openTestStore(engine);
      try {
        await fc.assert(
          fc.asyncProperty(
            recordsArbitrary,
            list.filters,
            fc.integer({ min: 1, max: 12 }),
            async (records, filter, limit) => {
              const tenant = nextTenant();
              for (const record of records) {
                await list.insert(
                  store,
                  tenant,
                  record,
                  new Date(base + record.createdAtSecond * 1000),
                );
              }
              const matching = records.filter((record) => list.matches(record, filter));
              const { ids, totals } = await walk(limit, (page) =>
                list.find(store.system, tenant, filter, page),
              );
              // assert throws, so fast-check sees the failure and shrinks it.
              deepStrictEqual(ids, newestFirst(matching).map(idIn(tenant)));
              deepStrictEqual(new Set(totals), new Set([matching.length]));
            },
          ),
          { numRuns: 100 },
        );
        t.pass();
      } finally {
        await cleanup();
      }
    });

  pagingTest(referralList);
  pagingTest(customerList);
}
