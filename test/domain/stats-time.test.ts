import test from "ava";
import fc from "fast-check";
import { DateTime } from "luxon";
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
      statsInstantText(point.from, "Europe/Paris"),
      (point.to - point.from) / 3_600_000,
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
  const [autumnDay] = autumn.points;
  t.is(autumnDay && (autumnDay.to - autumnDay.from) / 3_600_000, 25);
  // The period before a whole number of days is as many days.
  t.is(statsInstantText(period.previous.from, "Europe/Paris"), "2026-03-25T00:00:00+01:00");
  t.is(statsInstantText(period.previous.to, "Europe/Paris"), "2026-03-28T00:00:00+01:00");
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
    weeks.points.map((point) => statsInstantText(point.from, "UTC")),
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
  t.is(statsInstantText(month.previous.from, "Asia/Kathmandu"), "2026-02-01T00:00:00+05:45");
});

test("unset bounds: the 30 intervals up to the one that holds now", (t) => {
  const period = statsPeriodOf({
    interval: "day",
    timeZone: "Asia/Kathmandu",
    now: new Date("2026-11-25T18:14:00Z"), // 23:59 in Kathmandu
  });
  t.is(period.points.length, 30);
  t.is(statsInstantText(period.to, "Asia/Kathmandu"), "2026-11-26T00:00:00+05:45");
  t.is(statsInstantText(period.from, "Asia/Kathmandu"), "2026-10-27T00:00:00+05:45");
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

test("the calendar's starts are Luxon's, in zones with odd offsets and midnight changes", (t) => {
  const zones = [
    "Europe/Paris",
    "America/Santiago", // daylight saving changes at midnight
    "America/Havana",
    "Asia/Kathmandu",
    "Australia/Lord_Howe", // a half-hour change
    "Pacific/Chatham",
    "America/St_Johns",
  ];
  const intervals = ["hour", "day", "week", "month"] as const;
  fc.assert(
    fc.property(
      fc.constantFrom(...zones),
      fc.constantFrom(...intervals),
      fc.integer({ min: Date.parse("2020-01-01"), max: Date.parse("2030-01-01") }),
      (zone, interval, at) => {
        const span = { hour: 3, day: 60, week: 120, month: 400 }[interval] * 86_400_000;
        const from = DateTime.fromMillis(at, { zone }).startOf(interval, { useLocaleWeeks: false });
        const period = statsPeriodOf({
          from: from.toISO() ?? "",
          to:
            DateTime.fromMillis(at + span, { zone })
              .startOf(interval, { useLocaleWeeks: false })
              .toISO() ?? "",
          interval,
          timeZone: zone,
          now: new Date(),
        });
        return period.points.every((point, index) => {
          const start = DateTime.fromMillis(point.from, { zone });
          const aligned = start.startOf(interval, { useLocaleWeeks: false }).toMillis();
          const previous = period.points[index - 1];
          return aligned === point.from && (!previous || previous.to === point.from);
        });
      },
    ),
    { numRuns: 300 },
  );
  t.pass();
});
