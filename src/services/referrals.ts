import { setImmediate } from "node:timers/promises";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { ConnectError, ServiceImpl } from "@connectrpc/connect";
import {
  FraudReviewDecisionSchema,
  type ReferralsService,
} from "../../gen/referral/v1/referrals_pb.js";
import {
  CampaignFraudPolicySchema,
  ReferralSchema,
  ReferralStatusSchema,
} from "../../gen/referral/v1/resources_pb.js";
import { toPlain } from "../contract/plain-codec.js";
import { messageFromDoc } from "../contract/records.js";
import { compilePolicy, type FraudPolicyDoc } from "../domain/fraud-policy.js";
import { limits } from "../domain/limits.js";
import { defaultWindowDays } from "../domain/links.js";
import type { ReferralStatusName } from "../domain/referral-status.js";
import type { EnvironmentName } from "../domain/tenancy.js";
import { fraudReviewResolved } from "../events/events.js";
import type { CustomerDoc, ReferralDoc } from "../store/documents.js";
import type { TenantStore } from "../store/tenant-store.js";
import { checkedFraudPolicy } from "./campaign-records.js";
import { clickAttribution } from "./click-attribution.js";
import { callerOf, codeLookupsKey } from "./context.js";
import { failedPrecondition, invalidArgument, notFound } from "./errors.js";
import {
  checkedContext,
  endUserOf,
  networkKeyOf,
  networkOfCall,
  policyOfCampaign,
} from "./evidence.js";
import { AttributionTimes, BacktestTally } from "./fraud-backtest.js";
import { isReviewId, reviewGroupOf, reviewGroups, sharedSignals } from "./fraud-reviews.js";
import { optionalUserHash, verificationOf } from "./identity.js";
import {
  attributeReferral,
  decideReview,
  type LifecycleDeps,
  reviewReferral,
} from "./referral-lifecycle.js";
import {
  enumWord,
  environmentName,
  environmentOrProduction,
  optionalText,
  pageOf,
  requiredText,
} from "./validate.js";

