import { setTimeout as sleep } from "node:timers/promises";
import { create, equals } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { DateTime } from "luxon";
import {
  type InsightsService,
  LeaderboardWindowSchema,
  StatsComparison,
  StatsIntervalSchema,
  type WatchCampaignStatsResponse,
  WatchCampaignStatsResponseSchema,
} from "../../gen/referral/v1/insights_pb.js";
import { EnvironmentSchema, ReferralStatusSchema } from "../../gen/referral/v1/resources_pb.js";
import { enumWords } from "../contract/options.js";
import { timeZoneOfCampaign } from "../domain/campaign-time.js";
import { maskedName } from "../domain/display-name.js";
import type { ReferralStatusName } from "../domain/referral-status.js";
import {
  calendarIntervalOf,
  canonicalTimeZone,
  parseStatsInstant,
  type StatsIntervalName,
  StatsPeriodProblem,
  type StatsSpan,
  sameTimeZone,
  statsInstantText,
  statsPeriodOf,
} from "../domain/stats-time.js";
import type { Clock, Ticker } from "../domain/tenancy.js";
import type { CampaignDoc } from "../store/documents.js";
import type { LeaderboardSpan, StatsTarget } from "../store/insights.js";
import type { TenantStore } from "../store/tenant-store.js";
import { callerOf } from "./context.js";
import { invalidArgument, notFound } from "./errors.js";
import { referralsCsv } from "./insights-export.js";
import { spanText, statsOfPeriod } from "./insights-report.js";
import { rewardBalancesOf } from "./rewards.js";
import { enumWord, environmentName, optionalText, requiredText } from "./validate.js";

/** What the insights need. */
export interface InsightsDeps {
  readonly clock: Clock;
  /**
   * When a watch looks again without being told of a write: writes of
   * other instances on the same MongoDB (STREAM_POLL_INTERVAL).
   */
  readonly streamTicks: Ticker;
}

/** The fewest milliseconds between two looks of a watch at its totals. */
const watchCoalesceMs = 250;

