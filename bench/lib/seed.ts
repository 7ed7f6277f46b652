import { canonicalEmail, normalizeEmailForLookup } from "../../src/domain/email.js";
import { newId } from "../../src/domain/ids.js";
import { referralCodeAlphabet, referralCodeLength } from "../../src/domain/referral-code.js";
import type { ReferralStatusName } from "../../src/domain/referral-status.js";
import type { EnvironmentName } from "../../src/domain/tenancy.js";
import { provisionDemo } from "../../src/services/provisioning.js";
import type { StoreCollection } from "../../src/store/collection.js";
import type { CampaignDoc, CustomerDoc, ReferralDoc } from "../../src/store/documents.js";
import { openStore } from "../../src/store/store.js";

/** The keys every bench store is provisioned with, so load generators know them. */
export const benchKeys = {
  secret: "sk_bench_secret_key_0000000000000000000000",
  public: "pk_bench_public_key_0000000000000000000000",
};

/**
 * Bench data lives in the `test` environment: the webhook receiver is plain
 * http on loopback, which only test endpoints may use, and every scenario
 * should see the same environment whether a webhook is subscribed or not.
 */
export const benchEnvironment: EnvironmentName = "test";

/** What to put into a fresh store. */
export interface SeedPlan {
  /** Customers `c-<i>`; half of the newer ones were referred by the oldest tenth. */
  readonly customers: number;
  /** Customers `p-<i>` with no referral: the referees of create-referral runs. */
  readonly referees?: number;
  /** Customers `t-<i>`, each referred (pending) in the default campaign: trigger-checkpoint targets. */
  readonly pendingReferees?: number;
  /**
   * Every tenth referral of the base goes to the oldest customer (`c-0`)
   * instead: one referrer with many referrals, as a popular one has.
   */
  readonly busyReferrer?: boolean;
  /**
   * Every customer but the oldest was referred (as many referrals as
   * customers, less one), each by the customer of half its number, instead
   * of the newer half only: the scale run's "1M customers and 1M referrals".
   */
  readonly everyoneReferred?: boolean;
}

/** What a seeded store holds, for building requests. */
export interface SeededData {
  /** The store engine seeded (`embedded`, `mongodb`), for the report. */
  readonly engine: string;
  readonly applicationId: string;
  readonly defaultCampaignId: string;
  /** The trigger that converts a pending referral of the default campaign. */
  readonly rewardTrigger: string;
  readonly customers: number;
  /** Referrals of the base customers (the `c-<i>`). */
  readonly referrals: number;
  /** A customer that was referred and refers others: a read that derives every field. */
  readonly sampleCustomerId: string;
  /** The oldest customer: with `busyReferrer`, the referrer of a tenth of the referrals. */
  readonly oldestCustomerId: string;
}

/**
 * Creates the store in `dataDir` (it must not exist or be empty), provisions
 * the demo tenant with the bench keys, and inserts the plan's documents
 * straight through the store's collections, much faster than through the API.
 */
export async function seedStore(
  dataDir: string,
  plan: SeedPlan,
  onProgress?: (inserted: number) => void,
): Promise<SeededData> {
  const store = await openStore({ dataDir });
  try {
    const now = new Date();
    const demo = await provisionDemo(store, {
      clock: () => now,
      bootstrapSecretKey: benchKeys.secret,
      bootstrapPublicKey: benchKeys.public,
    });
    if (!demo) throw new Error(`${dataDir} already holds a store; the bench seeds fresh ones`);
    const campaign = (await store.system.campaigns.findOne({
      applicationId: demo.applicationId,
      environment: benchEnvironment,
      isDefault: true,
    })) as CampaignDoc | null;
    if (!campaign) throw new Error("provisioning created no default campaign");
    const keyDoc = await store.system.apiKeys.findOne({ applicationId: demo.applicationId });
    const tenant = {
      organizationId: demo.organizationId,
      applicationId: demo.applicationId,
      campaignId: campaign._id,
      actorId: keyDoc?._id ?? "key_bench",
    };
    let inserted = 0;
    const progress = (count: number) => {
      inserted += count;
      onProgress?.(inserted);
    };
    const base = plan.customers;
    // The base spreads over the last day, so pages and time filters see a
    // realistic spread; the pools are recent, so the 7-day fraud rule passes.
    const day = 86_400_000;
    const baseAt = (i: number) => new Date(now.getTime() - day + Math.floor((i * day) / base));
    const recentAt = (i: number, n: number) =>
      new Date(now.getTime() - 3_600_000 + Math.floor((i * 3_000_000) / Math.max(n, 1)));
    const baseIds: string[] = [];
    await insertAll(
      store.system.customers,
      base,
      (i) => {
        const doc = customerDoc(tenant, `c-${i}`, i, baseAt(i));
        baseIds[i] = doc._id;
        return doc;
      },
      progress,
    );
    // The newer half was referred, each by a slightly older customer of that
    // half (two referees each), so some customers are both referee and referrer;
    // or, with everyoneReferred, every customer after the first, by the one of
    // half its number.
    const half = Math.floor(base / 2);
    const firstReferred = plan.everyoneReferred ? 1 : half + 1;
    const referrerOf = plan.everyoneReferred
      ? (i: number) => Math.floor(i / 2)
      : (i: number) => half + Math.floor((i - half) / 2);
    const referrals = Math.max(0, base - firstReferred);
    await insertAll(
      store.system.referrals,
      referrals,
      (k) => {
        const i = firstReferred + k;
        const status: ReferralStatusName = k % 3 === 0 ? "accepted" : "pending";
        const referrer = plan.busyReferrer && k % 10 === 0 ? 0 : referrerOf(i);
        return referralDoc(tenant, baseIds[referrer] as string, baseIds[i] as string, {
          status,
          at: baseAt(i),
        });
      },
      progress,
    );
    const referees = plan.referees ?? 0;
    await insertAll(
      store.system.customers,
      referees,
      (i) => customerDoc(tenant, `p-${i}`, base + i, recentAt(i, referees)),
      progress,
    );
    const pendingReferees = plan.pendingReferees ?? 0;
    const pendingIds: string[] = [];
    await insertAll(
      store.system.customers,
      pendingReferees,
      (i) => {
        const doc = customerDoc(
          tenant,
          `t-${i}`,
          base + referees + i,
          recentAt(i, pendingReferees),
        );
        pendingIds[i] = doc._id;
        return doc;
      },
      progress,
    );
    await insertAll(
      store.system.referrals,
      pendingReferees,
      (i) =>
        referralDoc(tenant, baseIds[i % base] as string, pendingIds[i] as string, {
          status: "pending",
          at: recentAt(i, pendingReferees),
        }),
      progress,
    );
    const rewardTrigger = campaign.manualRewardTrigger ?? campaign.proposedRewardTrigger;
    if (!rewardTrigger) throw new Error("the default campaign has no reward trigger");
    return {
      engine: store.engine,
      applicationId: demo.applicationId,
      defaultCampaignId: campaign._id,
      rewardTrigger,
      customers: base,
      referrals,
      // A referred customer that refers others (two, unless everyoneReferred).
      sampleCustomerId: baseIds[Math.min(half + 1, base - 1)] as string,
      oldestCustomerId: baseIds[0] as string,
    };
  } finally {
    await store.close();
  }
}