/** Creates the ReferralsService implementation. */
export function createReferralsService(deps: LifecycleDeps): ServiceImpl<typeof ReferralsService> {
  return {
    async createReferral(request, context) {
      const caller = callerOf(context);
      const { store } = caller;
      const clickId = optionalText(request.clickId, "clickId");
      // With a click the code may be left out (proto3 sends it empty then).
      const referralCode =
        clickId === undefined
          ? requiredText(request.referralCode, "referralCode")
          : request.referralCode === ""
            ? undefined
            : optionalText(request.referralCode, "referralCode");
      const campaignId = optionalText(request.campaignId, "campaignId");
      const refereeId = optionalText(request.refereeId, "refereeId");
      const refereeExternalUserId = optionalText(
        request.refereeExternalUserId,
        "refereeExternalUserId",
      );
      if (refereeId === undefined && refereeExternalUserId === undefined) {
        throw invalidArgument("refereeId", "or refereeExternalUserId is required");
      }
      const userHash = optionalUserHash(request.userHash);
      const sentContext = checkedContext(caller, request.context);
      // Wrong codes (and clicks) are limited per key and address, so they cannot be searched (docs/trust.md).
      const lookups = context.values.get(codeLookupsKey);
      const byClick =
        clickId === undefined ? null : await clickAttribution(store, lookups, clickId, deps.clock);
      if (byClick && campaignId !== undefined && campaignId !== byClick.campaign._id) {
        throw invalidArgument("campaignId", "names another campaign than the click's");
      }
      if (byClick && referralCode !== undefined && referralCode !== byClick.click.code) {
        throw invalidArgument("referralCode", "is not the code of the click's link");
      }
      const campaign =
        byClick?.campaign ??
        (campaignId
          ? await store.campaigns.find(campaignId)
          : await store.campaigns.findDefault(environmentOrProduction(request.environment)));
      if (!campaign) {
        throw notFound(campaignId ? `campaign ${campaignId}` : "default campaign");
      }
      const environment = campaign.environment;
      let referrer = byClick?.referrer;
      if (!referrer) {
        await lookups.beforeLookup();
        const code = referralCode as string;
        referrer = (await store.customers.findByReferralCode(environment, code)) ?? undefined;
        if (!referrer) {
          await lookups.lookupFailed();
          throw await referralCodeNotFound(store, environment, code);
        }
      }
      const referee = await findReferee(store, environment, refereeId, refereeExternalUserId);
      // The referee is the customer the call acts for (docs/trust.md).
      const verification = await verificationOf(caller, deps, referee.externalUserId, userHash);
      if (!campaign.isLive) throw failedPrecondition(`campaign ${campaign._id} is not live`);
      const refereeNetwork = await networkOfCall(
        store,
        deps,
        endUserOf(caller, context, sentContext),
      );
      // Only a secret key or the referee's own verified call moves a referral
      // (docs/trust.md); a click moves one only when the last click wins.
      const model = campaign.attribution?.model ?? "first_click";
      const mayMove = verification !== "unverified" && (!byClick || model === "last_click");
      const { view } = await attributeReferral(
        deps,
        caller,
        campaign,
        referrer,
        referee,
        mayMove,
        refereeNetwork,
        byClick?.record,
      );
      deps.notifyWebhooks();
      // The specification's create response has no environment field; the
      // evidence is the backend's to read (docs/fraud.md).
      return {
        referral: {
          ...view,
          environment: undefined,
          evidence: caller.keyKind === "secret" ? view.evidence : undefined,
        },
      };
    },

    async updateReferralStatus(request, context) {
      const caller = callerOf(context);
      const id = requiredText(request.id, "id");
      const status = enumWord<ReferralStatusName>(ReferralStatusSchema, request.status, "status");
      if (!status) throw invalidArgument("status", "is required");
      const reason = optionalText(request.reason, "reason", limits.note);
      const { view } = await reviewReferral(deps, caller, id, status, reason);
      deps.notifyWebhooks();
      return { referral: view };
    },

    async listReferrals(request, context) {
      const { store } = callerOf(context);
      const page = pageOf(request.limit, request.offset);
      const { total, docs } = await store.referrals.findMany(
        {
          status: enumWord<ReferralStatusName>(ReferralStatusSchema, request.status, "status"),
          campaignId: optionalText(request.campaignId, "campaignId"),
          referrerId: optionalText(request.referrerId, "referrerId"),
          refereeId: optionalText(request.refereeId, "refereeId"),
          environment: environmentName(request.environment),
        },
        page,
      );
      return { total, ...page, data: docs.map((doc) => messageFromDoc(ReferralSchema, doc)) };
    },

    async listFraudReviews(request, context) {
      const { store } = callerOf(context);
      const scope = {
        campaignId: optionalText(request.campaignId, "campaignId"),
        environment: environmentName(request.environment),
      };
      const waiting = await store.referrals.findForReview(scope, reviewQueueSize + 1);
      const truncated = waiting.length > reviewQueueSize;
      const queue = waiting.slice(0, reviewQueueSize);
      const terms = await reviewTermsOf(store, deps, [...new Set(queue.map((r) => r.campaignId))]);
      const { docs: recent } = await store.referrals.findMany(scope, {
        offset: 0,
        limit: sharedSignalWindow,
      });
      return {
        reviews: reviewGroups(queue, (campaignId) => terms.get(campaignId) ?? noDeadline),
        sharedSignals: sharedSignals(recent),
        truncated,
      };
    },

    async resolveFraudReview(request, context) {
      const caller = callerOf(context);
      const id = requiredText(request.id, "id");
      if (!isReviewId(id)) throw invalidArgument("id", 'must be a fraud review id ("frv_...")');
      const decision = enumWord<"accept" | "reject">(
        FraudReviewDecisionSchema,
        request.decision,
        "decision",
      );
      if (!decision) throw invalidArgument("decision", "is required: accept or reject");
      const reason = optionalText(request.reason, "reason", limits.note) ?? null;
      const waiting = await caller.store.referrals.findForReview({}, reviewQueueSize);
      const found = reviewGroupOf(waiting, id);
      if (!found) throw notFound(`fraud review ${id}`, "nothing is left to review in it");
      const { key, referrals: group } = found;
      const note = `fraud review ${decision}ed (${key.ruleType})${reason ? `: ${reason}` : ""}`;
      const decided = [];
      let releasedGrants = 0;
      let voidedGrants = 0;
      for (const referral of group) {
        const outcome = await decideReview(deps, caller, referral, decision, note);
        decided.push(outcome.doc);
        releasedGrants += outcome.releasedGrants;
        voidedGrants += outcome.voidedGrants;
      }
      const last = decided[decided.length - 1] as ReferralDoc;
      const summary = {
        id,
        ...key,
        decision,
        reason,
        referralIds: decided.map((doc) => doc._id),
        releasedGrants,
        voidedGrants,
      };
      await caller.store.referrals.endRewardsHold(
        last,
        deps.clock(),
        fraudReviewResolved(summary, deps.clock()),
      );
      deps.notifyWebhooks();
      return {
        id,
        decision: request.decision,
        referrals: decided.map((doc) => messageFromDoc(ReferralSchema, doc)),
        releasedGrants,
        voidedGrants,
      };
    },

    async *testFraudPolicy(request, context) {
      const { store } = callerOf(context);
      const campaignId = requiredText(request.campaignId, "campaignId");
      const campaign = await store.campaigns.find(campaignId);
      if (!campaign) throw notFound(`campaign ${campaignId}`);
      if (!request.policy) throw invalidArgument("policy", "is required");
      const checked = checkedFraudPolicy(request.policy, "policy");
      const plain = toPlain(CampaignFraudPolicySchema, checked) as FraudPolicyDoc;
      const listsNetworks = Boolean(plain.allow?.networks?.length || plain.deny?.networks?.length);
      const key = listsNetworks ? await networkKeyOf(store, deps.secretBox) : null;
      const policy = compilePolicy(plain, deps.fraudPolicy, key);
      const from = request.from ? timestampDate(request.from) : null;
      const to = request.to ? timestampDate(request.to) : null;
      if (from && to && from >= to) throw invalidArgument("to", "must be after from");
      // The counts look back a day before the first referral judged.
      const lookBack = from ? new Date(from.getTime() - 86_400_000) : null;
      const times = new AttributionTimes();
      for await (const page of store.referrals.ofCampaignBetween(
        campaignId,
        lookBack,
        to,
        backtestPage,
      )) {
        for (const referral of page) times.add(referral);
        // The embedded engine reads synchronously: between pages the loop
        // serves other calls, and writes the progress already sent.
        await setImmediate();
      }
      const tally = new BacktestTally(policy, times);
      for await (const page of store.referrals.ofCampaignBetween(
        campaignId,
        from,
        to,
        backtestPage,
      )) {
        const clicks = policy.reads.has("clickFlood")
          ? await networkClicksOf(store, page, policy.countCap, {
              keptSince: new Date(
                deps.clock().getTime() -
                  (campaign.attribution?.windowDays || defaultWindowDays) * 86_400_000,
              ),
            })
          : null;
        for (const referral of page) tally.add(referral, clicks?.get(referral._id) ?? null);
        yield { scanned: tally.scanned };
        await setImmediate();
      }
      yield { scanned: tally.scanned, result: tally.result() };
    },
  };
}

