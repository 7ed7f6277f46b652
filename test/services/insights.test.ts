import { join } from "node:path";
import test from "ava";
import { InsightsService } from "../../gen/referral/v1/insights_pb.js";
import { writeBehindTheService } from "../helpers/behind-the-service.js";
import { wireProtocols } from "../helpers/callers.js";
import { type Json, keys, rest, useServer } from "../helpers/server.js";
import { keepStreamOpen } from "../helpers/streams.js";
import { manualTicker } from "../helpers/ticker.js";
import { eventually, within } from "../helpers/wait.js";

/**
 * InsightsService over REST on a server whose clock is ours: every number
 * of a period, the series in a campaign's time zone (half-hour, 45-minute
 * and daylight-saving days), the previous period, the leaderboards, and the
 * refusals. The tests share the clock, so they run serially.
 */
let now = new Date("2026-03-01T00:00:00.000Z").getTime();
const clock = () => new Date(now);
const at = (iso: string) => {
  now = new Date(iso).getTime();
};
// The watches poll when the test ticks.
const ticker = manualTicker();
const server = useServer({
  clock,
  streamTicks: ticker,
  env: { REFERRAL_VELOCITY_LIMIT: "100000" },
});

function expectOk<T = Json>(response: { status: number; body: Json }, status = 200): T {
  if (response.status !== status) {
    throw new Error(`expected ${status}, got ${response.status}: ${JSON.stringify(response.body)}`);
  }
  return response.body;
}

const secret = (method: string, path: string, body?: unknown) =>
  rest(server, method, path, { key: keys.secret, body });

let names = 0;
const fresh = (name: string) => `${name}-${++names}`;

async function campaign(fields: Json = {}): Promise<Json> {
  const applicationId = server.app.demo?.applicationId;
  const created = await rest(server, "POST", `/admin/applications/${applicationId}/campaigns`, {
    key: keys.admin,
    body: {
      name: "Insights",
      environment: "production",
      isLive: true,
      proposedRewardTrigger: "purchase",
      rewards: [
        {
          type: "payout",
          party: "referrer",
          method: "paypal",
          currency: "usd",
          payoutAmount: 10,
        },
      ],
      ...fields,
    },
  });
  return expectOk(created, 201);
}

async function identify(name = fresh("customer")): Promise<Json> {
  const response = await secret("POST", "/customers/identify", { externalUserId: name, name });
  return expectOk(response, 201);
}

async function refer(target: Json, referrer: Json, referee: Json): Promise<Json> {
  const response = await secret("POST", "/referrals", {
    campaignId: target.id,
    referralCode: referrer.referralCode,
    refereeId: referee.id,
  });
  return expectOk(response, 201);
}

async function purchase(referee: Json): Promise<void> {
  const response = await secret("POST", "/checkpoints/ingest", {
    name: "purchase",
    externalUserId: referee.externalUserId,
    environment: "production",
  });
  expectOk(response, 201);
}