/** Creates the InsightsService implementation. */
export function createInsightsService(deps: InsightsDeps): ServiceImpl<typeof InsightsService> {
  return {
    async getCampaignStats(request, context) {
      const { store } = callerOf(context);
      const campaign = await campaignOf(store, request.id, request.environment);
      const timeZone = requestedTimeZone(request.timeZone, timeZoneOfCampaign(campaign));
      const target = { environment: campaign.environment, campaignId: campaign._id };
      const ownZone = keptZoneOf([timeZoneOfCampaign(campaign)], timeZone);
      return {
        report: await reportOf(store, target, { ...request, timeZone }, deps.clock(), ownZone),
      };
    },

    async getApplicationStats(request, context) {
      const { store } = callerOf(context);
      const environment = environmentName(request.environment) ?? "production";
      const timeZone = requestedTimeZone(request.timeZone, "UTC");
      const target = { environment, campaignId: null };
      // UTC's days, and those of the zones the environment's campaigns have, are kept.
      const keptZone = keptZoneOf(await store.insights.keptZones(environment), timeZone);
      return {
        report: await reportOf(store, target, { ...request, timeZone }, deps.clock(), keptZone),
      };
    },

    async listTopReferrers(request, context) {
      const { store } = callerOf(context);
      const campaign = await campaignOf(store, request.id, request.environment);
      const limit = leaderboardLimitOf(request.limit);
      const from = optionalText(request.from, "from");
      const to = optionalText(request.to, "to");
      const windowWord = enumWord<string>(LeaderboardWindowSchema, request.window, "window");
      let span: LeaderboardSpan;
      let shown: { from?: string; to?: string } = {};
      if (from !== undefined || to !== undefined) {
        if (windowWord !== undefined) {
          throw invalidArgument("window", "cannot be given with from and to");
        }
        const timeZone = timeZoneOfCampaign(campaign);
        const start = from === undefined ? undefined : instantOf(from, "from", timeZone);
        const end = to === undefined ? undefined : instantOf(to, "to", timeZone);
        if (start !== undefined && end !== undefined && end <= start) {
          throw invalidArgument("to", "must be after from");
        }
        span = { from: start ?? -8.64e15, to: end ?? 8.64e15 };
        shown = {
          ...(start === undefined ? {} : { from: statsInstantText(start, timeZone) }),
          ...(end === undefined ? {} : { to: statsInstantText(end, timeZone) }),
        };
      } else {
        const window = windowOf(windowWord ?? "all", campaign, deps.clock());
        span = window;
        if (window !== "all") shown = spanText(window, timeZoneOfCampaign(campaign));
      }
      const rows = await leadersOf(store, campaign, span, limit, () => true);
      const [balances, made] = await Promise.all([
        Promise.all(rows.map(({ customer }) => store.rewards.balance(customer._id))),
        store.insights.referralsMade(
          { environment: campaign.environment, campaignId: campaign._id },
          rows.map(({ customer }) => customer._id),
        ),
      ]);
      return {
        ...shown,
        data: rows.map(({ row, customer, rank }, index) => ({
          rank,
          customerId: customer._id,
          externalUserId: customer.externalUserId,
          name: customer.name,
          referralsAccepted: BigInt(row.accepted),
          referralsMade: BigInt(made[index] ?? 0),
          rewards: rewardBalancesOf(balances[index] ?? []),
        })),
      };
    },

    async getPublicLeaderboard(request, context) {
      const { store } = callerOf(context);
      const campaign = await campaignOf(store, request.id, request.environment);
      const settings = campaign.leaderboard;
      if (!settings?.public) {
        throw notFound(
          `public leaderboard of campaign ${campaign._id}`,
          "the campaign has not switched it on",
        );
      }
      const minimum = settings.minimumAccepted ?? 0;
      const windowWord = enumWord<string>(LeaderboardWindowSchema, request.window, "window");
      const window = windowOf(windowWord ?? "all", campaign, deps.clock());
      const span: LeaderboardSpan = window;
      const rows = await leadersOf(
        store,
        campaign,
        span,
        leaderboardLimitOf(request.limit),
        ({ accepted }) => accepted >= minimum,
      );
      return {
        data: rows.map(({ row, customer, rank }) => ({
          rank,
          displayName: maskedName(customer.name),
          referralsAccepted: BigInt(row.accepted),
        })),
      };
    },

    async *watchCampaignStats(request, context) {
      const { store } = callerOf(context);
      const campaign = await campaignOf(store, request.id, request.environment);
      const timeZone = requestedTimeZone(request.timeZone, timeZoneOfCampaign(campaign));
      const target = { environment: campaign.environment, campaignId: campaign._id };
      const ownZone = keptZoneOf([timeZoneOfCampaign(campaign)], timeZone);
      let changed = false;
      let wake: (() => void) | undefined;
      const stop = store.insights.onChange(target, () => {
        changed = true;
        wake?.();
      });
      let sent: WatchCampaignStatsResponse | undefined;
      try {
        for (;;) {
          changed = false;
          // Read again each time: without `to`, the period follows the clock.
          const period = periodOf({ ...request, interval: "day", timeZone, now: deps.clock() });
          const { totals } = await statsOfPeriod(store, target, period, [period], ownZone);
          const update = create(WatchCampaignStatsResponseSchema, {
            ...spanText(period, timeZone),
            totals,
          });
          // A write elsewhere in the application, or a poll, may leave the totals as they were.
          if (!sent || !equals(WatchCampaignStatsResponseSchema, update, sent)) {
            sent = update;
            yield update;
          }
          await sleep(watchCoalesceMs, undefined, { signal: context.signal }).catch(
            () => undefined,
          );
          if (context.signal.aborted) return;
          if (!changed) {
            await new Promise<void>((resolve) => {
              const done = () => {
                cancelTick();
                context.signal.removeEventListener("abort", done);
                wake = undefined;
                resolve();
              };
              const cancelTick = deps.streamTicks.onNextTick(done);
              context.signal.addEventListener("abort", done);
              wake = done;
            });
          }
          if (context.signal.aborted) return;
        }
      } finally {
        stop();
      }
    },

    async *exportReferrals(request, context) {
      const { store } = callerOf(context);
      const environment = environmentName(request.environment) ?? "production";
      const campaignId = optionalText(request.campaignId, "campaignId");
      if (campaignId !== undefined) {
        const campaign = await store.campaigns.find(campaignId);
        if (!campaign || campaign.environment !== environment)
          throw notFound(`campaign ${campaignId}`);
      }
      const from = optionalText(request.from, "from");
      const to = optionalText(request.to, "to");
      const filter = {
        environment,
        ...(campaignId === undefined ? {} : { campaignId }),
        ...(request.status
          ? { status: enumWord<ReferralStatusName>(ReferralStatusSchema, request.status, "status") }
          : {}),
        ...(from === undefined ? {} : { from: exportInstantOf(from, "from") }),
        ...(to === undefined ? {} : { to: exportInstantOf(to, "to") }),
      };
      context.responseHeader.set(
        "content-disposition",
        `attachment; filename="referrals-${environment}.csv"`,
      );
      yield* referralsCsv(store, filter, context.signal);
    },
  };
}

/** The campaign a request names, in the environment it asks for. */
async function campaignOf(
  store: TenantStore,
  rawId: string,
  rawEnvironment: number,
): Promise<CampaignDoc> {
  const id = requiredText(rawId, "id");
  const environment = environmentName(rawEnvironment);
  const campaign = await store.campaigns.find(id);
  if (!campaign) throw notFound(`campaign ${id}`);
  if (environment && campaign.environment !== environment) {
    throw invalidArgument(
      "environment",
      `campaign ${id} is a ${campaign.environment} campaign, not ${environment}`,
    );
  }
  return campaign;
}

/**
 * The request's time zone in its canonical spelling (`eUrOpE/pArIs` is
 * `Europe/Paris`), so that no spelling is kept apart from another's, or
 * `fallback` when it has none.
 */