/** The most referrals the review queue shows. */
const reviewQueueSize = 10_000;
/** How many of the latest referrals the shared-signal view reads. */
const sharedSignalWindow = 5_000;
/** How many referrals a backtest reads at a time. */
const backtestPage = 2_000;
const noDeadline = { deadlineDays: 0, onLapse: "keep_flagged" } as const;

/**
 * For a backtest: the clicks from each referee's network on its referrer's
 * links in the day before it was attributed, recounted for the referrals
 * whose evidence was gathered without them. A referral whose day began
 * before the clicks still kept (`keptSince`: a click leaves when its
 * window ends) is left out: its count is unknown, not zero. A few counts at
 * a time, so a backtest leaves the store to the calls it serves.
 */
async function networkClicksOf(
  store: TenantStore,
  referrals: readonly ReferralDoc[],
  atMost: number,
  { keptSince }: { readonly keptSince: Date },
): Promise<Map<string, number>> {
  const wanted = referrals.filter((referral) => {
    const evidence = referral.evidence;
    if (!evidence?.refereeNetwork || evidence.networkClicksLastDay != null) return false;
    return referral.attributedAt.getTime() - 86_400_000 >= keptSince.getTime();
  });
  const counts = new Map<string, number>();
  for (let start = 0; start < wanted.length; start += clickCountsAtOnce) {
    await Promise.all(
      wanted.slice(start, start + clickCountsAtOnce).map(async (referral) => {
        const at = referral.attributedAt;
        const count = await store.clicks.countFromNetwork(
          referral.referrerId,
          referral.evidence?.refereeNetwork?.networkHash as string,
          new Date(at.getTime() - 86_400_000),
          at,
          atMost,
        );
        counts.set(referral._id, count);
      }),
    );
  }
  return counts;
}

