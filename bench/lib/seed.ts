import { create, type MessageInitShape } from "@bufbuild/protobuf";
import {
  CampaignSchema,
  Currency,
  RewardLimitInterval,
  RewardLimitUnit,
  RewardMethod,
  RewardParty,
  RewardSchema,
  RewardType,
} from "../../gen/referral/v1/resources_pb.js";
import { canonicalEmail, normalizeEmailForLookup } from "../../src/domain/email.js";
import { completePolicy, type FraudPolicyDoc } from "../../src/domain/fraud-policy.js";
import { ruleCatalogue } from "../../src/domain/fraud-rules.js";
import { newId } from "../../src/domain/ids.js";
import { referralCodeAlphabet, referralCodeLength } from "../../src/domain/referral-code.js";
import type { ReferralStatusName } from "../../src/domain/referral-status.js";
import { movedGrant } from "../../src/domain/reward-grant.js";
import { roomFor } from "../../src/domain/reward-ledger.js";
import {
  earnedGrant,
  newGrant,
  rewardSnapshotId,
  rewardsOf,
  valueOfReward,
  withRoom,
} from "../../src/domain/reward-plan.js";
import type { EnvironmentName, Tenant } from "../../src/domain/tenancy.js";
import { newCampaignDoc } from "../../src/services/campaign-records.js";
import { demoCampaign, provisionDemo } from "../../src/services/provisioning.js";
import { insertCampaign } from "../../src/store/campaigns.js";
import type { StoreCollection } from "../../src/store/collection.js";
import type {
  CampaignDoc,
  CustomerDoc,
  ReferralDoc,
  RewardAllowanceDoc,
  StoredReward,
} from "../../src/store/documents.js";
import { createSecretBox, keyFromDataDir } from "../../src/store/secret-box.js";
import { openStore, type Store } from "../../src/store/store.js";
import { findApplication, rotateIdentitySecret } from "../../src/store/tenants.js";
import {
  type EvidenceCustomer,
  EvidenceHistory,
  type EvidenceLists,
  evidenceSpreadDays,
} from "./evidence.js";

/** The keys every bench store is provisioned with, so load generators know them. */
export const benchKeys = {
  secret: "sk_bench_secret_key_0000000000000000000000",
  public: "pk_bench_public_key_0000000000000000000000",
  /** The application's identity secret: identify-existing signs its customers with it (docs/trust.md). */
  identity: "idsec_bench_identity_secret_0000000000000000",
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
  /**
   * Customers `t-<i>`, each referred (pending) in a campaign of their own
   * (see `pendingCampaign`), by a base customer or, past four times the
   * base, another `t-<j>`: trigger-checkpoint targets.
   */
  readonly pendingReferees?: number;
  /** The rewards of the campaign the `t-<i>` referrals are in; `none` unless given. */
  readonly pendingCampaign?: PendingCampaign;
  /**
   * The default campaign's fraud policy: `full`, every rule of the
   * catalogue at its defaults; `none`, a policy that runs no rule; the
   * environment's default rules (no policy of its own) unless given.
   */
  readonly fraudPolicy?: BenchFraudPolicy;
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
  /**
   * Reward grants in all, in the default campaign's application: one to the
   * referee of each accepted base referral (the campaign's referee reward,
   * in a slot of its count limit), {@link busyGrants} on the oldest
   * customer (the referrer reward for its accepted referrals: the first ones
   * under the limit, the rest capped), and the rest manual grants of a value
   * of their own, round-robin over the other base customers.
   */
  readonly rewardGrants?: number;
  /**
   * Days the base spreads over, up to now (1 unless given): its customers,
   * and the referrals of the referred ones, are created evenly over them,
   * as a program's year is.
   */
  readonly spreadDays?: number;
  /**
   * The oldest `referrers` customers refer all the others (one referral
   * each, `customers - referrers` in all), each a run of consecutive newer
   * customers, instead of the halves or `everyoneReferred`: many referrers
   * with several referrals each.
   */
  readonly referrers?: number;
  /**
   * The base referrals go into a live campaign of their own in this IANA
   * time zone (built and stored as CreateCampaign does), not the default
   * campaign (UTC); not with `rewardGrants`, which are the default
   * campaign's.
   */
  readonly timeZone?: string;
  /**
   * Referrals with fraud evidence, in a live campaign of their own (see
   * {@link SeededData.evidence}): as many referees `g-<i>`, each referred
   * once over the last 30 days, by a fortieth as many referrers `f-<j>`,
   * the evidence, verdicts and statuses varied as bench/lib/evidence.ts
   * makes them: what the fraud suite's backtest replays.
   */
  readonly evidenceReferrals?: number;
}

