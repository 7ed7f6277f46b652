import test from "ava";
import fc from "fast-check";
import { DateTime } from "luxon";
import {
  bucketRunsOf,
  calendarIntervalOf,
  canonicalTimeZone,
  conversionBinOf,
  conversionBinRange,
  conversionHistogramEdges,
  keptTimeZones,
  maxStatsPoints,
  quarterHourMs,
  StatsPeriodProblem,
  sameTimeZone,
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
  const now = Date.parse("2026-11-15T12:00:00Z");
  t.deepEqual(calendarIntervalOf(now, "month", "Asia/Kolkata"), {
    from: Date.parse("2026-10-31T18:30:00Z"),
    to: Date.parse("2026-11-30T18:30:00Z"),
  });
  t.deepEqual(calendarIntervalOf(now, "month", "Asia/Kolkata", -1), {
    from: Date.parse("2026-09-30T18:30:00Z"),
    to: Date.parse("2026-10-31T18:30:00Z"),
  });
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

test("a zone's name is canonical: its database spelling, an alias as given, an offset as ±HH:MM", (t) => {
  for (const spelling of ["Europe/Paris", "europe/paris", "EUROPE/PARIS", "eUrOpE/pArIs"]) {
    t.is(canonicalTimeZone(spelling, "timeZone"), "Europe/Paris", spelling);
  }
  t.is(canonicalTimeZone("utc", "timeZone"), "UTC");
  // An alias names the same zone, and is kept as the caller wrote it.
  t.is(canonicalTimeZone("Asia/Kolkata", "timeZone"), "Asia/Kolkata");
  t.true(sameTimeZone("Asia/Kolkata", "Asia/Calcutta"));
  t.false(sameTimeZone("Asia/Kolkata", "Asia/Karachi"));
  t.is(canonicalTimeZone("+0545", "timeZone"), "+05:45");
  t.is(canonicalTimeZone("-05", "timeZone"), "-05:00");
  t.is(canonicalTimeZone("-00:00", "timeZone"), "+00:00");
  const refused = (name: string, field = "timeZone") =>
    t.throws(() => canonicalTimeZone(name, field), { instanceOf: StatsPeriodProblem });
  t.is(refused("Mars/Olympus")?.field, "timeZone");
  t.is(refused("+00:07", "campaign.timeZone")?.field, "campaign.timeZone");
  t.regex(refused("+05:40")?.message ?? "", /whole number of quarter hours/);
  t.is(refused("+00:07:30")?.field, "timeZone");
});

test("spellings of a zone share one calendar, and any number of zones keep a bounded few", (t) => {
  const before = keptTimeZones();
  const period = (timeZone: string) =>
    statsPeriodOf({ from: "2026-03-28", to: "2026-03-31", interval: "day", timeZone, now });
  const now = new Date("2026-03-01T00:00:00Z");
  const paris = period("Europe/Paris");
  const spellings = Array.from({ length: 300 }, (_, n) =>
    [..."europe/paris"].map((c, i) => ((n >> i) & 1 ? c.toUpperCase() : c)).join(""),
  );
  for (const spelling of new Set(spellings)) {
    t.deepEqual(period(spelling).points, paris.points);
  }
  // One zone, whatever it is called; the names are strings, and capped.
  t.true(keptTimeZones().zones <= before.zones + 1);
  for (const zone of Intl.supportedValuesOf("timeZone")) period(zone);
  const after = keptTimeZones();
  t.true(after.zones <= 64, `${after.zones} zones kept`);
  t.true(after.names <= 1000, `${after.names} names kept`);
});

test("a zone whose offset is off the quarter hour is refused where the period meets it", (t) => {
  const problem = (request: Partial<Parameters<typeof statsPeriodOf>[0]>) =>
    t.throws(
      () => statsPeriodOf({ interval: "day", timeZone: "UTC", now: new Date(), ...request }),
      { instanceOf: StatsPeriodProblem },
    )?.field;
  // Monrovia's offset was -0:44:30 until 1972-01-07: its days began off the quarter hour.
  t.is(problem({ from: "1972-01-01", to: "1972-01-09", timeZone: "Africa/Monrovia" }), "from");
  t.is(
    problem({ from: "1972-01-01T00:45:00Z", to: "1972-01-09", timeZone: "Africa/Monrovia" }),
    "from",
    "a day of the period starts off the quarter hour",
  );
  // A zone stored before offsets off the quarter hour were refused is refused by name.
  t.is(problem({ from: "2026-01-01", to: "2026-01-02", timeZone: "+00:07" }), "timeZone");
  t.is(problem({ to: "2026-01-02", timeZone: "+00:07" }), "timeZone");
  t.is(problem({ timeZone: "+00:07" }), "timeZone");

  const at = (request: Partial<Parameters<typeof statsPeriodOf>[0]>) =>
    statsPeriodOf({ interval: "day", timeZone: "UTC", now: new Date(), ...request });
  const monrovia = at({ from: "1972-01-08", to: "1972-01-10", timeZone: "Africa/Monrovia" });
  t.is(statsInstantText(monrovia.from, "Africa/Monrovia"), "1972-01-08T00:00:00+00:00");
  const kathmandu = at({ from: "2026-01-01", to: "2026-01-02", timeZone: "+05:45" });
  t.is(statsInstantText(kathmandu.from, "+05:45"), "2026-01-01T00:00:00+05:45");
});

test("the counters represent 1972 to 9999: times outside are refused, naming the field", (t) => {
  const problem = (request: Partial<Parameters<typeof statsPeriodOf>[0]>) =>
    t.throws(
      () => statsPeriodOf({ interval: "day", timeZone: "UTC", now: new Date(), ...request }),
      { instanceOf: StatsPeriodProblem },
    )?.field;
  t.is(
    problem({ from: "+275760-01-01", to: "+275760-09-13", interval: "month" }),
    "from",
    "past the last year",
  );
  t.is(problem({ from: "2026-01-01", to: "+275760-09-13", interval: "month" }), "to");
  t.is(problem({ from: "2026-01-01", to: "+010000-01-01", interval: "month" }), "to");
  t.is(problem({ from: "9999-12-31T00:15:00Z", to: "9999-12-31T01:00:00Z" }), "from");
  t.is(problem({ from: "-000001-01-01", to: "2026-01-01", interval: "month" }), "from");
  t.is(problem({ from: "1971-12-31T23:45:00Z", to: "1972-01-02" }), "from");
  // Paris kept local mean time (+0:09:21) until 1911.
  t.is(problem({ from: "1900-01-01", to: "1900-02-01", timeZone: "Europe/Paris" }), "from");
  // Unset, `from` is 30 days before `to`; before 1972 it must be given.
  t.is(problem({ to: "1972-01-15" }), "from");
  // The period before, asked for, must be countable too.
  t.is(problem({ from: "1972-01-01", to: "1972-02-01", compare: true }), "compare");

  const at = (request: Partial<Parameters<typeof statsPeriodOf>[0]>) =>
    statsPeriodOf({ interval: "day", timeZone: "UTC", now: new Date(), ...request });
  const first = at({ from: "1972-01-01", to: "1972-02-01" });
  t.is(statsInstantText(first.from, "UTC"), "1972-01-01T00:00:00Z");
  const last = at({ from: "9999-12-01", to: "9999-12-31", compare: true });
  t.is(statsInstantText(last.to, "UTC"), "9999-12-31T00:00:00Z");
  t.is(last.points.length, 30);
});

test("an instant is shown with its zone's offset, seconds and all: never a fraction of a minute", (t) => {
  t.is(statsInstantText(Date.UTC(1900, 0, 1), "Europe/Paris"), "1900-01-01T00:09:21+00:09:21");
  t.is(statsInstantText(Date.UTC(1971, 5, 1), "Africa/Monrovia"), "1971-05-31T23:15:30-00:44:30");
  fc.assert(
    fc.property(
      fc.constantFrom(...Intl.supportedValuesOf("timeZone")),
      fc.integer({ min: 0, max: 50_000_000 }).map((n) => n * quarterHourMs),
      (zone, at) => /(Z|[+-]\d\d:\d\d(:\d\d)?)$/.test(statsInstantText(at, zone)),
    ),
  );
  t.pass();
});

test("a wall-clock time a daylight-saving change skips moves forward by the gap, as in Luxon", (t) => {
  for (const [zone, text] of [
    ["Europe/Paris", "2026-03-29T02:30:00"],
    ["America/Santiago", "2026-09-06T00:00:00"],
    ["Australia/Lord_Howe", "2026-10-04T02:15:00"],
  ] as const) {
    const expected = DateTime.fromISO(text, { zone }).toMillis();
    const [point] = statsPeriodOf({
      from: text,
      to: "2027-01-01",
      interval: "month",
      timeZone: zone,
      now: new Date(),
    }).points;
    t.is(point?.from, expected, zone);
  }
});
