import type { Document, Filter } from "mongodb";
import { timeZoneOfCampaign } from "../domain/campaign-time.js";
import { campaignOfScope, isClickMetric, type StatsMoves, statsScope } from "../domain/stats.js";
import { bucketsOf, zoneDay, zoneDayOf } from "../domain/stats-time.js";
import type { EnvironmentName } from "../domain/tenancy.js";
import type { Collections, StoreCollection } from "./collection.js";
import { emptySnapshot, type StatsSnapshot, statsWatchers, zoneScope } from "./stats.js";

const environments: readonly EnvironmentName[] = ["production", "test"];
const pageSize = 1000;

/** What a recount found: the numbers as the records make them, and what it read. */
export interface Recount {
  readonly scopes: string[];
  readonly wanted: StatsSnapshot;
  readonly recordsRead: number;
}

/**
 * The numbers of an application recounted from its records: each record's
 * history replayed through the same moves its writes made (a referral's
 * and a grant's status history entry by entry; customers and checkpoints
 * as created), into memory. Re-attributions are replayed with the
 * referral's current referrer, as the kept order holds it.
 */
export async function recountStats(db: Collections, applicationId: string): Promise<Recount> {
  const campaigns = await db.campaigns.find({ applicationId }).toArray();
  const timeZones = new Map(
    campaigns.map((campaign) => [campaign._id, timeZoneOfCampaign(campaign)]),
  );
  const scopes = new Set<string>();
  const addCampaignScope = (environment: string, campaignId: string) => {
    const scope = statsScope(applicationId, environment, campaignId);
    scopes.add(scope);
    scopes.add(zoneScope(scope, timeZones.get(campaignId) ?? "UTC"));
  };
  for (const environment of environments) {
    const scope = statsScope(applicationId, environment, null);
    scopes.add(scope);
    for (const campaign of campaigns) {
      addCampaignScope(environment, campaign._id);
      if (campaign.environment === environment) {
        scopes.add(zoneScope(scope, timeZones.get(campaign._id) ?? "UTC"));
      }
    }
  }
  const zoneOfCampaign = (campaignId: string) => timeZones.get(campaignId) ?? "UTC";
  const recorder = snapshotRecorder((scope) => {
    const campaignId = campaignOfScope(scope);
    if (campaignId !== null) return [zoneOfCampaign(campaignId)];
    const environment = scope.split("|")[1];
    const inEnvironment = campaigns.filter((campaign) => campaign.environment === environment);
    return [...new Set(inEnvironment.map((campaign) => zoneOfCampaign(campaign._id)))];
  });
  let recordsRead = 0;
  const replay = (name: keyof typeof statsWatchers, history: [Document | null, Document][]) => {
    for (const [before, after] of history) statsWatchers[name](before, after, recorder.moves);
  };
  for (const deleted of [false, true]) {
    await pageThrough(
      db.customers,
      { applicationId, deletedAt: deleted ? { $ne: null } : null },
      async (page) => {
        recordsRead += page.length;
        for (const customer of page) replay("customers", [[null, customer]]);
        for (const environment of environments) {
          const ids = page
            .filter((customer) => customer.environment === environment)
            .map((c) => c._id);
          if (ids.length === 0) continue;
          const checkpoints = await db.checkpoints
            .find({ applicationId, environment, customerId: { $in: ids } })
            .toArray();
          recordsRead += checkpoints.length;
          for (const checkpoint of checkpoints) replay("checkpoints", [[null, checkpoint]]);
        }
      },
    );
  }
  await pageThrough(db.referrals, { applicationId, deletedAt: null }, async (page) => {
    recordsRead += page.length;
    for (const referral of page) {
      addCampaignScope(referral.environment, referral.campaignId);
      replay("referrals", historyOf(referral));
    }
  });
  await pageThrough(db.rewardGrants, { applicationId }, async (page) => {
    recordsRead += page.length;
    for (const grant of page) {
      if (grant.campaignId) addCampaignScope(grant.environment, grant.campaignId);
      replay("rewardGrants", historyOf(grant));
    }
  });
  return { scopes: [...scopes], wanted: recorder.finish(), recordsRead };
}

/**
 * A record as each entry of its status history left it: the first entry
 * its creation, each next one a change.
 */
function historyOf(record: Document): [Document | null, Document][] {
  const history = (record.statusHistory ?? []) as { toStatus: string; changedAt: Date }[];
  if (history.length === 0) return [[null, record]];
  const states = history.map((entry, index) => ({
    ...record,
    status: entry.toStatus,
    updatedAt: entry.changedAt,
    statusHistory: history.slice(0, index + 1),
  }));
  return states.map((state, index) => [
    index === 0 ? null : (states[index - 1] as Document),
    state,
  ]);
}

/** Every record matching `filter`, newest first, a page at a time (keyset paging on the list index). */
async function pageThrough<T extends Document & { _id: string; createdAt: Date }>(
  collection: StoreCollection<T>,
  filter: Filter<T>,
  onPage: (page: T[]) => Promise<void>,
): Promise<void> {
  let last: T | undefined;
  for (;;) {
    const query = last
      ? ({
          $and: [
            filter,
            {
              $or: [
                { createdAt: { $lt: last.createdAt } },
                { createdAt: last.createdAt, _id: { $lt: last._id } },
              ],
            },
          ],
        } as Filter<T>)
      : filter;
    const page = (await collection
      .find(query, { sort: { createdAt: -1, _id: -1 }, limit: pageSize })
      .toArray()) as T[];
    if (page.length > 0) await onPage(page);
    if (page.length < pageSize) return;
    last = page.at(-1);
  }
}

