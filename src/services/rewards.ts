import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  CurrencySchema,
  EnvironmentSchema,
  type RewardBalance,
  RewardBalanceSchema,
  type RewardFulfillment,
  RewardGrantKindSchema,
  RewardGrantStatusSchema,
  RewardMethodSchema,
  type RewardTotal,
  RewardTotalSchema,
  RewardTypeSchema,
  type RewardValue,
} from "../../gen/referral/v1/resources_pb.js";
import type { RewardsService } from "../../gen/referral/v1/rewards_pb.js";
import { enumWords } from "../contract/options.js";
import { timeZoneOfCampaign } from "../domain/campaign-time.js";
import { limits } from "../domain/limits.js";
import { type CurrencyName, fromMinorUnits, rewardAmountMinor } from "../domain/money.js";
import type { GrantValue } from "../domain/reward-grant.js";
import {
  canReviewGrant,
  manualGrantId,
  type RewardGrantKindName,
  type RewardGrantStatusName,
} from "../domain/reward-ledger.js";
import { limitOf, newGrant, rewardsOf, valueOfReward } from "../domain/reward-plan.js";
import type { Clock } from "../domain/tenancy.js";
import { grantView } from "../events/events.js";
import type { CampaignDoc, CustomerDoc, RewardGrantDoc, StoredReward } from "../store/documents.js";
import { type BalanceGroup, type ReferralGrants, referralGrants } from "../store/reward-grants.js";
import type { TenantStore } from "../store/tenant-store.js";
import { type Caller, callerOf } from "./context.js";
import { failedPrecondition, invalidArgument, notFound } from "./errors.js";
import { makePlannedGrants, moveGrant, rewardOfGrant } from "./reward-ledger.js";
import { enumWord, environmentName, optionalText, pageOf, requiredText } from "./validate.js";

/** What the rewards service needs. */
export interface RewardsDeps {
  readonly clock: Clock;
  /** Says events were written to an outbox. */
  readonly notifyWebhooks: () => void;
}

/** Creates the RewardsService implementation. */
export function createRewardsService(deps: RewardsDeps): ServiceImpl<typeof RewardsService> {
  const { clock } = deps;
  return {
    async listRewardGrants(request, context) {
      const { store } = callerOf(context);
      const page = pageOf(request.limit, request.offset);
      const filter = {
        customerId: optionalText(request.customerId, "customerId"),
        campaignId: optionalText(request.campaignId, "campaignId"),
        status: enumWord<RewardGrantStatusName>(RewardGrantStatusSchema, request.status, "status"),
        kind: enumWord<RewardGrantKindName>(RewardGrantKindSchema, request.kind, "kind"),
        environment: environmentName(request.environment),
      };
      const referralId = optionalText(request.referralId, "referralId");
      let referral: ReferralGrants | undefined;
      if (referralId !== undefined) {
        const found = await store.referrals.find(referralId);
        referral = found ? referralGrants(found) : undefined;
        // An unknown or unaccepted referral has no grants.
        if (!referral) return { total: 0, ...page, data: [] };
      }
      const { total, docs } = await store.rewards.findMany(
        referral ? { ...filter, referral } : filter,
        page,
      );
      return { total, ...page, data: await grantMessages(store, docs) };
    },

    async getRewardGrant(request, context) {
      const { store } = callerOf(context);
      const id = requiredText(request.id, "id");
      const grant = await store.rewards.find(id);
      if (!grant) throw notFound(`reward grant ${id}`);
      return { grant: await grantMessage(store, grant) };
    },

    async createRewardGrant(request, context) {
      const caller = callerOf(context);
      const { store } = caller;
      const customerId = requiredText(request.customerId, "customerId");
      const rewardId = optionalText(request.rewardId, "rewardId");
      const reason = requiredText(request.reason, "reason", limits.note);
      if (rewardId !== undefined && request.value) {
        throw invalidArgument("value", "must not be given with rewardId: give one of them");
      }
      if (rewardId === undefined && !request.value) {
        throw invalidArgument("rewardId", "or value is required");
      }
      if (request.ignoreLimit && rewardId === undefined) {
        throw invalidArgument("ignoreLimit", "applies to a rewardId only");
      }
      const ownValue = request.value ? checkedValue(request.value) : undefined;
      const customer = await store.customers.find(customerId);
      if (!customer) throw notFound(`customer ${customerId}`);
      const found =
        rewardId === undefined ? undefined : await findReward(store, customer, rewardId);
      const grant = await grantByHand(store, caller, customer, {
        reward: found,
        ownValue,
        ignoreLimit: request.ignoreLimit,
        reason,
        at: clock(),
      });
      deps.notifyWebhooks();
      return { grant: await grantMessage(store, grant) };
    },

    async updateRewardGrantStatus(request, context) {
      const caller = callerOf(context);
      const { store } = caller;
      const id = requiredText(request.id, "id");
      const to = enumWord<RewardGrantStatusName>(RewardGrantStatusSchema, request.status, "status");
      if (!to) throw invalidArgument("status", "is required");
      const reason = optionalText(request.reason, "reason", limits.note);
      const fulfillment = checkedFulfillment(request.fulfillment, to);
      for (let attempt = 1; attempt <= reviewAttempts; attempt++) {
        const current = await store.rewards.find(id);
        if (!current) throw notFound(`reward grant ${id}`);
        if (!canReviewGrant(current.kind, current.status, to)) {
          const what = current.kind === "clawback" ? "clawback" : "grant";
          const article = /^[aeiou]/.test(current.status) ? "an" : "a";
          throw failedPrecondition(`${article} ${current.status} ${what} cannot become ${to}`);
        }
        const moved = await moveGrant(store, current, to, {
          cause: "review",
          actorId: caller.keyId,
          reason: reason ?? null,
          at: clock(),
          ...(fulfillment ? { fulfillment } : {}),
        });
        if (!moved) continue;
        deps.notifyWebhooks();
        return { grant: await grantMessage(store, moved) };
      }
      throw new Error(`reward grant ${id} kept changing during ${reviewAttempts} attempts`);
    },

    async getCustomerRewardBalance(request, context) {
      const { store } = callerOf(context);
      const customerId = requiredText(request.customerId, "customerId");
      const customer = await store.customers.find(customerId);
      if (!customer) throw notFound(`customer ${customerId}`);
      const groups = await store.rewards.balance(customerId);
      return {
        customerId,
        environment: enumWords(EnvironmentSchema).byWord.get(customer.environment),
        balances: rewardBalancesOf(groups),
      };
    },
  };
}

