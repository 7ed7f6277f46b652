import { DateTime, IANAZone } from "luxon";
import { isoString } from "../contract/iso-time.js";

/**
 * The calendar of the program's numbers. Counters are kept per UTC quarter
 * hour (and per hour and UTC day, so a long period reads few of them):
 * every UTC offset in use since 1972 is a whole number of quarter hours
 * (Asia/Kolkata +5:30, Asia/Kathmandu +5:45, Australia/Eucla +8:45), so
 * every hour, day, week and month of any IANA time zone starts and ends on
 * a quarter hour, and is an exact sum of counters.
 */

/** The counters' sizes, in seconds: a quarter hour, an hour, a UTC day. */
export const bucketSeconds = [900, 3600, 86_400] as const;
export type BucketSize = (typeof bucketSeconds)[number];

/** The finest counter. */
export const quarterHourMs = 900_000;

/** The counter of each size an instant falls in. */
export function bucketsOf(atMs: number): { size: BucketSize; bucket: number }[] {
  const seconds = Math.floor(atMs / 1000);
  return bucketSeconds.map((size) => ({ size, bucket: Math.floor(seconds / size) }));
}

/**
 * A campaign's counters are also kept per calendar day of its time zone
 * (size {@link zoneDay}, bucket the local date as days since 1970-01-01),
 * so a year of its days reads 365 counters whatever its offset; another
 * zone's days add up UTC counters (about 25 a day in Kolkata).
 */
export const zoneDay = 1;

/** A run of counters of one size: buckets `from` to `to`, `to` excluded. */
export interface BucketRun {
  readonly size: BucketSize | typeof zoneDay;
  readonly from: number;
  readonly to: number;
}

/** Per zone, its UTC offset in minutes by quarter hour (offsets change on quarter hours). */
const offsets = new Map<string, { zone: IANAZone; byQuarter: Map<number, number> }>();

/**
 * A zone's UTC offset at an instant, in minutes. Luxon asks Intl for it
 * each time (about 10 µs); a write's counters ask for every campaign move,
 * so it is kept per quarter hour, the grain at which offsets change.
 */
function offsetAt(atMs: number, timeZone: string): number {
  let entry = offsets.get(timeZone);
  if (!entry) {
    entry = { zone: IANAZone.create(timeZone) as IANAZone, byQuarter: new Map() };
    offsets.set(timeZone, entry);
  }
  const quarter = Math.floor(atMs / quarterHourMs);
  let offset = entry.byQuarter.get(quarter);
  if (offset === undefined) {
    if (entry.byQuarter.size >= 10_000) entry.byQuarter.clear();
    offset = entry.zone.offset(quarter * quarterHourMs);
    entry.byQuarter.set(quarter, offset);
  }
  return offset;
}

/** The local calendar day of an instant in `timeZone`, as days since 1970-01-01. */
export function zoneDayOf(atMs: number, timeZone: string): number {
  return Math.floor((atMs + offsetAt(atMs, timeZone) * 60_000) / 86_400_000);
}

/** The shortest local day: a span shorter holds no whole day. */
const shortestDayMs = 23 * 3_600_000;
const dayMs = 86_400_000;

/**
 * {@link bucketRunsOf}, with the whole local days of `timeZone` inside the
 * span read as zone-day counters (kept for the zones a target keeps).
 */
export function spanRunsOf(span: StatsSpan, timeZone: string | undefined): BucketRun[] {
  const { from, to } = span;
  if (!timeZone || to - from < shortestDayMs) return bucketRunsOf(from, to);
  // Local midnights, as local wall-clock milliseconds.
  let firstDay = Math.floor(localOf(from, timeZone) / dayMs) * dayMs;
  if (utcOf(firstDay, timeZone) < from) firstDay += dayMs;
  const lastDay = Math.floor(localOf(to, timeZone) / dayMs) * dayMs;
  if (lastDay <= firstDay) return bucketRunsOf(from, to);
  const first = utcOf(firstDay, timeZone);
  const last = utcOf(lastDay, timeZone);
  return [
    ...bucketRunsOf(from, first),
    { size: zoneDay, from: firstDay / dayMs, to: lastDay / dayMs },
    ...bucketRunsOf(last, to),
  ];
}

/** An instant's local wall-clock time in `timeZone`, as milliseconds since 1970 of that wall clock. */
function localOf(atMs: number, timeZone: string): number {
  return atMs + offsetAt(atMs, timeZone) * 60_000;
}

/**
 * The instant whose local wall-clock time in `timeZone` is `local`; for a
 * wall-clock time a daylight-saving change skips, the one Luxon gives (the
 * time moved forward by the gap).
 */
function utcOf(local: number, timeZone: string): number {
  let at = local - offsetAt(local, timeZone) * 60_000;
  at = local - offsetAt(at, timeZone) * 60_000;
  if (localOf(at, timeZone) === local) return at;
  return DateTime.fromMillis(local, { zone: "UTC" })
    .setZone(timeZone, { keepLocalTime: true })
    .toMillis();
}

