import { DateTime, FixedOffsetZone } from "luxon";
import { isoString } from "./iso-time.js";

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

/**
 * The first instant the numbers can be asked about: 1972-01-01T00:00Z.
 * Before 1972 some zones kept local mean time (Paris +0:09:21 until 1911,
 * Monrovia -0:44:30 until 1972-01-07), whose days do not start on a
 * quarter hour; from 1972 on, only Monrovia's first week does, and the
 * periods that reach into it are refused where they meet it.
 */
export const earliestStatsMs = Date.UTC(1972, 0, 1);

/**
 * The last instant the numbers can be asked about: 9999-12-31T00:00Z, so
 * that every instant shown, in any zone (UTC-12 to UTC+14), is in a year
 * of four digits, as ISO 8601 writes it without an agreed expansion.
 */
export const latestStatsMs = Date.UTC(9999, 11, 31);

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

/** Why a period cannot be served: the field and the problem. */
export class StatsPeriodProblem extends Error {
  constructor(
    readonly field: string,
    problem: string,
  ) {
    super(problem);
  }
}

/** A zone written as its UTC offset, as Intl names it: `+05:45`. */
const fixedOffset = /^[+-]\d\d:(\d\d)$/;

/** The zone Intl knows by `name` (in any case, or an alias), as Intl names it; undefined when unknown. */
function zoneIdOf(name: string): string | undefined {
  try {
    return new Intl.DateTimeFormat("en-US", { timeZone: name }).resolvedOptions().timeZone;
  } catch {
    return undefined;
  }
}

/**
 * A time zone as the numbers use and show it, or a {@link StatsPeriodProblem}
 * naming `field`: an IANA name in the database's spelling (`europe/paris`
 * is `Europe/Paris`; an alias such as `Asia/Kolkata` or `Etc/UTC` stays as
 * given, the zone it names being the same), or a UTC offset written
 * `+05:45` (`+0545` and `+05` are `+05:45` and `+05:00`), which must be a
 * whole number of quarter hours: the counters' resolution.
 */
export function canonicalTimeZone(name: string, field: string): string {
  const id = zoneIdOf(name);
  if (id === undefined) {
    throw new StatsPeriodProblem(field, "must be an IANA time zone such as Europe/Paris");
  }
  const offset = fixedOffset.exec(id);
  if (offset) {
    if (Number(offset[1]) % 15 !== 0) {
      throw new StatsPeriodProblem(
        field,
        "must be a whole number of quarter hours from UTC (+05:45, not +05:40): the counters' resolution",
      );
    }
    return id;
  }
  return id.toLowerCase() === name.toLowerCase() ? id : name;
}

/** True when two known zone names (`Asia/Kolkata`, `Asia/Calcutta`) name the same zone. */
export function sameTimeZone(a: string, b: string): boolean {
  return a === b || keptZoneIdOf(a) === keptZoneIdOf(b);
}

/** A zone's wall clock as Intl writes it, and its UTC offsets in minutes by quarter hour. */
interface ZoneCalendar {
  readonly wallClock: Intl.DateTimeFormat;
  readonly byQuarter: Map<number, number>;
}

/**
 * The most zones whose calendars are kept (an Intl formatter, about 40 kB,
 * and the offsets asked for), the least recently used dropped first: any
 * number of zones, and any number of spellings of one, cost at most these.
 * An environment's writes ask for every zone its campaigns have.
 */
const maxKeptZones = 64;
/** The most offsets kept per zone: a year of days, or 1,000 hours, asks for about 2,000. */
const maxKeptQuarters = 2_048;
/** The most zone names kept with the zone they name: a few bytes each. */
const maxKeptNames = 1_000;

/** Per zone, by Intl's name for it, its calendar; the least recently used first. */
const calendars = new Map<string, ZoneCalendar>();
/** The zone each name asked for lately names, by Intl's name for it. */
const zoneIds = new Map<string, string>();
let lastName: string | undefined;
let lastCalendar: ZoneCalendar | undefined;

/** How many zones, and names of zones, the calendar keeps: for the tests of its bounds. */
export function keptTimeZones(): { zones: number; names: number } {
  return { zones: calendars.size, names: zoneIds.size };
}

/** {@link zoneIdOf} a known zone name, kept: asking Intl costs about 0.3 ms. */
function keptZoneIdOf(name: string): string {
  let id = zoneIds.get(name);
  if (id === undefined) {
    id = zoneIdOf(name);
    if (id === undefined) throw new RangeError(`unknown time zone ${name}`);
    if (zoneIds.size >= maxKeptNames) zoneIds.clear();
    zoneIds.set(name, id);
  }
  return id;
}