function requestedTimeZone(raw: string | undefined, fallback: string): string {
  const timeZone = optionalText(raw, "timeZone");
  if (timeZone === undefined) return fallback;
  return statsRule(() => canonicalTimeZone(timeZone, "timeZone"));
}

/** The zone among those whose days a target keeps that is `timeZone`, under any of its names. */
function keptZoneOf(kept: readonly string[], timeZone: string): string | undefined {
  return kept.find((zone) => sameTimeZone(zone, timeZone));
}

/** A rule of the stats calendar applied, its problems as INVALID_ARGUMENT. */
function statsRule<T>(rule: () => T): T {
  try {
    return rule();
  } catch (error) {
    if (error instanceof StatsPeriodProblem) throw invalidArgument(error.field, error.message);
    throw error;
  }
}

/** {@link parseStatsInstant}, its problems as INVALID_ARGUMENT. */
function instantOf(text: string, field: string, timeZone: string): number {
  return statsRule(() => parseStatsInstant(text, field, timeZone));
}

/** {@link statsPeriodOf}, its problems as INVALID_ARGUMENT. */
function periodOf(request: Parameters<typeof statsPeriodOf>[0]) {
  return statsRule(() =>
    statsPeriodOf({
      ...request,
      from: optionalText(request.from, "from"),
      to: optionalText(request.to, "to"),
    }),
  );
}

/** A stats report: totals, series and the previous period when asked. */
async function reportOf(
  store: TenantStore,
  target: StatsTarget,
  request: {
    from?: string;
    to?: string;
    interval: number;
    timeZone: string;
    compare: StatsComparison;
  },
  now: Date,
  keptTimeZone?: string,
) {
  const interval =
    enumWord<StatsIntervalName>(StatsIntervalSchema, request.interval, "interval") ?? "day";
  if (
    request.compare !== StatsComparison.UNSPECIFIED &&
    request.compare !== StatsComparison.PREVIOUS_PERIOD
  ) {
    throw invalidArgument("compare", "must be previous_period");
  }
  const compare = request.compare === StatsComparison.PREVIOUS_PERIOD;
  const period = periodOf({ ...request, interval, now, compare });
  const [current, previous] = await Promise.all([
    statsOfPeriod(store, target, period, period.points, keptTimeZone),
    compare
      ? statsOfPeriod(store, target, period.previous, [period.previous], keptTimeZone)
      : undefined,
  ]);
  return {
    ...(target.campaignId === null ? {} : { campaignId: target.campaignId }),
    environment: enumWords(EnvironmentSchema).byWord.get(target.environment),
    timeZone: request.timeZone,
    interval: enumWords(StatsIntervalSchema).byWord.get(interval),
    ...spanText(period, request.timeZone),
    totals: current.totals,
    series: period.points.map((point, index) => ({
      ...spanText(point, request.timeZone),
      stats: current.series[index],
    })),
    ...(previous
      ? { previous: { ...spanText(period.previous, request.timeZone), stats: previous.totals } }
      : {}),
  };
}

function leaderboardLimitOf(limit: number | undefined): number {
  const size = limit ?? 10;
  if (size < 1 || size > 100) throw invalidArgument("limit", "must be between 1 and 100");
  return size;
}

/** A leaderboard window by its word: every acceptance, or a calendar month of the campaign. */
function windowOf(word: string, campaign: CampaignDoc, now: Date): "all" | StatsSpan {
  if (word !== "month" && word !== "previous_month") return "all";
  const before = word === "month" ? 0 : -1;
  return calendarIntervalOf(now.getTime(), "month", timeZoneOfCampaign(campaign), before);
}

/**
 * The leaderboard's rows with their customers, best first, skipping erased
 * customers (who leave it at once) and rows `keep` refuses; ranks count
 * the rows shown.
 */
async function leadersOf(
  store: TenantStore,
  campaign: CampaignDoc,
  span: LeaderboardSpan,
  limit: number,
  keep: (row: { accepted: number }) => boolean,
) {
  const target = { environment: campaign.environment, campaignId: campaign._id };
  const shown = [];
  let offset = 0;
  for (;;) {
    const batch = limit + 10;
    const rows = await store.insights.leaders(target, span, batch, offset);
    offset += rows.length;
    const customers = await store.insights.customersByIds(rows.map((row) => row.referrerId));
    for (const row of rows) {
      // Ranked best first: once one is under the minimum, so are the rest.
      if (!keep(row)) return shown;
      const customer = customers.get(row.referrerId);
      if (!customer || customer.deletedAt) continue;
      shown.push({ row, customer, rank: shown.length + 1 });
      if (shown.length === limit) return shown;
    }
    if (rows.length < batch) return shown;
  }
}

/** An export bound: an ISO date (UTC midnight) or time. */
function exportInstantOf(text: string, field: string): Date {
  const value = DateTime.fromISO(text, { zone: "UTC" });
  if (!value.isValid) {
    throw invalidArgument(field, "must be an ISO date (2026-11-01) or time (2026-11-01T09:00:00Z)");
  }
  return value.toJSDate();
}