// Two reviews of one grant race; the loser reads it again and, if its move
// is still allowed, makes it. A grant has few moves, so few attempts do.
const reviewAttempts = 5;

/** Grants as the API shows them, each with the reward it was made from. */
export async function grantMessages(store: TenantStore, docs: readonly RewardGrantDoc[]) {
  const rewards = await store.rewards.snapshots(docs.map((doc) => doc.rewardSnapshotId));
  return docs.map((doc) => grantView(doc, rewards.get(doc.rewardSnapshotId ?? "")));
}

async function grantMessage(store: TenantStore, doc: RewardGrantDoc) {
  return grantView(doc, await rewardOfGrant(store, doc));
}

/** A campaign reward by id, in a campaign of the customer's environment. */
async function findReward(
  store: TenantStore,
  customer: CustomerDoc,
  rewardId: string,
): Promise<{ campaign: CampaignDoc; reward: StoredReward }> {
  const campaigns = await store.campaigns.findMany({
    environment: customer.environment,
    order: "desc",
  });
  for (const campaign of campaigns) {
    const reward = rewardsOf(campaign).find((candidate) => candidate.id === rewardId);
    if (reward) return { campaign, reward };
  }
  throw notFound(`reward ${rewardId} in a campaign of the ${customer.environment} environment`);
}

/**
 * A manual grant: a campaign reward's value and terms (counted against its
 * limit unless `ignoreLimit`), or a value of its own, approved at once.
 * Under a limit the grant is planned on its recipient first, like an
 * acceptance's grants on their referral, so a crash between taking room
 * and storing the grant is finished by the sweep rather than losing room.
 */
async function grantByHand(
  store: TenantStore,
  caller: Caller,
  customer: CustomerDoc,
  request: {
    reward: { campaign: CampaignDoc; reward: StoredReward } | undefined;
    ownValue: { value: GrantValue; amountMinor: number | null } | undefined;
    ignoreLimit: boolean;
    reason: string;
    at: Date;
  },
): Promise<RewardGrantDoc> {
  const { reward: found, at } = request;
  const limit =
    found && !request.ignoreLimit
      ? limitOf(found.reward, customer._id, at, timeZoneOfCampaign(found.campaign))
      : null;
  const grant = newGrant({
    id: manualGrantId(at),
    tenant: caller.tenant,
    environment: customer.environment,
    customerId: customer._id,
    kind: "manual",
    campaignId: found?.campaign._id ?? null,
    referralId: null,
    reward: found?.reward ?? null,
    ...(found
      ? valueOfReward(found.reward)
      : (request.ownValue as NonNullable<typeof request.ownValue>)),
    limitWindow: limit?.window ?? null,
    ignoresLimit: Boolean(found && request.ignoreLimit),
    at,
    cause: "manual",
    actorId: caller.keyId,
    reason: request.reason,
  });
  const planned = { grant, limit };
  if (found && grant.rewardSnapshotId) {
    await store.rewards.storeSnapshot(grant.rewardSnapshotId, found.reward, at);
  }
  if (limit) {
    if (!(await store.rewards.planForCustomer(customer._id, [planned]))) {
      throw notFound(`customer ${customer._id}`);
    }
  }
  const holder = limit ? { customerId: customer._id } : null;
  const [made] = await makePlannedGrants(store, holder, [planned], at);
  return made as RewardGrantDoc;
}