/** The calendar of a zone, whichever of its names it is asked by. */
function calendarOf(timeZone: string): ZoneCalendar {
  // A write's counters ask for the same zone many times in a row.
  if (timeZone === lastName && lastCalendar) return lastCalendar;
  const id = keptZoneIdOf(timeZone);
  let calendar = calendars.get(id);
  if (calendar) {
    calendars.delete(id);
  } else {
    calendar = {
      wallClock: new Intl.DateTimeFormat("en-US", {
        timeZone: id,
        hourCycle: "h23",
        era: "short",
        year: "numeric",
        month: "numeric",
        day: "numeric",
        hour: "numeric",
        minute: "numeric",
        second: "numeric",
      }),
      byQuarter: new Map(),
    };
    if (calendars.size >= maxKeptZones) {
      const oldest = calendars.keys().next().value;
      if (oldest !== undefined) calendars.delete(oldest);
    }
  }
  calendars.set(id, calendar);
  lastName = timeZone;
  lastCalendar = calendar;
  return calendar;
}

/**
 * A zone's UTC offset at an instant on a whole second, in minutes, from its
 * wall clock then (with a fraction for local mean time: Paris's +9.35).
 */
function offsetFromWallClock(wallClock: Intl.DateTimeFormat, atMs: number): number {
  const parts: Record<string, string> = {};
  for (const { type, value } of wallClock.formatToParts(atMs)) parts[type] = value;
  const year = Number(parts.year);
  const local = new Date(0);
  // setUTCFullYear, not Date.UTC: years 0 to 99 are not 1900 to 1999.
  local.setUTCFullYear(
    parts.era === "BC" ? 1 - year : year,
    Number(parts.month) - 1,
    Number(parts.day),
  );
  local.setUTCHours(Number(parts.hour), Number(parts.minute), Number(parts.second));
  return (local.getTime() - atMs) / 60_000;
}

/**
 * A zone's UTC offset at an instant, in minutes. Intl is asked once per
 * quarter hour (about 10 µs each time); a write's counters ask for every
 * campaign move, and offsets change on quarter hours.
 */
function offsetAt(atMs: number, timeZone: string): number {
  const { wallClock, byQuarter } = calendarOf(timeZone);
  const quarter = Math.floor(atMs / quarterHourMs);
  let offset = byQuarter.get(quarter);
  if (offset === undefined) {
    if (byQuarter.size >= maxKeptQuarters) byQuarter.clear();
    offset = offsetFromWallClock(wallClock, quarter * quarterHourMs);
    byQuarter.set(quarter, offset);
  }
  return offset;
}

/** An offset in minutes as ISO 8601 writes it: `+05:45`, with seconds when it has some (`-00:44:30`). */
function offsetText(minutes: number): string {
  const sign = minutes < 0 ? "-" : "+";
  const seconds = Math.round(Math.abs(minutes) * 60);
  const text = `${sign}${pad(Math.floor(seconds / 3600))}:${pad(Math.floor(seconds / 60) % 60)}`;
  return seconds % 60 === 0 ? text : `${text}:${pad(seconds % 60)}`;
}