test.serial(
  "a period's numbers, each with its terms, and a series in the campaign's days",
  async (t) => {
    const kolkata = await campaign({ timeZone: "Asia/Kolkata" });
    // Kolkata is UTC+5:30: 2026-03-02 there runs from 2026-03-01T18:30Z to 2026-03-02T18:30Z.
    at("2026-03-01T18:29:00Z"); // still March 1st in Kolkata
    const early = await identify();
    at("2026-03-01T18:30:00Z"); // March 2nd
    const ada = await identify();
    const bob = await identify();
    const referee1 = await identify();
    const referee2 = await identify();
    const referee3 = await identify();
    await refer(kolkata, ada, referee1);
    await refer(kolkata, ada, referee2);
    await refer(kolkata, bob, referee3);
    at("2026-03-02T20:30:00Z"); // March 3rd in Kolkata, 26 hours after
    await purchase(referee1);
    at("2026-03-03T00:00:00Z"); // 29.5 hours after
    await purchase(referee3);
    t.truthy(early);

    const report = (
      await secret(
        "GET",
        `/campaigns/${kolkata.id}/stats?from=2026-03-01&to=2026-03-04&interval=day`,
      )
    ).body.report;
    t.is(report.timeZone, "Asia/Kolkata");
    t.is(report.from, "2026-03-01T00:00:00+05:30");
    t.is(report.to, "2026-03-04T00:00:00+05:30");
    t.deepEqual(
      report.series.map((point: Json) => [point.from, point.stats.customersIdentified]),
      [
        ["2026-03-01T00:00:00+05:30", 1],
        ["2026-03-02T00:00:00+05:30", 5],
        ["2026-03-03T00:00:00+05:30", 0],
      ],
    );
    const totals = report.totals;
    t.is(totals.customersIdentified, 6);
    t.is(totals.referralsCreated, 3);
    t.is(totals.referrersActive, 2, "ada made two referrals and counts once");
    t.like(totals.referralsReached, { pending: 3, accepted: 2, flagged: 0 });
    t.deepEqual(totals.conversionRate, { numerator: 2, denominator: 3, value: 2 / 3 });
    t.deepEqual(totals.cohortConversionRate, { numerator: 2, denominator: 3, value: 2 / 3 });
    t.deepEqual(totals.kFactor, { numerator: 2, denominator: 6, value: 2 / 6 });
    t.is(totals.timeToConvert.count, 2);
    // 26 and 29.5 hours: the hour-wide bins under a week, shown by their upper edges.
    t.is(totals.timeToConvert.p50Seconds, 27 * 3600);
    t.is(totals.timeToConvert.p90Seconds, 30 * 3600);
    t.deepEqual(
      totals.timeToConvert.histogram.map((bin: Json) => [
        bin.fromSeconds,
        bin.toSeconds,
        bin.count,
      ]),
      [
        [0, 3600, 0],
        [3600, 86400, 0],
        [86400, 604800, 2],
        [604800, 2592000, 0],
        [2592000, null, 0],
      ],
    );
    t.deepEqual(totals.checkpoints, [{ name: "purchase", count: 2 }]);
    const [usd] = totals.rewards;
    t.is(usd.currency, "usd");
    // No hold: each grant is approved as it is earned.
    t.like(usd, {
      pending: { count: 0, amount: 0 },
      approved: { count: 2, amount: 20 },
      committed: { count: 2, amount: 20 },
    });
    t.deepEqual(totals.costPerAcquisition, [
      { currency: "usd", committedAmount: 20, referralsAccepted: 2, amount: 10 },
    ]);
    const day3 = report.series[2].stats;
    t.is(day3.referralsReached.accepted, 2, "accepted on the 3rd");
    t.is(day3.conversionRate.denominator, 0, "created on the 2nd");
    t.false("value" in day3.conversionRate && day3.conversionRate.value !== null);
  },
);

const applicationId = () => server.app.demo?.applicationId as string;
const verify = async (repair = false) =>
  expectOk(
    await rest(server, "POST", `/admin/applications/${applicationId()}/stats/verify`, {
      key: keys.admin,
      body: { repair },
    }),
  );

test.serial(
  "verify-stats finds no difference, then finds and repairs a corrupted counter",
  async (t) => {
    const clean = await verify();
    t.is(clean.differenceCount, 0, JSON.stringify(clean.differences));
    t.true(clean.recordsRead > 0);

    // Corrupt the kept numbers behind the service's back: one counter, one leaderboard row.
    await writeBehindTheService(
      join(server.dataDir, "referrals.sqlite"),
      "UPDATE stat_counts SET n = n + 5 WHERE (scope, size, bucket, metric) = (SELECT scope, size, bucket, metric FROM stat_counts WHERE metric = 'created' AND size = 86400 LIMIT 1); " +
        "UPDATE stat_leaderboard SET accepted = accepted + 1",
    );

    const found = await verify();
    t.true(found.differenceCount >= 2);
    const kinds = new Set(found.differences.map((difference: Json) => difference.kind));
    t.true(kinds.has("counter") && kinds.has("leaderboard"));
    const counter = found.differences.find((difference: Json) => difference.kind === "counter");
    t.is(Number(counter.kept) - Number(counter.recounted), 5);
    t.false(found.repaired);

    const repaired = await verify(true);
    t.true(repaired.repaired);
    t.is(repaired.differenceCount, found.differenceCount);
    const after = await verify();
    t.is(after.differenceCount, 0, JSON.stringify(after.differences));
  },
);