/** Moves into memory, in the shape {@link StatsSnapshot} compares. */
function snapshotRecorder(
  /** The zones whose days a scope keeps: its campaign's, or its campaigns' and UTC. */
  zonesOf: (scope: string) => readonly string[],
) {
  const snapshot = emptySnapshot();
  const chain = new Map<string, { scope: string; id: string; referrer: string; t: number }>();
  const accepted = new Map<string, { referrer: string; at: number }>();
  const moves: StatsMoves = {
    count(scope, at, name, n) {
      const add = (key: string) => snapshot.counts.set(key, (snapshot.counts.get(key) ?? 0) + n);
      for (const { size, bucket } of bucketsOf(at)) add(`${scope}|${size}|${bucket}|${name}`);
      for (const timeZone of zonesOf(scope)) {
        if (timeZone === "UTC") continue; // UTC's days are the day counters
        add(`${zoneScope(scope, timeZone)}|${zoneDay}|${zoneDayOf(at, timeZone)}|${name}`);
      }
    },
    // The recount keeps the days of the zones of now already.
    zoneChanged() {},
    attribute(scope, id, referrer, t) {
      chain.set(`${scope}|${id}`, { scope, id, referrer, t });
    },
    unattribute(scope, id) {
      chain.delete(`${scope}|${id}`);
    },
    lead(scope, id, referrer, delta, at) {
      if (delta === 1) accepted.set(`${scope}|${id}`, { referrer, at });
      else accepted.delete(`${scope}|${id}`);
    },
  };
  return {
    moves,
    finish(): StatsSnapshot {
      for (const [key, n] of snapshot.counts) if (n === 0) snapshot.counts.delete(key);
      // Each referral's predecessor: the one before it in its referrer's order.
      const byReferrer = new Map<string, { id: string; t: number; key: string }[]>();
      for (const [key, entry] of chain) {
        const group = `${entry.scope}|${entry.referrer}`;
        const list = byReferrer.get(group) ?? [];
        list.push({ id: entry.id, t: entry.t, key });
        byReferrer.set(group, list);
      }
      for (const [group, list] of byReferrer) {
        const referrer = group.slice(group.lastIndexOf("|") + 1);
        list.sort((a, b) => a.t - b.t || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
        list.forEach((entry, index) => {
          const previous = index === 0 ? null : (list[index - 1]?.t ?? null);
          snapshot.referrals.set(entry.key, `${referrer}|${entry.t}|${previous}`);
        });
      }
      const leaders = new Map<string, { accepted: number; reachedAt: number }>();
      for (const [key, entry] of accepted) {
        snapshot.acceptances.set(key, `${entry.referrer}|${entry.at}`);
        const row = `${key.slice(0, key.lastIndexOf("|"))}|${entry.referrer}`;
        const current = leaders.get(row) ?? { accepted: 0, reachedAt: entry.at };
        leaders.set(row, {
          accepted: current.accepted + 1,
          reachedAt: Math.max(current.reachedAt, entry.at),
        });
      }
      for (const [row, value] of leaders) {
        snapshot.leaders.set(row, `${value.accepted}|${value.reachedAt}`);
      }
      return snapshot;
    },
  };
}

/** One difference between what is kept and what the records make. */
export interface StatsDifference {
  readonly kind: "counter" | "referrer order" | "leaderboard" | "acceptance";
  readonly key: string;
  readonly kept: string | null;
  readonly recounted: string | null;
}

/** Every difference between two snapshots. */
/**
 * A recount with the click counters of `kept` (see `isClickMetric`): the
 * clicks themselves are removed when their window ends, so they are kept
 * as counted, never recounted or repaired.
 */
export function withKeptClickCounts(kept: StatsSnapshot, wanted: StatsSnapshot): StatsSnapshot {
  const counts = new Map(wanted.counts);
  for (const [key, n] of kept.counts) {
    if (isClickMetric(key.slice(key.lastIndexOf("|") + 1))) counts.set(key, n);
  }
  return { ...wanted, counts };
}

export function differencesOf(kept: StatsSnapshot, wanted: StatsSnapshot): StatsDifference[] {
  const differences: StatsDifference[] = [];
  const compare = (
    kind: StatsDifference["kind"],
    keptMap: Map<string, unknown>,
    wantedMap: Map<string, unknown>,
  ) => {
    for (const key of new Set([...keptMap.keys(), ...wantedMap.keys()])) {
      const a = keptMap.has(key) ? String(keptMap.get(key)) : null;
      const b = wantedMap.has(key) ? String(wantedMap.get(key)) : null;
      if (a !== b) differences.push({ kind, key, kept: a, recounted: b });
    }
  };
  compare("counter", kept.counts, wanted.counts);
  compare("referrer order", kept.referrals, wanted.referrals);
  compare("leaderboard", kept.leaders, wanted.leaders);
  compare("acceptance", kept.acceptances, wanted.acceptances);
  return differences.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}