/** The campaign of the referrals with evidence (see {@link SeedPlan.evidenceReferrals}). */
export interface EvidenceCampaign {
  readonly campaignId: string;
  readonly referrals: number;
  readonly referrers: number;
  readonly spreadDays: number;
  /** The deny domain and allow email the history is made for. */
  readonly lists: EvidenceLists;
}

/**
 * The rewards of the campaign of the pending referrals: none, or one per
 * party (a referrer payout limited to 5 a month, a referee discount).
 */
export type PendingCampaign = "none" | "two-rewards";

/** A default campaign's fraud policy in a seeded store (see {@link SeedPlan.fraudPolicy}). */
export type BenchFraudPolicy = "full" | "none";

/** The policy a seed plan's `fraudPolicy` names, as stored (completed as a save completes it). */
export function benchFraudPolicy(kind: BenchFraudPolicy): FraudPolicyDoc {
  const policy: FraudPolicyDoc = {
    rules: kind === "full" ? Object.keys(ruleCatalogue).map((type) => ({ type })) : [],
  };
  const problem = completePolicy(policy);
  if (problem) throw new Error(`bench policy: ${problem.field} ${problem.message}`);
  return policy;
}

/** The grants the busy customer (the oldest) holds when the plan asks for grants. */
export const busyGrants = 300;