const pad = (value: number) => String(value).padStart(2, "0");

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
 * wall-clock time a daylight-saving change skips, the time moved forward
 * by the gap (as Luxon's `keepLocalTime` gives it).
 */
function utcOf(local: number, timeZone: string): number {
  const guess = offsetAt(local, timeZone);
  const corrected = offsetAt(local - guess * 60_000, timeZone);
  const at = local - corrected * 60_000;
  const settled = offsetAt(at, timeZone);
  if (settled === corrected) return at;
  // In the gap: read with the offset before it, which is the smaller.
  return local - Math.min(corrected, settled) * 60_000;
}

/**
 * The interval of `timeZone`'s calendar that holds an instant, or with
 * `count` the one that many intervals after it (-1: the one before).
 */
export function calendarIntervalOf(
  atMs: number,
  interval: StatsIntervalName,
  timeZone: string,
  count = 0,
): StatsSpan {
  const start = stepLocal(floorLocal(localOf(atMs, timeZone), interval), interval, count);
  return { from: utcOf(start, timeZone), to: utcOf(stepLocal(start, interval, 1), timeZone) };
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

const unitOf: Record<StatsIntervalName, string> = {
  hour: "hours",
  day: "days",
  week: "weeks",
  month: "months",
};

/** An instant in UTC as a message shows it: `1972-01-01T00:00:00Z`. */
const utcText = (atMs: number) => isoString(atMs).replace(".000Z", "Z");

const representable = `between ${utcText(earliestStatsMs)} and ${utcText(latestStatsMs)}, the times the counters represent`;

/**
 * Why the counters cannot represent an instant, as a problem of `field`:
 * it is outside [{@link earliestStatsMs}, {@link latestStatsMs}], or off
 * the quarter hour, given so or because the zone's offset then is not a
 * whole number of quarter hours (a zone given as such an offset is then
 * the field to blame).
 */
function uncountable(
  atMs: number,
  field: string,
  timeZone: string,
): StatsPeriodProblem | undefined {
  if (!(atMs >= earliestStatsMs && atMs <= latestStatsMs)) {
    return new StatsPeriodProblem(field, `must be ${representable}`);
  }
  if (atMs % quarterHourMs === 0) return undefined;
  const offset = offsetAt(atMs, timeZone);
  if (offset % 15 === 0) {
    return new StatsPeriodProblem(
      field,
      "must fall on a quarter hour (:00, :15, :30 or :45): the counters' resolution",
    );
  }
  return new StatsPeriodProblem(
    fixedOffset.test(timeZone) ? "timeZone" : field,
    `cannot be counted in ${timeZone}: its UTC offset at ${utcText(atMs)} is ${offsetText(offset)}, not a whole number of quarter hours, the counters' resolution`,
  );
}

/** An hour east of UTC: a time read there too tells whether it carries its own offset. */
const anHourEast = FixedOffsetZone.instance(60);

/**
 * An instant from a request, in milliseconds: an ISO date is that day's
 * midnight in `timeZone`; an ISO time without an offset is read in
 * `timeZone`. It must be one the counters represent: from 1972 to 9999, on
 * a quarter hour.
 */
export function parseStatsInstant(text: string, field: string, timeZone: string): number {
  const read = DateTime.fromISO(text, { zone: FixedOffsetZone.utcInstance });
  if (!read.isValid) {
    throw new StatsPeriodProblem(
      field,
      "must be an ISO date (2026-11-01) or time (2026-11-01T09:00:00Z)",
    );
  }
  const asUtc = read.toMillis();
  const ownOffset = DateTime.fromISO(text, { zone: anHourEast }).toMillis() === asUtc;
  // A wall clock far out of range may have no instant a Date can hold.
  if (!ownOffset && !(asUtc > earliestStatsMs - dayMs && asUtc < latestStatsMs + dayMs)) {
    throw new StatsPeriodProblem(field, `must be ${representable}`);
  }
  const at = ownOffset ? asUtc : utcOf(asUtc, timeZone);
  const problem = uncountable(at, field, timeZone);
  if (problem) throw problem;
  return at;
}

/**
 * The period a request names, in `timeZone`, cut into `interval`s: the
 * first point starts at `from`, the others at the interval's calendar
 * starts (a day is 23 or 25 hours across a daylight-saving change). Unset
 * `to` is the end of the interval that holds `now`; unset `from` is 30
 * intervals before it. The calendar is worked out on the wall clock with
 * the zone's offsets (Intl's, kept per quarter hour): a year of days costs
 * no date library call per day. Every instant of the period, and of the
 * period before when `compare` asks for it, is one the counters represent
 * (see {@link parseStatsInstant}), or the field that leads to it is refused.
 */
export function statsPeriodOf(request: {
  from?: string | undefined;
  to?: string | undefined;
  interval: StatsIntervalName;
  timeZone: string;
  now: Date;
  compare?: boolean;
}): StatsPeriod {
  const { interval, timeZone } = request;
  const given =
    request.from === undefined ? undefined : parseStatsInstant(request.from, "from", timeZone);
  const current = floorLocal(localOf(request.now.getTime(), timeZone), interval);
  const to =
    request.to !== undefined
      ? parseStatsInstant(request.to, "to", timeZone)
      : utcOf(stepLocal(current, interval, 1), timeZone);
  let from: number;
  if (given !== undefined) {
    from = given;
  } else {
    from = utcOf(
      stepLocal(floorLocal(localOf(to - 1, timeZone), interval), interval, -29),
      timeZone,
    );
    if (from < earliestStatsMs) {
      throw new StatsPeriodProblem(
        "from",
        `must be given: the 30 ${unitOf[interval]} up to \`to\` start at ${utcText(from)}, not ${representable}`,
      );
    }
    const problem = uncountable(from, "from", timeZone);
    if (problem) throw problem;
  }
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
    // Monrovia's days of early 1972 start at 00:44:30 UTC.
    const problem = uncountable(end, "from", timeZone);
    if (problem) throw problem;
    start = end;
  }
  const previous = previousOf({ from, to }, points.length, interval, timeZone);
  if (request.compare) {
    if (previous.from < earliestStatsMs) {
      throw new StatsPeriodProblem(
        "compare",
        `the period before starts at ${utcText(previous.from)}, not ${representable}`,
      );
    }
    const problem = uncountable(previous.from, "compare", timeZone);
    if (problem) throw problem;
  }
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
  return `${wallClock}${offsetText(offset)}`;
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