/** The local start of the interval holding a local wall-clock time (a Monday for weeks). */
function floorLocal(local: number, interval: StatsIntervalName): number {
  switch (interval) {
    case "hour":
      return Math.floor(local / 3_600_000) * 3_600_000;
    case "day":
      return Math.floor(local / dayMs) * dayMs;
    case "week": {
      const day = Math.floor(local / dayMs) * dayMs;
      return day - ((new Date(day).getUTCDay() + 6) % 7) * dayMs;
    }
    case "month": {
      const date = new Date(local);
      return Date.UTC(date.getUTCFullYear(), date.getUTCMonth(), 1);
    }
  }
}

/** A local interval start moved by `count` intervals, on the wall clock. */
function stepLocal(local: number, interval: StatsIntervalName, count: number): number {
  switch (interval) {
    case "hour":
      return local + count * 3_600_000;
    case "day":
      return local + count * dayMs;
    case "week":
      return local + count * 7 * dayMs;
    case "month": {
      const date = new Date(local);
      return Date.UTC(date.getUTCFullYear(), date.getUTCMonth() + count, 1);
    }
  }
}

/**
 * The fewest counters that add up to [fromMs, toMs) (both on quarter
 * hours): quarter hours up to the first whole hour, hours up to the first
 * UTC midnight, days, then hours and quarter hours to the end.
 */
export function bucketRunsOf(fromMs: number, toMs: number): BucketRun[] {
  const runs: BucketRun[] = [];
  let at = fromMs / 1000;
  const end = toMs / 1000;
  const take = (size: BucketSize, until: number) => {
    if (until <= at) return;
    runs.push({ size, from: at / size, to: until / size });
    at = until;
  };
  const [quarter, hour, day] = bucketSeconds;
  // Up: to the next hour, then to the next midnight, each as far as the end allows.
  take(quarter, Math.min(Math.ceil(at / hour) * hour, Math.floor(end / quarter) * quarter));
  if (at % hour === 0)
    take(hour, Math.min(Math.ceil(at / day) * day, Math.floor(end / hour) * hour));
  if (at % day === 0) take(day, Math.floor(end / day) * day);
  // Down: what is left, in hours, then quarter hours.
  if (at % hour === 0) take(hour, Math.floor(end / hour) * hour);
  take(quarter, end);
  return runs;
}

/** How a period is cut into points. */
export type StatsIntervalName = "hour" | "day" | "week" | "month";

/** A span of time, [from, to), in milliseconds. */
export interface StatsSpan {
  readonly from: number;
  readonly to: number;
}

/** A period in a time zone, its points, and the period before it of the same length. */
export interface StatsPeriod extends StatsSpan {
  readonly timeZone: string;
  readonly points: readonly StatsSpan[];
  readonly previous: StatsSpan;
}

/** The most points a series may hold. */
export const maxStatsPoints = 1000;

/** Why a period cannot be served: the field and the problem. */
export class StatsPeriodProblem extends Error {
  constructor(
    readonly field: string,
    problem: string,
  ) {
    super(problem);
  }
}

const isoDate = /^\d{4}-\d{2}-\d{2}$/;
const unitOf: Record<StatsIntervalName, string> = {
  hour: "hours",
  day: "days",
  week: "weeks",
  month: "months",
};

/**
 * An instant from a request: an ISO date is that day's midnight in
 * `timeZone`; an ISO time without an offset is read in `timeZone`.
 */
export function parseStatsInstant(text: string, field: string, timeZone: string): DateTime {
  const value = DateTime.fromISO(text, { zone: timeZone, setZone: false }).setZone(timeZone);
  if (!value.isValid) {
    throw new StatsPeriodProblem(
      field,
      "must be an ISO date (2026-11-01) or time (2026-11-01T09:00:00Z)",
    );
  }
  if (!isoDate.test(text) && value.toMillis() % quarterHourMs !== 0) {
    throw new StatsPeriodProblem(
      field,
      "must fall on a quarter hour (:00, :15, :30 or :45): the counters' resolution",
    );
  }
  return value;
}

/**
 * The period a request names, in `timeZone`, cut into `interval`s: the
 * first point starts at `from`, the others at the interval's calendar
 * starts (a day is 23 or 25 hours across a daylight-saving change). Unset
 * `to` is the end of the interval that holds `now`; unset `from` is 30
 * intervals before it. The calendar is worked out on the wall clock with
 * the zone's offsets (Intl's, kept per quarter hour): a year of days costs
 * no date library call per day.
 */
