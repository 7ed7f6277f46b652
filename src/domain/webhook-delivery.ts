import { isIP } from "node:net";
import ipaddr from "ipaddr.js";

/**
 * The default retry schedule: the delay before each attempt, the first
 * immediate. Eight attempts over about 28 hours.
 */
export const defaultRetrySchedule: readonly number[] = [
  0,
  5_000,
  5 * 60_000,
  30 * 60_000,
  2 * 3_600_000,
  5 * 3_600_000,
  10 * 3_600_000,
  10 * 3_600_000,
];

/**
 * When the attempt after `attemptsMade` failed attempts is due, or null when
 * the schedule is exhausted. Delays get ±10% jitter, so endpoints that failed
 * together are not retried in lockstep.
 */
export function nextAttemptAt(
  schedule: readonly number[],
  attemptsMade: number,
  now: Date,
  random: () => number = Math.random,
): Date | null {
  const delay = schedule[attemptsMade];
  if (delay === undefined) return null;
  const jitter = delay * 0.1 * (random() * 2 - 1);
  return new Date(now.getTime() + Math.round(delay + jitter));
}

/** True when an endpoint failing since `failingSince` has failed for long enough to be disabled. */
export function shouldDisable(
  failingSince: Date | null,
  now: Date,
  disableAfterMs: number,
): boolean {
  return failingSince !== null && now.getTime() - failingSince.getTime() >= disableAfterMs;
}

/** A 2xx answer is success; anything else is retried. */
export function isSuccessStatus(status: number): boolean {
  return status >= 200 && status < 300;
}

/**
 * Whether an address may receive webhooks: public unicast only. Private,
 * loopback, link-local, unique-local, carrier-grade NAT, multicast,
 * reserved and unspecified ranges are refused, IPv4-mapped IPv6 included.
 */
export function isPublicAddress(address: string): boolean {
  if (!ipaddr.isValid(address)) return false;
  const parsed = ipaddr.process(address);
  return parsed.range() === "unicast";
}

/** Why a webhook URL is refused, or undefined when it is acceptable before DNS. */
export function webhookUrlProblem(
  raw: string,
  options: { requireHttps: boolean; allowPrivate: boolean },
): string | undefined {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return "must be an absolute URL";
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") return "must be an http(s) URL";
  if (options.requireHttps && url.protocol !== "https:") {
    return "must use https for production endpoints (http is allowed for test-only endpoints)";
  }
  if (url.username || url.password) return "must not contain credentials";
  const host = hostOf(url);
  if (!options.allowPrivate) {
    if (isIP(host) !== 0 && !isPublicAddress(host)) {
      return "must not point at a private, loopback or link-local address";
    }
    if (host === "localhost" || host.endsWith(".localhost")) {
      return "must not point at a private, loopback or link-local address";
    }
  }
  return undefined;
}

/** The URL's host without IPv6 brackets. */
export function hostOf(url: URL): string {
  return url.hostname.replace(/^\[(.*)\]$/, "$1");
}