test.serial(
  "45-minute offsets and a daylight-saving day are exact to the quarter hour",
  async (t) => {
    const kathmandu = await campaign({ timeZone: "Asia/Kathmandu" });
    const referrer = await identify();
    // Kathmandu is UTC+5:45: its April 10th starts at 2026-04-09T18:15Z.
    for (const instant of [
      "2026-04-09T18:14:59Z",
      "2026-04-09T18:15:00Z",
      "2026-04-10T18:14:59Z",
    ]) {
      at(instant);
      await refer(kathmandu, referrer, await identify());
    }
    const days = (
      await secret("GET", `/campaigns/${kathmandu.id}/stats?from=2026-04-09&to=2026-04-12`)
    ).body.report.series.map((point: Json) => [point.from, point.stats.referralsCreated]);
    t.deepEqual(days, [
      ["2026-04-09T00:00:00+05:45", 1],
      ["2026-04-10T00:00:00+05:45", 2],
      ["2026-04-11T00:00:00+05:45", 0],
    ]);

    const paris = await campaign({ timeZone: "Europe/Paris" });
    // 2026-10-25 in Paris is 25 hours: from 2026-10-24T22:00Z to 2026-10-25T23:00Z.
    for (const instant of [
      "2026-10-24T21:59:00Z",
      "2026-10-24T22:00:00Z",
      "2026-10-25T22:59:00Z",
      "2026-10-25T23:00:00Z",
    ]) {
      at(instant);
      await refer(paris, referrer, await identify());
    }
    const autumn = (
      await secret("GET", `/campaigns/${paris.id}/stats?from=2026-10-24&to=2026-10-27`)
    ).body.report;
    t.deepEqual(
      autumn.series.map((point: Json) => [point.from, point.to, point.stats.referralsCreated]),
      [
        ["2026-10-24T00:00:00+02:00", "2026-10-25T00:00:00+02:00", 1],
        ["2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00", 2],
        ["2026-10-26T00:00:00+01:00", "2026-10-27T00:00:00+01:00", 1],
      ],
    );
    t.is(autumn.totals.referrersActive, 1, "one referrer, whatever the number of referrals");
    t.deepEqual(
      autumn.series.map((point: Json) => point.stats.referrersActive),
      [1, 1, 1],
    );
    // Hours in another zone than the campaign's: the requested zone's calendar.
    const hours = (
      await secret(
        "GET",
        `/campaigns/${paris.id}/stats?from=2026-10-24T21:00:00Z&to=2026-10-24T23:00:00Z&interval=hour&timeZone=Asia/Kolkata`,
      )
    ).body.report;
    t.deepEqual(
      hours.series.map((point: Json) => [point.from, point.stats.referralsCreated]),
      [
        ["2026-10-25T02:30:00+05:30", 0],
        ["2026-10-25T03:00:00+05:30", 2],
        ["2026-10-25T04:00:00+05:30", 0],
      ],
    );
  },
);

test.serial(
  "the previous period, and all campaigns together with each referrer once",
  async (t) => {
    const first = await campaign();
    const second = await campaign();
    const referrer = await identify();
    at("2026-05-10T10:00:00Z");
    await refer(first, referrer, await identify());
    at("2026-06-10T10:00:00Z");
    await refer(first, referrer, await identify());
    await refer(second, referrer, await identify());
    const june = (
      await secret(
        "GET",
        `/campaigns/${first.id}/stats?from=2026-06-01&to=2026-07-01&interval=month&compare=previous_period`,
      )
    ).body.report;
    t.is(june.series.length, 1);
    t.is(june.totals.referralsCreated, 1);
    t.deepEqual(june.previous, {
      from: "2026-05-01T00:00:00Z",
      to: "2026-06-01T00:00:00Z",
      stats: june.previous.stats,
    });
    t.is(june.previous.stats.referralsCreated, 1);
    const all = (
      await secret(
        "GET",
        "/stats?from=2026-06-01&to=2026-07-01&interval=month&environment=production",
      )
    ).body.report;
    t.is(all.campaignId, null);
    t.true(all.totals.referralsCreated >= 2);
    const both = (
      await secret("GET", "/stats?from=2026-06-10T10:00:00Z&to=2026-06-10T10:15:00Z&interval=hour")
    ).body.report;
    t.is(both.totals.referralsCreated, 2);
    t.is(both.totals.referrersActive, 1, "active in two campaigns, counted once");
  },
);

