import type { DescMethod } from "@bufbuild/protobuf";
import test from "ava";
import { InsightsService } from "../../gen/referral/v1/insights_pb.js";
import { keptTimeZones } from "../../src/domain/stats-time.js";
import { call, type Outcome, type WireProtocol } from "../helpers/callers.js";
import { type Json, keys, rest, useServer } from "../helpers/server.js";

/**
 * The times and zones the numbers can be asked about (docs/insights.md,
 * "Periods, intervals and time zones"): what the counters cannot represent
 * is invalid_argument naming the field, alike on REST, Connect, gRPC-Web
 * and gRPC, for every stats entry point that takes times; and a zone's
 * spellings are one zone, answered and kept under one name.
 */

const server = useServer();
const protocols: readonly WireProtocol[] = ["rest", "connect", "grpc-web", "grpc"];
const { getCampaignStats, getApplicationStats, watchCampaignStats, listTopReferrers } =
  InsightsService.method;

let campaignId = "";

test.before(async () => {
  const applicationId = server.app.demo?.applicationId;
  const created = await rest(server, "POST", `/admin/applications/${applicationId}/campaigns`, {
    key: keys.admin,
    body: { name: "Stats times", environment: "production", isLive: true, timeZone: "UTC" },
  });
  if (created.status !== 201) throw new Error(JSON.stringify(created.body));
  campaignId = created.body.id;
});

/** The same call on every protocol: all refused alike, naming `field`. */
async function refusedEverywhere(
  t: import("ava").ExecutionContext,
  method: DescMethod,
  request: Record<string, unknown>,
  field: string,
): Promise<void> {
  const outcomes: Outcome[] = [];
  for (const protocol of protocols) {
    outcomes.push(await call(server, protocol, method, request, keys.secret));
  }
  const [first] = outcomes;
  const what = `${method.name} ${JSON.stringify(request)}`;
  t.like(first, { ok: false, code: "invalid_argument" }, `${what}: ${JSON.stringify(first)}`);
  t.true(
    first?.ok === false && first.message.startsWith(`${field} `),
    `${what}: ${first?.ok === false && first.message}`,
  );
  outcomes.forEach((outcome, index) => {
    t.deepEqual(outcome, first, `${what} over ${protocols[index]}`);
  });
}

/** Refusals of a period, each with the field it names. */
const periodRefusals: { why: string; request: Json; field: string }[] = [
  {
    why: "a period past the year 9999",
    request: { from: "+275760-01-01", to: "+275760-09-13", interval: "month" },
    field: "from",
  },
  {
    why: "an end past the year 9999",
    request: { from: "2026-01-01", to: "+010000-01-01" },
    field: "to",
  },
  { why: "a start before 1972", request: { from: "1971-12-31", to: "1972-01-02" }, field: "from" },
  {
    why: "a day of local mean time (+0:09:21 in Paris)",
    request: { from: "1900-01-01", to: "1900-02-01", timeZone: "Europe/Paris" },
    field: "from",
  },
  {
    why: "an unset start that would be before 1972",
    request: { to: "1972-01-15" },
    field: "from",
  },
  {
    why: "a previous period before 1972",
    request: { from: "1972-01-01", to: "1972-02-01", compare: "previous_period" },
    field: "compare",
  },
  { why: "an offset off the quarter hour", request: { timeZone: "+00:07" }, field: "timeZone" },
  { why: "an unknown zone", request: { timeZone: "Mars/Olympus" }, field: "timeZone" },
];

for (const { why, request, field } of periodRefusals) {
  test(`${why} is refused naming ${field}, alike on every protocol and stats call`, async (t) => {
    await refusedEverywhere(t, getCampaignStats, { id: campaignId, ...request }, field);
    await refusedEverywhere(t, getApplicationStats, request, field);
    // The live totals take no interval and no comparison.
    const { interval: _, ...watched } = request;
    if (request.compare === undefined) {
      await refusedEverywhere(t, watchCampaignStats, { id: campaignId, ...watched }, field);
    }
  });
}

test("a leaderboard's own window is refused outside what the counters represent", async (t) => {
  await refusedEverywhere(t, listTopReferrers, { id: campaignId, from: "1900-01-01" }, "from");
  await refusedEverywhere(t, listTopReferrers, { id: campaignId, to: "+275760-09-13" }, "to");
});

/** The same call on every protocol: all answered. */
async function answeredEverywhere(
  t: import("ava").ExecutionContext,
  requests: readonly Json[],
): Promise<void> {
  for (const request of requests) {
    for (const protocol of protocols) {
      const outcome = await call(
        server,
        protocol,
        getCampaignStats,
        { id: campaignId, ...request },
        keys.secret,
      );
      t.true(outcome.ok, `${protocol} ${JSON.stringify(request)}: ${JSON.stringify(outcome)}`);
    }
  }
}

test("the first and last times the counters represent are answered", async (t) => {
  await answeredEverywhere(t, [
    { from: "1972-01-01", to: "1972-02-01", timeZone: "UTC" },
    { from: "1972-02-01", to: "1972-03-01", compare: "previous_period", interval: "month" },
    { from: "9999-12-01", to: "9999-12-31", compare: "previous_period" },
  ]);
});

test("offsets of whole quarter hours are answered, named as ±HH:MM", async (t) => {
  await answeredEverywhere(t, [
    { from: "2026-01-01", to: "2026-01-08", timeZone: "+05:45" },
    { from: "2026-01-01", to: "2026-01-08", timeZone: "-09:30" },
  ]);
  const kathmandu = await rest(
    server,
    "GET",
    `/campaigns/${campaignId}/stats?from=2026-01-01&to=2026-01-02&timeZone=%2B0545`,
    { key: keys.secret },
  );
  t.is(kathmandu.body.report.timeZone, "+05:45");
  t.is(kathmandu.body.report.from, "2026-01-01T00:00:00+05:45");
});

test.serial(
  "a zone's spellings are one zone: one answer, under its canonical name, kept once",
  async (t) => {
    const path = (timeZone: string) =>
      `/campaigns/${campaignId}/stats?from=2026-03-28&to=2026-03-31&timeZone=${encodeURIComponent(timeZone)}`;
    const paris = await rest(server, "GET", path("Europe/Paris"), { key: keys.secret });
    t.is(paris.status, 200);
    const before = keptTimeZones();
    const spellings = new Set([
      "eUrOpE/pArIs",
      ...Array.from({ length: 300 }, (_, n) =>
        [..."europe/paris"].map((c, i) => ((n >> i) & 1 ? c.toUpperCase() : c)).join(""),
      ),
    ]);
    for (const spelling of spellings) {
      const answer = await rest(server, "GET", path(spelling), { key: keys.secret });
      t.is(answer.status, 200, spelling);
      t.deepEqual(answer.body, paris.body, spelling);
    }
    t.is(paris.body.report.timeZone, "Europe/Paris");
    t.deepEqual(keptTimeZones(), before, "no zone and no name kept for another spelling");
  },
);
