import { setTimeout as sleep } from "node:timers/promises";
import { InsightsService } from "../../gen/referral/v1/insights_pb.js";
import { RewardsService } from "../../gen/referral/v1/rewards_pb.js";
import type { Json } from "../helpers/server.js";
import type { Snapshot } from "./invariants.js";
import type { Model } from "./model.js";
import type { Credential, Outcome, System } from "./system.js";

/**
 * Reads everything the invariants look at, for one run's application: the
 * lists (paged to their end), each of the run's customers with its balance
 * and export, the campaign, its numbers on every route that shows them
 * (REST, Connect and gRPC, the live stream), the leaderboards and the CSV
 * export. Several reads at a time, as clients of the service would.
 */
export async function readSnapshot(system: System, model: Model, step: number): Promise<Snapshot> {
  const app = model.app;
  if (!app) throw new Error("the run has no application yet");
  const takenAt = Date.now();
  const texts: { where: string; text: string }[] = [];
  const key = app.secret;
  // Reads are sent again when a connection closed unanswered as a worker
  // died (the system judged it; see `System.unanswered`): a client retries a read.
  const read = async (where: string, answer: () => Promise<Outcome>): Promise<Json> => {
    let outcome = await answer();
    // Backing off, as a client would, while a killed worker's replacement loads.
    for (let retry = 0; retry < 8 && !outcome.ok && outcome.code === "no_answer"; retry++) {
      await sleep(Math.min(200 * 2 ** retry, 3_000));
      outcome = await answer();
    }
    texts.push({ where, text: outcome.text });
    if (!outcome.ok) throw new Error(`${where} answered ${outcome.text}`);
    return outcome.body;
  };
  const get = (path: string, credential: Credential = key) =>
    read(`GET ${path}`, () => system.rest(credential, "GET", path));
  const all = async (path: string): Promise<Json[]> => {
    const records: Json[] = [];
    for (;;) {
      const page = await get(`${path}&limit=100&offset=${records.length}`);
      records.push(...page.data);
      if (page.data.length === 0 || records.length >= page.total) return records;
    }
  };

  const [live, erased, referrals, grants, campaigns] = await Promise.all([
    all("/customers?environment=test"),
    all("/customers?environment=test&deleted=true"),
    all("/referrals?environment=test"),
    all("/reward-grants?environment=test"),
    get("/campaigns?environment=test"),
  ]);
  const customers = new Map<string, Json>();
  for (const customer of [...live, ...erased]) customers.set(customer.id, customer);
  const campaign = (campaigns as Json[]).find((candidate) => candidate.id === app.campaignId);

  const ours = model.slots.flatMap((slot) => (slot.id ? [slot.id] : []));
  // An erased customer has no balance to read (not_found); its grants stay listed.
  const withGrants = new Set(
    [...ours, ...grants.map((grant) => grant.customerId as string)].filter(
      (id) => !customers.get(id)?.deletedAt,
    ),
  );
  const balances = new Map<string, Json>();
  const exports = new Map<string, Json>();
  // One balance a step over gRPC and Connect, the others over REST.
  const protocols = ["grpc", "connect", "rest"] as const;
  await inPool([...withGrants], 6, async (customerId, index) => {
    const protocol = protocols[(step + index) % protocols.length] ?? "rest";
    const balance =
      protocol === "rest"
        ? await get(`/customers/${customerId}/reward-balance`)
        : await read(`GetCustomerRewardBalance ${customerId} over ${protocol}`, () =>
            system.call(key, protocol, RewardsService.method.getCustomerRewardBalance, {
              customerId,
            }),
          );
    balances.set(customerId, balance);
  });
  await inPool(ours, 6, async (customerId) => {
    customers.set(customerId, await get(`/customers/${customerId}`));
    exports.set(customerId, await get(`/customers/${customerId}/export`));
  });

  // Wide enough for the campaign's calendar in any zone: the run is minutes long.
  const day = 86_400_000;
  const period = `from=${dateOf(takenAt - 2 * day)}&to=${dateOf(takenAt + 3 * day)}`;
  const statsProtocol = step % 2 === 0 ? "rest" : "connect";
  const [environmentStats, campaignStats, leaderboard, csv, stream] = await Promise.all([
    get(`/stats?environment=test&timeZone=UTC&interval=day&${period}`),
    statsProtocol === "rest"
      ? get(`/campaigns/${app.campaignId}/stats?interval=day&${period}`)
      : read("GetCampaignStats over Connect", () =>
          system.call(key, "connect", InsightsService.method.getCampaignStats, {
            id: app.campaignId,
            interval: "day",
            from: dateOf(takenAt - 2 * day),
            to: dateOf(takenAt + 3 * day),
          }),
        ),
    get(`/campaigns/${app.campaignId}/leaderboard?limit=100`),
    read("GET /referrals/export", () =>
      system.fetchText(key, "/referrals/export?environment=test"),
    ),
    firstStreamEvent(system, key, `/campaigns/${app.campaignId}/stats/stream?${period}`),
  ]);
  texts.push({ where: "the stats stream's first event", text: JSON.stringify(stream) });
  const publicLeaderboard = campaign?.leaderboard?.public
    ? (await get(`/campaigns/${app.campaignId}/leaderboard/public?limit=100`, app.public)).data
    : undefined;
  return {
    takenAt,
    customers,
    referrals,
    grants,
    balances,
    exports,
    campaign,
    environmentTotals: environmentStats.report.totals,
    campaignTotals: campaignStats.report.totals,
    streamTotals: stream.totals,
    leaderboard: leaderboard.data,
    ...(publicLeaderboard ? { publicLeaderboard } : {}),
    csv,
    texts,
  };
}

/** The first update of a stats stream; the stream is closed after it. */
async function firstStreamEvent(system: System, key: Credential, path: string): Promise<Json> {
  const stream = await system.openEvents(key, path);
  try {
    const event = await stream.next();
    if (!event) throw new Error(`${path} ended before its first update`);
    return event;
  } finally {
    stream.close();
  }
}

/** YYYY-MM-DD in UTC. */
function dateOf(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

/** Runs `work` on each item, at most `size` at a time. */
export async function inPool<T>(
  items: readonly T[],
  size: number,
  work: (item: T, index: number) => Promise<void>,
): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const index = next++;
      await work(items[index] as T, index);
    }
  };
  await Promise.all(Array.from({ length: Math.min(size, items.length) }, worker));
}