test.serial(
  "the leaderboard: ranks, ties, windows, rewards, and erased customers left out",
  async (t) => {
    const board = await campaign({ timeZone: "UTC" });
    const ada = await identify("Ada Lovelace");
    const bob = await identify("Bob Stone");
    const cy = await identify("Cy");
    at("2026-07-10T10:00:00Z");
    const referees: Json[] = [];
    for (const referrer of [ada, ada, bob, bob, cy]) {
      const referee = await identify();
      referees.push(referee);
      await refer(board, referrer, referee);
    }
    // Bob reaches two acceptances before Ada; Cy's is in August.
    at("2026-07-11T10:00:00Z");
    await purchase(referees[2]);
    at("2026-07-12T10:00:00Z");
    await purchase(referees[3]);
    at("2026-07-13T10:00:00Z");
    await purchase(referees[0]);
    await purchase(referees[1]);
    at("2026-08-02T10:00:00Z");
    await purchase(referees[4]);

    const all = expectOk(await secret("GET", `/campaigns/${board.id}/leaderboard`));
    t.deepEqual(
      all.data.map((row: Json) => [row.rank, row.name, row.referralsAccepted, row.referralsMade]),
      [
        [1, bob.name, 2, 2],
        [2, ada.name, 2, 2],
        [3, cy.name, 1, 1],
      ],
    );
    t.is(all.data[0].customerId, bob.id);
    t.is(all.data[0].externalUserId, bob.externalUserId);
    t.like(all.data[0].rewards[0], { currency: "usd", approved: { count: 2, amount: 20 } });
    t.is(all.from, null);

    const august = expectOk(await secret("GET", `/campaigns/${board.id}/leaderboard?window=month`));
    t.deepEqual(
      august.data.map((row: Json) => row.customerId),
      [cy.id],
    );
    t.is(august.from, "2026-08-01T00:00:00Z");
    const july = expectOk(
      await secret("GET", `/campaigns/${board.id}/leaderboard?window=previous_month&limit=1`),
    );
    t.deepEqual(
      july.data.map((row: Json) => row.customerId),
      [bob.id],
    );
    const span = expectOk(
      await secret(
        "GET",
        `/campaigns/${board.id}/leaderboard?from=2026-07-12T00:00:00Z&to=2026-07-14`,
      ),
    );
    t.deepEqual(
      span.data.map((row: Json) => [row.customerId, row.referralsAccepted]),
      [
        [ada.id, 2],
        [bob.id, 1],
      ],
    );

    // The public board: off by default, then masked, minimum applied, for public keys too.
    const off = await rest(server, "GET", `/campaigns/${board.id}/leaderboard/public`, {
      key: keys.public,
    });
    t.is(off.status, 404);
    const updated = await rest(
      server,
      "PATCH",
      `/admin/campaigns/${board.id}?updateMask=leaderboard`,
      {
        key: keys.admin,
        body: { leaderboard: { public: true, minimumAccepted: 2 } },
      },
    );
    expectOk(updated);
    const shown = expectOk(
      await rest(server, "GET", `/campaigns/${board.id}/leaderboard/public`, { key: keys.public }),
    );
    t.deepEqual(shown.data, [
      { rank: 1, displayName: "Bob S.", referralsAccepted: 2 },
      { rank: 2, displayName: "Ada L.", referralsAccepted: 2 },
    ]);
    t.false(JSON.stringify(shown).includes(bob.id));

    // An erased customer leaves both boards at once; the totals keep its counts.
    expectOk(await secret("DELETE", `/customers/${bob.id}`));
    const afterErasure = expectOk(await secret("GET", `/campaigns/${board.id}/leaderboard`));
    t.deepEqual(
      afterErasure.data.map((row: Json) => [row.rank, row.customerId]),
      [
        [1, ada.id],
        [2, cy.id],
      ],
    );
    const publicAfter = expectOk(
      await rest(server, "GET", `/campaigns/${board.id}/leaderboard/public`, { key: keys.public }),
    );
    t.deepEqual(
      publicAfter.data.map((row: Json) => row.displayName),
      ["Ada L."],
    );
    const totals = (
      await secret(
        "GET",
        `/campaigns/${board.id}/stats?from=2026-07-01&to=2026-09-01&interval=month`,
      )
    ).body.report.totals;
    t.is(totals.referralsReached.accepted, 5);
  },
);