/** How many click counts a backtest has the store make at once. */
const clickCountsAtOnce = 16;

/** The review terms of the campaigns, by id, from their policies. */
async function reviewTermsOf(
  store: TenantStore,
  deps: LifecycleDeps,
  campaignIds: readonly string[],
): Promise<Map<string, { deadlineDays: number; onLapse: "keep_flagged" | "accept" }>> {
  const campaigns = await store.campaigns.findByIds(campaignIds);
  const terms = new Map<string, { deadlineDays: number; onLapse: "keep_flagged" | "accept" }>();
  for (const campaign of campaigns) {
    terms.set(campaign._id, (await policyOfCampaign(store, deps, campaign)).review);
  }
  return terms;
}

/** The referee by id or external id; both given must name the same customer. */
async function findReferee(
  store: TenantStore,
  environment: EnvironmentName,
  refereeId: string | undefined,
  refereeExternalUserId: string | undefined,
): Promise<CustomerDoc> {
  const byId = refereeId === undefined ? undefined : await store.customers.find(refereeId);
  if (byId === null || (byId && byId.environment !== environment)) {
    throw notFound(`referee ${refereeId}`);
  }
  if (refereeExternalUserId === undefined) return byId as CustomerDoc;
  const byExternalId = await store.customers.findByExternalId(environment, refereeExternalUserId);
  if (!byExternalId) throw notFound(`referee with external user id ${refereeExternalUserId}`);
  if (byId && byId._id !== byExternalId._id) {
    throw invalidArgument("refereeExternalUserId", "names another customer than refereeId");
  }
  return byExternalId;
}

/**
 * The error for a referral code the campaign's environment does not have.
 * A code of the other environment is the usual mistake (a test app sending
 * a production code), so the error says so rather than that it is unknown.
 */
async function referralCodeNotFound(
  store: TenantStore,
  environment: EnvironmentName,
  referralCode: string,
): Promise<ConnectError> {
  const other: EnvironmentName = environment === "production" ? "test" : "production";
  if (await store.customers.findByReferralCode(other, referralCode)) {
    return notFound(
      `referral code ${referralCode}`,
      `it is a ${other} customer's code, and the campaign is a ${environment} campaign`,
    );
  }
  return notFound(`referral code ${referralCode}`);
}