/** A manual grant's own value, checked: a payout or a discount, exact to its currency. */
function checkedValue(value: RewardValue): { value: GrantValue; amountMinor: number | null } {
  const type = enumWord<"payout" | "discount">(RewardTypeSchema, value.type, "value.type");
  if (!type) throw invalidArgument("value.type", "is required: payout or discount");
  const method = enumWord<string>(RewardMethodSchema, value.method, "value.method");
  if (!method) throw invalidArgument("value.method", "is required");
  const currency =
    value.currency === undefined
      ? null
      : (enumWord<CurrencyName>(CurrencySchema, value.currency, "value.currency") ?? null);
  const percentage = value.discountPercentage;
  const months = value.discountDurationInMonth;
  if (months !== undefined && (type !== "discount" || months < 1 || months > 120)) {
    throw invalidArgument("value.discountDurationInMonth", "must be 1 to 120, for a discount only");
  }
  if (percentage !== undefined) {
    if (type !== "discount") {
      throw invalidArgument("value.discountPercentage", "is for a discount only");
    }
    if (value.amount !== undefined) {
      throw invalidArgument("value.amount", "must not be given with discountPercentage");
    }
    if (!(percentage > 0 && percentage <= 100)) {
      throw invalidArgument("value.discountPercentage", "must be more than 0 and at most 100");
    }
    return {
      value: {
        type,
        method,
        currency,
        amount: null,
        discountPercentage: percentage,
        discountDurationInMonth: months ?? null,
      },
      amountMinor: null,
    };
  }
  if (value.amount === undefined) throw invalidArgument("value.amount", "is required");
  if (!currency) throw invalidArgument("value.currency", "is required with an amount");
  if (value.amount <= 0) throw invalidArgument("value.amount", "must be more than 0");
  const exact = rewardAmountMinor(value.amount, currency);
  if ("refused" in exact) throw invalidArgument("value.amount", exact.refused);
  if (exact.minor <= 0) throw invalidArgument("value.amount", "must be more than 0");
  return {
    value: {
      type,
      method,
      currency,
      amount: fromMinorUnits(exact.minor, currency),
      discountPercentage: null,
      discountDurationInMonth: months ?? null,
    },
    amountMinor: exact.minor,
  };
}

/** A fulfilment's record: required (a reference or a code) to fulfil, refused otherwise. */
function checkedFulfillment(
  fulfillment: RewardFulfillment | undefined,
  to: RewardGrantStatusName,
): { reference: string | null; code: string | null; note: string | null } | undefined {
  if (to !== "fulfilled") {
    if (fulfillment) throw invalidArgument("fulfillment", "is only for status fulfilled");
    return undefined;
  }
  const reference = optionalText(fulfillment?.reference, "fulfillment.reference");
  const code = optionalText(fulfillment?.code, "fulfillment.code");
  const note = optionalText(fulfillment?.note, "fulfillment.note", limits.note);
  if (reference === undefined && code === undefined) {
    throw invalidArgument("fulfillment", "needs a reference or a code to fulfil a grant");
  }
  return { reference: reference ?? null, code: code ?? null, note: note ?? null };
}

/**
 * The balances of a customer's groups, one per currency, every status
 * present. The store gives one group per currency, kind and status: earned
 * and manual grants add up in the same totals (in minor units, exact), and
 * clawbacks go in their own.
 */
export function rewardBalancesOf(groups: readonly BalanceGroup[]): RewardBalance[] {
  type Totals = Map<string, { count: number; minor: number }>;
  const byCurrency = new Map<CurrencyName | null, { grants: Totals; clawbacks: Totals }>();
  for (const group of groups) {
    let totals = byCurrency.get(group.currency);
    if (!totals) {
      totals = { grants: new Map(), clawbacks: new Map() };
      byCurrency.set(group.currency, totals);
    }
    const kept = group.kind === "clawback" ? totals.clawbacks : totals.grants;
    const total = kept.get(group.status) ?? { count: 0, minor: 0 };
    kept.set(group.status, {
      count: total.count + group.count,
      minor: total.minor + group.amountMinor,
    });
  }
  const currencies = enumWords(CurrencySchema).byWord;
  return [...byCurrency.entries()]
    .sort(([a], [b]) => (a ?? "").localeCompare(b ?? ""))
    .map(([currency, { grants, clawbacks }]) => {
      const totalOf = (totals: Totals, status: RewardGrantStatusName): RewardTotal => {
        const total = totals.get(status);
        return create(RewardTotalSchema, {
          count: total?.count ?? 0,
          amount: total ? fromMinorUnits(total.minor, currency) : 0,
        });
      };
      return create(RewardBalanceSchema, {
        currency: currency ? currencies.get(currency) : undefined,
        pending: totalOf(grants, "pending"),
        approved: totalOf(grants, "approved"),
        fulfilled: totalOf(grants, "fulfilled"),
        rejected: totalOf(grants, "rejected"),
        voided: totalOf(grants, "voided"),
        expired: totalOf(grants, "expired"),
        capped: totalOf(grants, "capped"),
        clawbacks: {
          pending: totalOf(clawbacks, "pending"),
          fulfilled: totalOf(clawbacks, "fulfilled"),
          rejected: totalOf(clawbacks, "rejected"),
        },
      });
    });
}