test.serial("another application's key sees none of these numbers", async (t) => {
  const other = expectOk(
    await rest(server, "POST", "/admin/applications", { key: keys.admin, body: { name: "Other" } }),
    201,
  );
  const campaigns = expectOk(await secret("GET", "/campaigns"));
  const mine = campaigns[0];
  const theirs = await rest(server, "GET", `/campaigns/${mine.id}/stats`, { key: other.secretKey });
  t.is(theirs.status, 404);
  const leaderboard = await rest(server, "GET", `/campaigns/${mine.id}/leaderboard`, {
    key: other.secretKey,
  });
  t.is(leaderboard.status, 404);
  const overall = expectOk(
    await rest(server, "GET", "/stats?from=2026-01-01&to=2027-01-01&interval=month", {
      key: other.secretKey,
    }),
  ).report.totals;
  t.is(overall.referralsCreated, 0);
  t.is(overall.customersIdentified, 0);
  const mineOverall = expectOk(
    await secret("GET", "/stats?from=2026-01-01&to=2027-01-01&interval=month"),
  ).report.totals;
  t.true(mineOverall.referralsCreated > 0);
});

test.serial("bad requests name the field and change nothing", async (t) => {
  const target = await campaign();
  const refused = async (path: string, field: string, key = keys.secret) => {
    const response = await rest(server, "GET", path, { key });
    t.is(response.status, 400, `${path}: ${JSON.stringify(response.body)}`);
    t.is(response.body.details?.[0]?.field, field, path);
  };
  await refused(`/campaigns/${target.id}/stats?timeZone=Mars/Olympus`, "timeZone");
  await refused(`/campaigns/${target.id}/stats?from=2026-01-01T10:07:00Z`, "from");
  await refused(`/campaigns/${target.id}/stats?from=2026-02-01&to=2026-01-01`, "to");
  await refused(
    `/campaigns/${target.id}/stats?from=2020-01-01&to=2026-01-01&interval=hour`,
    "interval",
  );
  await refused(`/campaigns/${target.id}/stats?environment=test`, "environment");
  await refused(`/campaigns/${target.id}/leaderboard?limit=101`, "limit");
  await refused(`/campaigns/${target.id}/leaderboard?window=month&from=2026-01-01`, "window");
  const unknown = await secret("GET", "/campaigns/cmp_missing/stats");
  t.is(unknown.status, 404);
  const publicKey = await rest(server, "GET", `/campaigns/${target.id}/stats`, {
    key: keys.public,
  });
  t.is(publicKey.status, 403);
});

