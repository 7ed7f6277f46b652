import { DateTime, type DurationLikeObject, IANAZone } from "luxon";

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

const zones = new Map<string, IANAZone>();

/** The local calendar day of an instant in `timeZone`, as days since 1970-01-01. */
export function zoneDayOf(atMs: number, timeZone: string): number {
  let zone = zones.get(timeZone);
  if (!zone) {
    zone = IANAZone.create(timeZone) as IANAZone;
    zones.set(timeZone, zone);
  }
  return Math.floor((atMs + zone.offset(atMs) * 60_000) / 86_400_000);
}

/**
 * {@link bucketRunsOf}, with the whole local days of `timeZone` inside the
 * span read as zone-day counters (kept for a campaign's own zone only).
 */
export function spanRunsOf(
  fromMs: number,
  toMs: number,
  timeZone: string | undefined,
): BucketRun[] {
  if (!timeZone) return bucketRunsOf(fromMs, toMs);
  let first = DateTime.fromMillis(fromMs, { zone: timeZone }).startOf("day");
  if (first.toMillis() < fromMs) first = first.plus({ days: 1 }).startOf("day");
  const last = DateTime.fromMillis(toMs, { zone: timeZone }).startOf("day");
  if (last.toMillis() <= first.toMillis()) return bucketRunsOf(fromMs, toMs);
  return [
    ...bucketRunsOf(fromMs, first.toMillis()),
    {
      size: zoneDay,
      from: zoneDayOf(first.toMillis(), timeZone),
      to: zoneDayOf(last.toMillis(), timeZone),
    },
    ...bucketRunsOf(last.toMillis(), toMs),
  ];
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

/** One point of a series: [from, to). */
export interface StatsSpan {
  readonly from: DateTime;
  readonly to: DateTime;
}

/** A period, its points, and the period before it of the same length. */
export interface StatsPeriod extends StatsSpan {
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
const unitOf: Record<StatsIntervalName, keyof DurationLikeObject> = {
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
 * intervals before it.
 */
export function statsPeriodOf(request: {
  from?: string | undefined;
  to?: string | undefined;
  interval: StatsIntervalName;
  timeZone: string;
  now: Date;
}): StatsPeriod {
  const { interval, timeZone } = request;
  const unit = unitOf[interval];
  const step = { [unit]: 1 };
  const to =
    request.to !== undefined
      ? parseStatsInstant(request.to, "to", timeZone)
      : DateTime.fromJSDate(request.now, { zone: timeZone })
          .startOf(interval, { useLocaleWeeks: false })
          .plus(step);
  const from =
    request.from !== undefined
      ? parseStatsInstant(request.from, "from", timeZone)
      : to
          .minus({ [unit]: 1 })
          .startOf(interval, { useLocaleWeeks: false })
          .minus({ [unit]: 29 });
  if (to.toMillis() <= from.toMillis()) throw new StatsPeriodProblem("to", "must be after from");
  const points: StatsSpan[] = [];
  let start = from;
  while (start < to) {
    let end = start.startOf(interval, { useLocaleWeeks: false }).plus(step);
    if (end > to) end = to;
    points.push({ from: start, to: end });
    if (points.length > maxStatsPoints) {
      throw new StatsPeriodProblem(
        "interval",
        `the period holds more than ${maxStatsPoints} ${unit}: choose a longer interval or a shorter period`,
      );
    }
    start = end;
  }
  return { from, to, points, previous: previousOf(from, to, points.length, interval) };
}

/**
 * The period just before, of the same length: as many calendar intervals
 * when the period is whole intervals (the month before a month), the same
 * number of milliseconds otherwise.
 */
function previousOf(
  from: DateTime,
  to: DateTime,
  count: number,
  interval: StatsIntervalName,
): StatsSpan {
  const aligned = (at: DateTime) => at.startOf(interval, { useLocaleWeeks: false }).equals(at);
  if (aligned(from) && aligned(to)) {
    return { from: from.minus({ [unitOf[interval]]: count }), to: from };
  }
  return { from: from.minus(to.diff(from)), to: from };
}

/** An instant as the API shows a period's bounds: ISO 8601 with the zone's offset. */
export function statsInstantText(at: DateTime): string {
  return at.toISO({ suppressMilliseconds: true }) ?? at.toUTC().toISO() ?? "";
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