/** The external id, email and referral code of base customer `i`, as seeded. */
export function baseCustomer(i: number): {
  externalUserId: string;
  email: string;
  referralCode: string;
} {
  return { externalUserId: `c-${i}`, email: emailOf(`c-${i}`), referralCode: referralCodeOf(i) };
}

interface SeedTenant {
  readonly organizationId: string;
  readonly applicationId: string;
  readonly campaignId: string;
  readonly actorId: string;
}

function emailOf(externalUserId: string): string {
  return `${externalUserId}@example.com`;
}

function customerDoc(
  tenant: SeedTenant,
  externalUserId: string,
  index: number,
  at: Date,
): CustomerDoc {
  const email = emailOf(externalUserId);
  return {
    _id: newId("cus", at),
    organizationId: tenant.organizationId,
    applicationId: tenant.applicationId,
    environment: benchEnvironment,
    externalUserId,
    email,
    emailNormalized: normalizeEmailForLookup(email),
    emailCanonical: canonicalEmail(email),
    name: `Bench Customer ${index}`,
    referralCode: referralCodeOf(index),
    customProperties: { plan: index % 4 === 0 ? "pro" : "free" },
    createdAt: at,
    updatedAt: at,
    deletedAt: null,
  };
}

function referralDoc(
  tenant: SeedTenant,
  referrerId: string,
  refereeId: string,
  options: { status: ReferralStatusName; at: Date },
): ReferralDoc {
  const { at } = options;
  const created = {
    fromStatus: null,
    toStatus: "pending" as const,
    cause: "created" as const,
    actorId: tenant.actorId,
    reason: null,
    changedAt: at,
  };
  const history =
    options.status === "accepted"
      ? [
          created,
          {
            fromStatus: "pending" as const,
            toStatus: "accepted" as const,
            cause: "checkpoint" as const,
            actorId: newId("chk", at),
            reason: 'checkpoint "purchase"',
            changedAt: at,
          },
        ]
      : [created];
  return {
    _id: newId("ref", at),
    organizationId: tenant.organizationId,
    applicationId: tenant.applicationId,
    environment: benchEnvironment,
    campaignId: tenant.campaignId,
    referrerId,
    refereeId,
    status: options.status,
    suspectedFrauds: [],
    statusHistory: history,
    attributedAt: at,
    createdAt: at,
    updatedAt: at,
    deletedAt: null,
  };
}

// Multiplying by a number coprime to 31^8 permutes the code space, so
// consecutive indexes give distinct, random-looking codes and seeding never
// has to retry a collision.
const codeSpace = referralCodeAlphabet.length ** referralCodeLength;
const codeStride = 387_420_489;

/** The seeded referral code of customer `index`: unique for every index below 31^8. */
export function referralCodeOf(index: number): string {
  let value = Number((BigInt(index) * BigInt(codeStride)) % BigInt(codeSpace));
  let code = "";
  for (let i = 0; i < referralCodeLength; i++) {
    code += referralCodeAlphabet[value % referralCodeAlphabet.length];
    value = Math.floor(value / referralCodeAlphabet.length);
  }
  return code;
}

// Enough documents per batch to keep any engine busy, few enough to bound memory.
const batchSize = 1000;

/** The part of a collection seeding uses; `insertMany` only where the engine has it. */
interface Insertable<T> {
  insertOne(doc: T): Promise<unknown>;
  insertMany?(docs: readonly T[]): Promise<unknown>;
}

/**
 * Inserts `count` documents built by `make`, a batch at a time: one
 * `insertMany` per batch where the collection has it (one transaction on
 * an engine with transactions), else the batch's `insertOne`s in parallel.
 */
async function insertAll<T extends { _id: string }>(
  collection: StoreCollection<T>,
  count: number,
  make: (i: number) => T,
  progress: (count: number) => void,
): Promise<void> {
  const target = collection as unknown as Insertable<T>;
  for (let start = 0; start < count; start += batchSize) {
    const batch: T[] = [];
    for (let i = start; i < Math.min(count, start + batchSize); i++) batch.push(make(i));
    if (target.insertMany) await target.insertMany(batch);
    else await Promise.all(batch.map((doc) => target.insertOne(doc)));
    progress(batch.length);
  }
}