test.serial(
  "the live totals: at once, then after a conversion, over Server-Sent Events",
  async (t) => {
    const live = await campaign();
    at("2026-09-01T10:00:00Z");
    const response = await fetch(
      `${server.baseUrl}/campaigns/${live.id}/stats/stream?from=2026-09-01&to=2026-10-01`,
      { headers: { authorization: keys.secret } },
    );
    t.is(response.status, 200);
    t.regex(response.headers.get("content-type") ?? "", /^text\/event-stream/);
    const reader = (response.body as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    let buffered = "";
    const nextEvent = async (): Promise<Json> => {
      for (;;) {
        const end = buffered.indexOf("\n\n");
        if (end >= 0) {
          const block = buffered.slice(0, end);
          buffered = buffered.slice(end + 2);
          const data = block.split("\n").find((line) => line.startsWith("data: "));
          if (data) return JSON.parse(data.slice("data: ".length));
          continue;
        }
        const { value, done } = await reader.read();
        if (done) throw new Error("the stream ended");
        buffered += decoder.decode(value, { stream: true });
      }
    };
    const first = await nextEvent();
    t.is(first.from, "2026-09-01T00:00:00Z");
    t.is(first.totals.referralsReached.accepted, 0);
    const referrer = await identify();
    const referee = await identify();
    await refer(live, referrer, referee);
    await purchase(referee);
    // Updates are coalesced: the one that shows the acceptance comes within a few.
    let update = await nextEvent();
    while (update.totals.referralsReached.accepted === 0) update = await nextEvent();
    t.is(update.totals.referralsReached.accepted, 1);
    t.is(update.totals.referralsCreated, 1);
    await reader.cancel();
  },
);

test.serial(
  "the live totals are sent again only when they change, not at each poll or write elsewhere, on every protocol",
  async (t) => {
    const live = await campaign();
    const elsewhere = await campaign();
    at("2026-09-01T10:00:00Z");
    const [referrer, referee, otherReferrer, otherReferee] = [
      await identify(),
      await identify(),
      await identify(),
      await identify(),
    ];
    // Streams of the tests before have ended: nothing waits for a tick.
    await eventually("no stream open", () => ticker.waiting === 0);
    const request = { id: live.id, from: "2026-09-01", to: "2026-10-01" };
    const streams = wireProtocols.map((protocol) =>
      keepStreamOpen(
        server,
        protocol,
        InsightsService.method.watchCampaignStats,
        request,
        keys.secret,
      ),
    );
    try {
      const firsts = await within(
        Promise.all(streams.map((stream) => stream.received(1))),
        10_000,
        "every first message",
      );
      t.deepEqual(
        firsts.map((first) => first.totals.referralsCreated),
        streams.map(() => 0),
      );
      // Each watch waits for its next look; so does the check of the streams' keys.
      const watches = streams.length;
      await eventually("every watch waiting for a poll", () => ticker.waiting === watches + 1);

      // A poll: every watch looks again, finds the same totals, and waits again.
      let begun = ticker.begun;
      ticker.tick();
      await eventually("every watch polled", () => ticker.begun >= begun + watches + 1);
      // A write in another campaign of the application wakes every watch of it: the same totals.
      begun = ticker.begun;
      await refer(elsewhere, otherReferrer, otherReferee);
      await eventually("every watch woken", () => ticker.begun >= begun + watches);

      await refer(live, referrer, referee);
      const seconds = await within(
        Promise.all(streams.map((stream) => stream.received(2))),
        10_000,
        "every second message",
      );
      for (const [index, second] of seconds.entries()) {
        t.is(
          second.totals.referralsCreated,
          1,
          `${wireProtocols[index]}: the change, nothing before`,
        );
      }
    } finally {
      for (const stream of streams) stream.stop();
    }
  },
);

test.serial(
  "the export: CSV with a header, quoted fields, filters, and erased customers left out",
  async (t) => {
    const exported = await campaign();
    at("2026-09-10T10:00:00Z");
    const referrer = await identify('=cmd|"quoted, with a comma"');
    const semicolons = await identify("x;=cmd|' /C calc'!A0;\"@SUM(1)");
    const kept = await identify();
    const another = await identify();
    const erased = await identify();
    await refer(exported, referrer, kept);
    await refer(exported, referrer, erased);
    await refer(exported, semicolons, another);
    at("2026-09-10T11:00:00Z");
    await purchase(kept);
    await purchase(another);
    expectOk(await secret("DELETE", `/customers/${erased.id}`));

    const response = await fetch(
      `${server.baseUrl}/referrals/export?campaignId=${exported.id}&environment=production`,
      { headers: { authorization: keys.secret } },
    );
    t.is(response.status, 200);
    t.is(response.headers.get("content-type"), "text/csv; charset=utf-8");
    t.regex(
      response.headers.get("content-disposition") ?? "",
      /attachment; filename="referrals-production\.csv"/,
    );
    const text = await response.text();
    const lines = text.split("\r\n");
    t.is(lines.at(-1), "", "every record ends with CRLF");
    t.is(
      lines[0],
      "id,campaignId,environment,status,createdAt,updatedAt,referrerId,referrerExternalUserId,refereeId,refereeExternalUserId,pendingAt,flaggedAt,acceptedAt,rejectedAt,reversedAt,suspectedFrauds,attribution,clickedAt",
    );
    t.is(lines.length, 4, "the header and two referrals: the erased referee's is left out");
    // Read as a spreadsheet of any locale would, splitting on its delimiter
    // whatever the file meant: no cell starts a formula.
    for (const delimiter of [",", ";", "\t", "|"]) {
      for (const line of lines.slice(1)) {
        for (const cell of line.split(delimiter)) {
          t.notRegex(cell, /^[ "]*[=+\-@]/, `split on ${JSON.stringify(delimiter)}: ${line}`);
        }
      }
    }
    // Both referrals were made at the same time: their order is their ids'.
    const defused = lines.find((line) => line.includes(semicolons.id));
    t.true(
      defused?.includes(`"x;'=cmd|' /C calc'!A0;""'@SUM(1)"`),
      "a semicolon is quoted, and what follows it defused",
    );
    const first = lines.find((line) => line.includes(referrer.id)) ?? "";
    const fields = first.split(",");
    t.is(fields[2], "production");
    t.is(fields[3], "accepted");
    t.is(fields[4], "2026-09-10T10:00:00.000Z");
    // The formula-like external id: an apostrophe first, quoted, quotes doubled.
    t.true(first.includes(`"'=cmd|""quoted, with a comma"""`));
    // Made with the referrer's code: no click.
    t.true(first.endsWith(",2026-09-10T10:00:00.000Z,,2026-09-10T11:00:00.000Z,,,,code,"));

    const accepted = await fetch(
      `${server.baseUrl}/referrals/export?campaignId=${exported.id}&status=pending`,
      { headers: { authorization: keys.secret } },
    );
    t.is((await accepted.text()).split("\r\n").length, 2, "only the header: none is pending");
    const later = await fetch(
      `${server.baseUrl}/referrals/export?campaignId=${exported.id}&from=2026-09-11`,
      { headers: { authorization: keys.secret } },
    );
    t.is((await later.text()).split("\r\n").length, 2);
  },
);

test.serial("a campaign that changes its time zone counts its days in the new one", async (t) => {
  const moving = await campaign({ timeZone: "UTC" });
  const referrer = await identify();
  for (const instant of ["2026-10-01T17:00:00Z", "2026-10-01T19:00:00Z", "2026-10-02T03:00:00Z"]) {
    at(instant);
    await refer(moving, referrer, await identify());
  }
  const path = `/campaigns/${moving.id}/stats?from=2026-10-01&to=2026-10-04&timeZone=Asia/Kolkata`;
  const days = async () =>
    (await secret("GET", path)).body.report.series.map((point: Json) => [
      point.from,
      point.stats.referralsCreated,
    ]);
  // Read from UTC counters while Kolkata is not the campaign's zone.
  const before = await days();
  t.deepEqual(before, [
    ["2026-10-01T00:00:00+05:30", 1],
    ["2026-10-02T00:00:00+05:30", 2],
    ["2026-10-03T00:00:00+05:30", 0],
  ]);
  expectOk(
    await rest(server, "PATCH", `/admin/campaigns/${moving.id}?updateMask=timeZone`, {
      key: keys.admin,
      body: { timeZone: "Asia/Kolkata" },
    }),
  );
  // Now from its zone-day counters, built again for Kolkata.
  t.deepEqual(await days(), before);
  at("2026-10-03T10:00:00Z");
  await refer(moving, referrer, await identify());
  const after = await days();
  t.deepEqual(after[2], ["2026-10-03T00:00:00+05:30", 1]);
});

test.serial("after everything above, the counters equal a recount of the records", async (t) => {
  const result = await verify();
  t.is(result.differenceCount, 0, JSON.stringify(result.differences));
});