export function statsPeriodOf(request: {
  from?: string | undefined;
  to?: string | undefined;
  interval: StatsIntervalName;
  timeZone: string;
  now: Date;
}): StatsPeriod {
  const { interval, timeZone } = request;
  const current = floorLocal(localOf(request.now.getTime(), timeZone), interval);
  const to =
    request.to !== undefined
      ? parseStatsInstant(request.to, "to", timeZone).toMillis()
      : utcOf(stepLocal(current, interval, 1), timeZone);
  const from =
    request.from !== undefined
      ? parseStatsInstant(request.from, "from", timeZone).toMillis()
      : utcOf(stepLocal(floorLocal(localOf(to - 1, timeZone), interval), interval, -29), timeZone);
  if (to <= from) throw new StatsPeriodProblem("to", "must be after from");
  const points: StatsSpan[] = [];
  let start = from;
  // The next calendar start, on the wall clock.
  let boundary = stepLocal(floorLocal(localOf(from, timeZone), interval), interval, 1);
  while (start < to) {
    const end = Math.min(utcOf(boundary, timeZone), to);
    boundary = stepLocal(boundary, interval, 1);
    points.push({ from: start, to: end });
    if (points.length > maxStatsPoints) {
      throw new StatsPeriodProblem(
        "interval",
        `the period holds more than ${maxStatsPoints} ${unitOf[interval]}: choose a longer interval or a shorter period`,
      );
    }
    start = end;
  }
  const previous = previousOf({ from, to }, points.length, interval, timeZone);
  return { from, to, timeZone, points, previous };
}

/**
 * The period just before, of the same length: as many calendar intervals
 * when the period is whole intervals (the month before a month), the same
 * number of milliseconds otherwise.
 */
function previousOf(
  period: StatsSpan,
  count: number,
  interval: StatsIntervalName,
  timeZone: string,
): StatsSpan {
  const startOf = (at: number) => floorLocal(localOf(at, timeZone), interval);
  const aligned = (at: number) => utcOf(startOf(at), timeZone) === at;
  if (aligned(period.from) && aligned(period.to)) {
    return {
      from: utcOf(stepLocal(startOf(period.from), interval, -count), timeZone),
      to: period.from,
    };
  }
  return { from: period.from - (period.to - period.from), to: period.from };
}

const pad = (value: number) => String(value).padStart(2, "0");

/**
 * An instant as the API shows a period's bounds: ISO 8601 in the zone, with
 * its offset (`Z` in the zone named UTC, as Luxon writes it), milliseconds
 * only when there are some.
 */
export function statsInstantText(atMs: number, timeZone: string): string {
  const offset = offsetAt(atMs, timeZone);
  // The local wall clock, written as if it were UTC, then the zone's offset.
  const local = isoString(atMs + offset * 60_000);
  const wallClock = local.endsWith(".000Z") ? local.slice(0, -5) : local.slice(0, -1);
  if (timeZone === "UTC") return `${wallClock}Z`;
  const sign = offset < 0 ? "-" : "+";
  const minutes = Math.abs(offset);
  return `${wallClock}${sign}${pad(Math.floor(minutes / 60))}:${pad(minutes % 60)}`;
}

/**
 * The fine bins of the time to convert: a minute under an hour, a quarter
 * hour under a day, an hour under a week, six hours under 30 days, a day
 * under 365 days, then one bin. Their edges include the histogram's, so
 * the histogram is exact and a percentile is exact to its bin.
 */
const fineBinSteps: readonly { until: number; width: number }[] = [
  { until: 3600, width: 60 },
  { until: 86_400, width: 900 },
  { until: 604_800, width: 3600 },
  { until: 2_592_000, width: 21_600 },
  { until: 31_536_000, width: 86_400 },
];

/** The fine bin of a duration in seconds. */
export function conversionBinOf(seconds: number): number {
  let first = 0;
  let start = 0;
  for (const { until, width } of fineBinSteps) {
    if (seconds < until) return first + Math.floor((Math.max(0, seconds) - start) / width);
    first += (until - start) / width;
    start = until;
  }
  return first;
}

/** The seconds a fine bin covers: [from, to), `to` null for the last. */
export function conversionBinRange(bin: number): { from: number; to: number | null } {
  let first = 0;
  let start = 0;
  for (const { until, width } of fineBinSteps) {
    const count = (until - start) / width;
    if (bin < first + count) {
      const from = start + (bin - first) * width;
      return { from, to: from + width };
    }
    first += count;
    start = until;
  }
  return { from: start, to: null };
}

/** The histogram the API shows: under an hour, a day, a week, 30 days, and longer. */
export const conversionHistogramEdges = [0, 3600, 86_400, 604_800, 2_592_000] as const;

/** A leaderboard window's span in ms ([from, to)); null for every acceptance (`all`). */
export function leaderboardWindowRange(window: string, timeZone: string): [number, number] | null {
  if (window === "all") return null;
  const start = DateTime.fromISO(window, { zone: timeZone }).startOf("month");
  return [start.toMillis(), start.plus({ months: 1 }).toMillis()];
}
