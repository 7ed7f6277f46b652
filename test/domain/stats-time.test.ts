import test from "ava";
import fc from "fast-check";
import {
  bucketRunsOf,
  conversionBinOf,
  conversionBinRange,
  conversionHistogramEdges,
  leaderboardWindowRange,
  maxStatsPoints,
  quarterHourMs,
  StatsPeriodProblem,
  statsInstantText,
  statsPeriodOf,
} from "../../src/domain/stats-time.js";

const quarters = fc.integer({ min: 0, max: 4_000_000 }).map((n) => n * quarterHourMs);

test("bucket runs cover a span exactly, each counter once, with few counters", (t) => {
  fc.assert(
    fc.property(quarters, quarters, (a, b) => {
      const [from, to] = a <= b ? [a, b] : [b, a];
      const runs = bucketRunsOf(from, to);
      let at = from;
      let counters = 0;
      for (const run of runs) {
        // Contiguous, aligned, in order.
        if (run.from * run.size * 1000 !== at) return false;
        if (run.to <= run.from) return false;
        at = run.to * run.size * 1000;
        counters += run.to - run.from;
      }
      if (at !== to) return false;
      // At most 3 + 23 quarter-and-hour counters on each side, plus the days.
      const days = Math.floor((to - from) / 86_400_000);
      return counters <= 2 * (3 + 23) + days;
    }),
  );
  t.pass();
});

test("a Kolkata day is two quarter hours, 23 hours and two quarter hours", (t) => {
  const from = Date.parse("2026-03-01T18:30:00Z");
  const runs = bucketRunsOf(from, from + 86_400_000);
  t.deepEqual(
    runs.map((run) => [run.size, run.to - run.from]),
    [
      [900, 2],
      [3600, 5],
      [3600, 18],
      [900, 2],
    ],
  );
});

test("the period of a request: calendar days in the zone, 23 and 25 hours across DST", (t) => {
  const period = statsPeriodOf({
    from: "2026-03-28",
    to: "2026-03-31",
    interval: "day",
    timeZone: "Europe/Paris",
    now: new Date(),
  });
  t.deepEqual(
    period.points.map((point) => [
      statsInstantText(point.from),
      point.to.diff(point.from, "hours").hours,
    ]),
    [
      ["2026-03-28T00:00:00+01:00", 24],
      ["2026-03-29T00:00:00+01:00", 23],
      ["2026-03-30T00:00:00+02:00", 24],
    ],
  );
  const autumn = statsPeriodOf({
    from: "2026-10-25",
    to: "2026-10-26",
    interval: "day",
    timeZone: "Europe/Paris",
    now: new Date(),
  });
  t.is(autumn.points[0]?.to.diff(autumn.points[0].from, "hours").hours, 25);
  // The period before a whole number of days is as many days.
  t.is(statsInstantText(period.previous.from), "2026-03-25T00:00:00+01:00");
  t.is(statsInstantText(period.previous.to), "2026-03-28T00:00:00+01:00");
});

test("weeks start on Monday and months are calendar months; the previous month is a month", (t) => {
  const weeks = statsPeriodOf({
    from: "2026-11-04",
    to: "2026-11-20",
    interval: "week",
    timeZone: "UTC",
    now: new Date(),
  });
  t.deepEqual(
    weeks.points.map((point) => statsInstantText(point.from)),
    ["2026-11-04T00:00:00Z", "2026-11-09T00:00:00Z", "2026-11-16T00:00:00Z"],
  );
  const month = statsPeriodOf({
    from: "2026-03-01",
    to: "2026-04-01",
    interval: "month",
    timeZone: "Asia/Kathmandu",
    now: new Date(),
  });
  t.is(month.points.length, 1);
  t.is(statsInstantText(month.previous.from), "2026-02-01T00:00:00+05:45");
});

test("unset bounds: the 30 intervals up to the one that holds now", (t) => {
  const period = statsPeriodOf({
    interval: "day",
    timeZone: "Asia/Kathmandu",
    now: new Date("2026-11-25T18:14:00Z"), // 23:59 in Kathmandu
  });
  t.is(period.points.length, 30);
  t.is(statsInstantText(period.to), "2026-11-26T00:00:00+05:45");
  t.is(statsInstantText(period.from), "2026-10-27T00:00:00+05:45");
});

test("refused periods name the field", (t) => {
  const problem = (request: Partial<Parameters<typeof statsPeriodOf>[0]>) =>
    t.throws(
      () => statsPeriodOf({ interval: "day", timeZone: "UTC", now: new Date(), ...request }),
      { instanceOf: StatsPeriodProblem },
    );
  t.is(problem({ from: "2026-13-01", to: "2026-12-01" })?.field, "from");
  t.is(problem({ from: "2026-11-01T10:05:00Z", to: "2026-12-01" })?.field, "from");
  t.is(problem({ from: "2026-11-02", to: "2026-11-01" })?.field, "to");
  t.is(problem({ from: "2020-01-01", to: "2026-01-01", interval: "hour" })?.field, "interval");
  t.true(maxStatsPoints >= 366, "a year of days fits");
});

test("conversion bins hold their durations and include the histogram's edges", (t) => {
  fc.assert(
    fc.property(fc.integer({ min: 0, max: 40_000_000 }), (seconds) => {
      const range = conversionBinRange(conversionBinOf(seconds));
      return seconds >= range.from && (range.to === null || seconds < range.to);
    }),
  );
  for (const edge of conversionHistogramEdges) {
    t.is(conversionBinRange(conversionBinOf(edge)).from, edge);
  }
});

test("a leaderboard month is the month in the campaign's zone", (t) => {
  const range = leaderboardWindowRange("2026-11", "Asia/Kolkata");
  t.deepEqual(range, [Date.parse("2026-10-31T18:30:00Z"), Date.parse("2026-11-30T18:30:00Z")]);
  t.is(leaderboardWindowRange("all", "UTC"), null);
});