/** What a seeded store holds, for building requests. */
export interface SeededData {
  /** The store engine seeded (`embedded`, `mongodb`), for the report. */
  readonly engine: string;
  readonly applicationId: string;
  readonly defaultCampaignId: string;
  /** The campaign of the base referrals: the default one, or the plan's `timeZone` campaign. */
  readonly baseCampaignId: string;
  /** The trigger that converts a pending referral of the `t-<i>` (their campaign's). */
  readonly rewardTrigger: string;
  readonly customers: number;
  /** Referrals of the base customers (the `c-<i>`). */
  readonly referrals: number;
  /** A customer that was referred and refers others: a read that derives every field. */
  readonly sampleCustomerId: string;
  /** The oldest customer: with `busyReferrer`, the referrer of a tenth of the referrals. */
  readonly oldestCustomerId: string;
  /** Reward grants seeded (see `SeedPlan.rewardGrants`). */
  readonly rewardGrants: number;
  /** A customer with as many grants as most customers with grants; with grants only. */
  readonly typicalGrantCustomerId?: string;
  /** The customer holding {@link busyGrants} grants; with grants only. */
  readonly busyGrantCustomerId?: string;
  /** The referrals with evidence and their campaign; with `evidenceReferrals` only. */
  readonly evidence?: EvidenceCampaign;
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
    const application = await findApplication(store.system, demo.applicationId);
    if (!application) throw new Error("provisioning created no application");
    // Sealed with the key the service finds in the same DATA_DIR.
    const box = createSecretBox(keyFromDataDir(dataDir));
    await rotateIdentitySecret(store.system, application, box.seal(benchKeys.identity), now, now);
    const campaign = await store.system.campaigns.findOne({
      applicationId: demo.applicationId,
      environment: benchEnvironment,
      isDefault: true,
    });
    if (!campaign) throw new Error("provisioning created no default campaign");
    if (plan.fraudPolicy) {
      const fraudPolicy = benchFraudPolicy(plan.fraudPolicy);
      await store.system.campaigns.updateOne({ _id: campaign._id }, { $set: { fraudPolicy } });
    }
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
    if (plan.timeZone !== undefined && (plan.rewardGrants ?? 0) > 0) {
      throw new Error("a seed plan with a time zone campaign takes no reward grants");
    }
    // The base spreads over the last day (or `spreadDays`), so pages and time
    // filters see a realistic spread; the pools are recent, so the 7-day
    // fraud rule passes.
    const spread = 86_400_000 * (plan.spreadDays ?? 1);
    const baseAt = (i: number) =>
      new Date(now.getTime() - spread + Math.floor((i * spread) / base));
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
    // With `referrers`, the oldest ones refer all the others, each a run of
    // consecutive ones: in turn instead, each insert lands on another page of
    // every referrer index, and seeding 100k referrals took 2.3 times as long.
    const half = Math.floor(base / 2);
    const referrers = plan.referrers;
    const firstReferred = referrers ?? (plan.everyoneReferred ? 1 : half + 1);
    const referrerOf =
      referrers !== undefined
        ? (i: number) => Math.floor(((i - referrers) * referrers) / (base - referrers))
        : plan.everyoneReferred
          ? (i: number) => Math.floor(i / 2)
          : (i: number) => half + Math.floor((i - half) / 2);
    const referrals = Math.max(0, base - firstReferred);
    const baseCampaign =
      plan.timeZone === undefined
        ? campaign
        : await insertTimeZoneCampaign(store, demo, plan.timeZone, now);
    const baseTenant = { ...tenant, campaignId: baseCampaign._id };
    // The accepted ones, kept only when grants are to be seeded for them.
    const accepted: AcceptedReferral[] = [];
    const keepAccepted = (plan.rewardGrants ?? 0) > 0;
    await insertAll(
      store.system.referrals,
      referrals,
      (k) => {
        const i = firstReferred + k;
        const status: ReferralStatusName = k % 3 === 0 ? "accepted" : "pending";
        const referrer = plan.busyReferrer && k % 10 === 0 ? 0 : referrerOf(i);
        const doc = referralDoc(baseTenant, baseIds[referrer] as string, baseIds[i] as string, {
          status,
          at: baseAt(i),
        });
        if (keepAccepted && status === "accepted") accepted.push(acceptedOf(doc, referrer, i));
        return doc;
      },
      progress,
    );
    const grants =
      keepAccepted && base > 0
        ? await seedGrants(store, campaign, tenant, {
            total: plan.rewardGrants ?? 0,
            accepted,
            baseIds,
            createdAt: baseAt,
            now,
            progress,
          })
        : undefined;
    const referees = plan.referees ?? 0;
    await insertAll(
      store.system.customers,
      referees,
      (i) => refereeDoc(customerDoc(tenant, `p-${i}`, base + i, recentAt(i, referees)), i),
      progress,
    );
    const pendingReferees = plan.pendingReferees ?? 0;
    // The pending referrals get a campaign of their own, so the write runs
    // choose its rewards without touching the default one.
    const pendingCampaign =
      pendingReferees > 0
        ? await insertPendingCampaign(store, demo, plan.pendingCampaign ?? "none", now)
        : campaign;
    const pendingTenant = { ...tenant, campaignId: pendingCampaign._id };
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
    // The referrers take turns: the base, and when the pool is more than four
    // times the base, the pool's own customers too, so no referrer has more
    // than four conversions in a run (the two-rewards campaign's referrer
    // reward allows five a month: every grant takes room, none is capped).
    const referrerTurns = Math.max(base, Math.ceil(pendingReferees / 4));
    const pendingReferrer = (i: number) => {
      const turn = i % referrerTurns;
      return (turn < base ? baseIds[turn] : pendingIds[turn - base]) as string;
    };
    await insertAll(
      store.system.referrals,
      pendingReferees,
      (i) =>
        referralDoc(pendingTenant, pendingReferrer(i), pendingIds[i] as string, {
          status: "pending",
          at: recentAt(i, pendingReferees),
        }),
      progress,
    );
    const rewardTrigger =
      pendingCampaign.manualRewardTrigger ?? pendingCampaign.proposedRewardTrigger;
    if (!rewardTrigger) throw new Error("the pending referrals' campaign has no reward trigger");
    const evidenceReferrals = plan.evidenceReferrals ?? 0;
    const evidence =
      evidenceReferrals > 0
        ? await seedEvidence(store, demo, tenant, evidenceReferrals, {
            now,
            firstIndex: base + referees + pendingReferees,
            progress,
          })
        : undefined;
    return {
      engine: store.engine,
      applicationId: demo.applicationId,
      defaultCampaignId: campaign._id,
      baseCampaignId: baseCampaign._id,
      rewardTrigger,
      customers: base,
      referrals,
      // A referred customer that refers others (two, unless everyoneReferred).
      sampleCustomerId: baseIds[Math.min(half + 1, base - 1)] as string,
      oldestCustomerId: baseIds[0] as string,
      rewardGrants: grants?.count ?? 0,
      ...(grants
        ? {
            typicalGrantCustomerId: grants.typicalCustomerId,
            busyGrantCustomerId: grants.busyCustomerId,
          }
        : {}),
      ...(evidence ? { evidence } : {}),
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

/**
 * A referee of the create-referral pool as a program's are: a name and a
 * mailbox of its own, nothing like its referrer's (a base customer's), so
 * the fraud rules judge it as they judge most referrals, and fire rarely.
 */
function refereeDoc(doc: CustomerDoc, i: number): CustomerDoc {
  const email = `friend.${(i * 2_654_435_761) % 4_294_967_291}@example.net`;
  return {
    ...doc,
    email,
    emailNormalized: normalizeEmailForLookup(email),
    emailCanonical: canonicalEmail(email),
    name: `Invited Friend ${i.toString(36)}`,
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

/** The two rewards of the `two-rewards` pending campaign: one per party. */
const twoRewards: readonly MessageInitShape<typeof RewardSchema>[] = [
  {
    name: "$20 for a friend who buys, 5 a month",
    type: RewardType.PAYOUT,
    party: RewardParty.REFERRER,
    method: RewardMethod.PAYPAL,
    currency: Currency.USD,
    payoutAmount: 20,
    limit: 5,
    limitUnit: RewardLimitUnit.REWARDS,
    limitInterval: RewardLimitInterval.MONTH,
  },
  {
    name: "$20 off your first order",
    type: RewardType.DISCOUNT,
    party: RewardParty.REFEREE,
    method: RewardMethod.MOBILE_COUPON,
    currency: Currency.USD,
    discountAmount: 20,
  },
];

/**
 * A live campaign of the bench environment, not the default, converting on
 * the demo campaign's trigger, with the rewards asked for; built and stored
 * the way CreateCampaign does (`newCampaignDoc`, `insertCampaign`).
 */
async function insertPendingCampaign(
  store: Store,
  tenant: Tenant,
  rewards: PendingCampaign,
  now: Date,
): Promise<CampaignDoc> {
  const input = create(CampaignSchema, demoCampaign(benchEnvironment));
  input.name = rewards === "none" ? "Bench: no rewards" : "Bench: two rewards";
  input.isDefault = false;
  input.rewards =
    rewards === "none" ? [] : twoRewards.map((reward) => create(RewardSchema, reward));
  const doc = newCampaignDoc(tenant, input, now);
  await insertCampaign(store.system, doc);
  return doc;
}

/**
 * A live campaign of the bench environment in `timeZone`, not the default,
 * otherwise the demo campaign; built and stored the way CreateCampaign does.
 * It must exist before its referrals: their counters are kept on its
 * calendar, read from it as each referral is inserted.
 */
async function insertTimeZoneCampaign(
  store: Store,
  tenant: Tenant,
  timeZone: string,
  now: Date,
): Promise<CampaignDoc> {
  const input = create(CampaignSchema, demoCampaign(benchEnvironment));
  input.name = `Bench: ${timeZone}`;
  input.isDefault = false;
  input.timeZone = timeZone;
  const doc = newCampaignDoc(tenant, input, now);
  await insertCampaign(store.system, doc);
  return doc;
}

/**
 * The referrals with evidence (see `SeedPlan.evidenceReferrals`) in a
 * live campaign of their own, built and stored the way CreateCampaign
 * does, without a fraud policy (the environment's default rules judged
 * them): the referrers, the referees (customer numbers from `firstIndex`,
 * so their codes are new), then the referrals in attribution order.
 */
async function seedEvidence(
  store: Store,
  demo: Tenant,
  tenant: SeedTenant,
  referrals: number,
  options: {
    readonly now: Date;
    readonly firstIndex: number;
    readonly progress: (count: number) => void;
  },
): Promise<EvidenceCampaign> {
  const { now, firstIndex, progress } = options;
  const input = create(CampaignSchema, demoCampaign(benchEnvironment));
  input.name = "Bench: fraud evidence";
  input.isDefault = false;
  const campaign = newCampaignDoc(demo, input, now);
  await insertCampaign(store.system, campaign);
  const history = new EvidenceHistory(referrals, now, tenant.actorId);
  const referrerIds: string[] = [];
  await insertAll(
    store.system.customers,
    history.referrers,
    (j) => {
      const doc = evidenceCustomerDoc(tenant, history.referrer(j), firstIndex + j);
      referrerIds[j] = doc._id;
      return doc;
    },
    progress,
  );
  const refereeIds: string[] = [];
  await insertAll(
    store.system.customers,
    referrals,
    (k) => {
      const doc = evidenceCustomerDoc(
        tenant,
        history.referee(k),
        firstIndex + history.referrers + k,
      );
      refereeIds[k] = doc._id;
      return doc;
    },
    progress,
  );
  await insertAll(
    store.system.referrals,
    referrals,
    (k): ReferralDoc => {
      const ids = {
        referrerId: referrerIds[history.referrerOf(k)] as string,
        refereeId: refereeIds[k] as string,
      };
      const made = history.next(k, ids);
      return {
        _id: newId("ref", made.at),
        organizationId: tenant.organizationId,
        applicationId: tenant.applicationId,
        environment: benchEnvironment,
        campaignId: campaign._id,
        ...ids,
        status: made.status,
        suspectedFrauds: made.suspectedFrauds,
        statusHistory: made.statusHistory,
        evidence: made.evidence,
        risk: made.risk,
        attributedAt: made.at,
        createdAt: made.at,
        updatedAt: made.updatedAt,
        deletedAt: null,
      };
    },
    progress,
  );
  return {
    campaignId: campaign._id,
    referrals,
    referrers: history.referrers,
    spreadDays: evidenceSpreadDays,
    lists: history.lists,
  };
}

/** A customer of the evidence history: its own email, name, creation and network. */
function evidenceCustomerDoc(
  tenant: SeedTenant,
  party: EvidenceCustomer,
  index: number,
): CustomerDoc {
  const doc = customerDoc(tenant, party.externalUserId, index, party.createdAt);
  return {
    ...doc,
    email: party.email,
    emailNormalized: normalizeEmailForLookup(party.email),
    emailCanonical: canonicalEmail(party.email),
    name: party.name,
    ...(party.network ? { network: party.network } : {}),
  };
}

/** What grant seeding needs of an accepted base referral. */
interface AcceptedReferral {
  readonly id: string;
  readonly referrerId: string;
  readonly refereeId: string;
  /** Base index of the referrer. */
  readonly referrer: number;
  /** Base index of the referee. */
  readonly referee: number;
  /** The acceptance: when, and by which checkpoint. */
  readonly at: Date;
  readonly actorId: string;
}

/** An accepted referral as grant seeding keeps it. */
function acceptedOf(doc: ReferralDoc, referrer: number, referee: number): AcceptedReferral {
  const acceptance = doc.statusHistory.at(-1) as ReferralDoc["statusHistory"][number];
  return {
    id: doc._id,
    referrerId: doc.referrerId,
    refereeId: doc.refereeId,
    referrer,
    referee,
    at: acceptance.changedAt,
    actorId: acceptance.actorId,
  };
}

/**
 * Inserts `total` grants (see `SeedPlan.rewardGrants`) through the grants
 * collection's `insertMany`, then the allowances the amount-limited ones hold
 * room in, as the ledger would have left them: earned grants are built by
 * `newGrant` under `limitOf`/`roomFor`/`withRoom` with their derived ids,
 * manual ones by `newGrant` with ids numbered in order (every fourth one
 * fulfilled, as a review leaves it).
 */
async function seedGrants(
  store: Store,
  campaign: CampaignDoc,
  tenant: SeedTenant,
  options: {
    readonly total: number;
    readonly accepted: readonly AcceptedReferral[];
    readonly baseIds: readonly string[];
    readonly createdAt: (index: number) => Date;
    readonly now: Date;
    readonly progress: (count: number) => void;
  },
): Promise<{ count: number; typicalCustomerId: string; busyCustomerId: string }> {
  const { total, accepted, baseIds, now, progress } = options;
  const base = baseIds.length;
  const rewards = rewardsOf(campaign);
  const referrerReward = rewards.find((reward) => reward.party === "referrer" && !reward.disabled);
  const refereeReward = rewards.find((reward) => reward.party === "referee" && !reward.disabled);
  if (!referrerReward || !refereeReward) {
    throw new Error("the default campaign has no reward for each party");
  }
  // The snapshots the earned grants name, as acceptance stores them.
  for (const reward of [referrerReward, refereeReward]) {
    await store.system.rewardSnapshots.insertOne({
      _id: rewardSnapshotId(reward),
      organizationId: tenant.organizationId,
      applicationId: tenant.applicationId,
      reward,
      createdAt: now,
    });
  }
  const allowances = new Map<string, RewardAllowanceDoc>();
  const slotsHeld = new Map<string, number>();
  const grantsOf = new Uint32Array(base);
  const earned = (referral: AcceptedReferral, reward: StoredReward, index: number) => {
    grantsOf[index] = (grantsOf[index] ?? 0) + 1;
    const { grant, limit } = earnedGrant(
      campaign,
      {
        _id: referral.id,
        organizationId: tenant.organizationId,
        applicationId: tenant.applicationId,
        environment: benchEnvironment,
        referrerId: referral.referrerId,
        refereeId: referral.refereeId,
      },
      reward,
      { changedAt: referral.at, actorId: referral.actorId },
    );
    const customerId = grant.customerId;
    const at = referral.at;
    if (!limit) return grant;
    if (limit.unit === "rewards") {
      // A count limit: the lowest free slot, as `makeInSlot` takes it, or capped.
      const held = slotsHeld.get(limit.key) ?? 0;
      if (held >= limit.max) return withRoom(grant, limit, 0);
      slotsHeld.set(limit.key, held + 1);
      return { ...grant, limitSlot: `${limit.key}#${held + 1}` };
    }
    let allowance = allowances.get(limit.key);
    const room = roomFor(limit.unit, limit.max, allowance?.used ?? 0, grant.amountMinor ?? 0);
    if (room > 0) {
      allowance ??= {
        _id: limit.key,
        organizationId: tenant.organizationId,
        applicationId: tenant.applicationId,
        rewardId: limit.rewardId,
        customerId,
        unit: limit.unit,
        window: limit.window,
        used: 0,
        holds: {},
        version: 0,
        createdAt: at,
        updatedAt: at,
      };
      allowance.used += room;
      allowance.holds[grant._id] = room;
      allowance.version += 1;
      allowance.updatedAt = at;
      allowances.set(limit.key, allowance);
    }
    return withRoom(grant, limit, room);
  };
  // The oldest customer's grants: the referrer reward for its accepted referrals.
  const busyReferrals = accepted.filter((referral) => referral.referrer === 0);
  const busy = Math.min(busyGrants, busyReferrals.length, total);
  await insertAll(
    store.system.rewardGrants,
    busy,
    (i) => earned(busyReferrals[i] as AcceptedReferral, referrerReward, 0),
    progress,
  );
  // One to the referee of each accepted referral, as far as the total goes.
  const referee = Math.min(accepted.length, total - busy);
  await insertAll(
    store.system.rewardGrants,
    referee,
    (i) => {
      const referral = accepted[i] as AcceptedReferral;
      return earned(referral, refereeReward, referral.referee);
    },
    progress,
  );
  // The rest: a value of their own, round-robin over every base customer but the oldest.
  const manual = total - busy - referee;
  const others = Math.max(1, base - 1);
  const manualValue = valueOfReward({ ...referrerReward, payoutAmount: 5 });
  await insertAll(
    store.system.rewardGrants,
    manual,
    (r) => {
      const index = base === 1 ? 0 : 1 + (r % others);
      grantsOf[index] = (grantsOf[index] ?? 0) + 1;
      // A minute after the customer's creation per earlier round, never after now.
      const round = Math.floor(r / others);
      const at = new Date(
        Math.min(now.getTime(), options.createdAt(index).getTime() + 60_000 * (round + 1)),
      );
      const grant = newGrant({
        id: `grt_${at.getTime().toString(36).padStart(9, "0")}${r.toString(16).padStart(16, "0")}`,
        tenant,
        environment: benchEnvironment,
        customerId: baseIds[index] as string,
        kind: "manual",
        campaignId: null,
        referralId: null,
        reward: null,
        ...manualValue,
        limitWindow: null,
        ignoresLimit: false,
        at,
        cause: "manual",
        actorId: tenant.actorId,
        reason: "bench: a goodwill credit",
      });
      if (r % 4 !== 3) return grant;
      return movedGrant(grant, {
        change: {
          fromStatus: "approved",
          toStatus: "fulfilled",
          cause: "review",
          actorId: tenant.actorId,
          reason: null,
          changedAt: at,
        },
        set: {
          statusReason: null,
          fulfillment: { reference: `bench-${r}`, code: null, note: null, fulfilledAt: at },
        },
      });
    },
    progress,
  );
  const held = [...allowances.values()];
  await insertAll(
    store.system.rewardAllowances,
    held.length,
    (i) => held[i] as RewardAllowanceDoc,
    progress,
  );
  return {
    count: busy + referee + manual,
    typicalCustomerId: baseIds[typicalIndex(grantsOf)] as string,
    busyCustomerId: baseIds[0] as string,
  };
}

/**
 * A customer with the most common number of grants among those with any,
 * the one nearest the middle of the base: neither the busy one nor one
 * without grants.
 */
function typicalIndex(grantsOf: Uint32Array): number {
  const customersWith = new Map<number, number>();
  for (let i = 1; i < grantsOf.length; i++) {
    const count = grantsOf[i] as number;
    if (count > 0) customersWith.set(count, (customersWith.get(count) ?? 0) + 1);
  }
  let usual = 0;
  for (const [count, customers] of customersWith) {
    if (customers > (customersWith.get(usual) ?? 0)) usual = count;
  }
  const middle = Math.floor(grantsOf.length / 2);
  for (let distance = 0; distance < grantsOf.length; distance++) {
    for (const i of [middle - distance, middle + distance]) {
      if (i >= 1 && i < grantsOf.length && grantsOf[i] === usual) return i;
    }
  }
  return 0;
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
