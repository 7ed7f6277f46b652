import { BlockList, isIP, isIPv6 } from "node:net";
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

/**
 * How an endpoint that answers again catches up on the deliveries that were
 * waiting for a retry: they are given due times `1000 / perSecond` ms apart,
 * oldest first, at most `aheadMs` ahead of now (the rest are given theirs
 * as the first are sent). A rate in the store rather than the workers' own
 * limit: `WEBHOOK_CONCURRENCY` is per instance and shared by every endpoint,
 * so a whole backlog due at once would meet a receiver that has just come
 * back with every instance's workers, ahead of every other endpoint's due
 * retries, in no particular order.
 */
export interface CatchUpPace {
  readonly perSecond: number;
  readonly aheadMs: number;
}

/**
 * 50 a second per endpoint: the backlog of a short outage (a few hundred
 * events) is sent within seconds, besides the endpoint's live events, and a
 * receiver that has just restarted is not met with all of it at once.
 */
export const catchUpPace: CatchUpPace = { perSecond: 50, aheadMs: 5_000 };

/** The most deliveries one catch-up step reads and brings forward (`aheadMs` worth). */
export function catchUpBatch(pace: CatchUpPace): number {
  return Math.max(1, Math.floor((pace.perSecond * pace.aheadMs) / 1000));
}

/** A delivery waiting for a retry, as a catch-up sees it. */
export interface WaitingDelivery {
  readonly nextAttemptAt: Date | null;
  /** The due time a catch-up gave it; null or absent if none has. */
  readonly broughtForwardTo?: Date | null;
}

/**
 * The due time a catch-up gives each of an endpoint's waiting deliveries,
 * listed oldest first, or null for one it leaves to its schedule: one
 * brought forward before (still to be sent, it holds its slot; already
 * sent and failed again, it keeps to its schedule), one whose scheduled
 * retry comes first anyway, and those past the `aheadMs` horizon. New
 * slots follow the last one already given, so steps taken by several
 * workers or instances keep to the pace.
 */
export function planCatchUp(
  waiting: readonly WaitingDelivery[],
  now: Date,
  pace: CatchUpPace = catchUpPace,
): (Date | null)[] {
  const spacingMs = 1000 / pace.perSecond;
  const horizon = now.getTime() + pace.aheadMs;
  let free = now.getTime();
  for (const { broughtForwardTo } of waiting) {
    if (broughtForwardTo && broughtForwardTo.getTime() > now.getTime()) {
      free = Math.max(free, broughtForwardTo.getTime() + spacingMs);
    }
  }
  return waiting.map(({ nextAttemptAt, broughtForwardTo }) => {
    if (broughtForwardTo || !nextAttemptAt || free >= horizon) return null;
    if (nextAttemptAt.getTime() <= free) return null;
    const slot = new Date(Math.round(free));
    free += spacingMs;
    return slot;
  });
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
 * The deprecated IPv4-compatible IPv6 addresses (`::a.b.c.d`, RFC 4291
 * 2.5.5.1): no public host uses one, and `::127.0.0.1` is loopback to some
 * stacks. ipaddr.js calls `::7f00:1` unicast and reads `::1.2.3.4` as
 * `::ffff:1.2.3.4`; Node's BlockList parses both as the address they are.
 */
const ipv4Compatible = new BlockList();
ipv4Compatible.addSubnet("::", 96, "ipv6");

/**
 * Whether an address may receive webhooks: public unicast only. Private,
 * loopback, link-local, unique-local, carrier-grade NAT, multicast,
 * reserved and unspecified ranges are refused, IPv4-mapped and
 * IPv4-compatible IPv6 included.
 */
export function isPublicAddress(address: string): boolean {
  if (!ipaddr.isValid(address)) return false;
  if (isIPv6(address) && ipv4Compatible.check(address, "ipv6")) return false;
  return ipaddr.process(address).range() === "unicast";
}

/**
 * A loopback address, or `localhost` itself: this machine. Not the names
 * under `.localhost`, which a resolver may send anywhere.
 */
function isLoopbackHost(host: string): boolean {
  if (host === "localhost") return true;
  if (isIP(host) === 0) return false;
  return ipaddr.process(host).range() === "loopback";
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
  const host = hostOf(url);
  // A private address is refused first: its refusal says how to receive
  // webhooks on a developer's machine, the case that meets it.
  if (!options.allowPrivate) {
    if (isIP(host) !== 0 && !isPublicAddress(host)) {
      return privateAddressRefused;
    }
    // A trailing dot names the same host ("localhost." is localhost).
    const name = host.endsWith(".") ? host.slice(0, -1) : host;
    if (name === "localhost" || name.endsWith(".localhost")) {
      return privateAddressRefused;
    }
  }
  // A developer's own machine (WEBHOOK_ALLOW_PRIVATE) may take any
  // environment's events over plain http on loopback: nothing leaves it.
  const developmentLoopback = options.allowPrivate && isLoopbackHost(host);
  if (options.requireHttps && url.protocol !== "https:" && !developmentLoopback) {
    return "must use https for production endpoints (http is allowed for test-only endpoints)";
  }
  if (url.username || url.password) return "must not contain credentials";
  return undefined;
}

/** The URL's host without IPv6 brackets. */
export function hostOf(url: URL): string {
  return url.hostname.replace(/^\[(.*)\]$/, "$1");
}

/**
 * Why a private URL is refused, and how to receive webhooks on a developer's
 * machine instead (the case that meets this refusal first).
 */
export const privateAddressRefused =
  "must not point at a private, loopback or link-local address (to receive webhooks on this machine, run the service with WEBHOOK_ALLOW_PRIVATE=true and `npm run admin -- listen`)";
