import type { LimitIntervalName } from "./reward-ledger.js";
import { zoneDayOf } from "./stats-time.js";

/**
 * A campaign's calendar: the time zone its limit windows and its days of
 * stats are counted in, and the window of its calendar an instant falls in.
 */

/** A campaign's time zone; UTC for one that names none (stored before campaigns had one). */
export function timeZoneOfCampaign(campaign: { readonly timeZone?: string | null }): string {
  return campaign.timeZone || "UTC";
}

const dayMs = 86_400_000;

/**
 * Year, month and day of an instant on the calendar of a time zone, from
 * the stats calendar's offsets (kept per quarter hour, for a bounded number
 * of zones).
 */
function calendarDate(at: Date, timeZone: string): { year: number; month: number; day: number } {
  // Most campaigns keep UTC: its calendar needs no offset.
  const local = timeZone === "UTC" ? at : new Date(zoneDayOf(at.getTime(), timeZone) * dayMs);
  return { year: local.getUTCFullYear(), month: local.getUTCMonth() + 1, day: local.getUTCDate() };
}

const pad = (value: number) => String(value).padStart(2, "0");

/**
 * The limit window an instant falls in, on the calendar of `timeZone`:
 * `2026-11-25` (day), `2026-W48` (ISO week, Monday first, numbered in the
 * year of its Thursday), `2026-11` (month), `2026` (year), or `lifetime`.
 */
export function limitWindowOf(at: Date, interval: LimitIntervalName, timeZone: string): string {
  if (interval === "lifetime") return "lifetime";
  const { year, month, day } = calendarDate(at, timeZone);
  switch (interval) {
    case "day":
      return `${year}-${pad(month)}-${pad(day)}`;
    case "month":
      return `${year}-${pad(month)}`;
    case "year":
      return String(year);
    case "week": {
      // The local date as a UTC midnight: whole-day arithmetic, no zone.
      const date = Date.UTC(year, month - 1, day);
      const weekday = (new Date(date).getUTCDay() + 6) % 7; // Monday 0
      const thursday = new Date(date + (3 - weekday) * dayMs);
      const weekYear = thursday.getUTCFullYear();
      const week = 1 + Math.floor((thursday.getTime() - Date.UTC(weekYear, 0, 1)) / (7 * dayMs));
      return `${weekYear}-W${pad(week)}`;
    }
  }
}
