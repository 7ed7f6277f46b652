import { Code, ConnectError } from "@connectrpc/connect";
import ipaddr from "ipaddr.js";
import {
  type RateLimiterAbstract,
  RateLimiterCluster,
  RateLimiterMemory,
  RateLimiterMongo,
  RateLimiterRes,
} from "rate-limiter-flexible";
import { Access } from "../../gen/referral/v1/options_pb.js";
import type { RateLimit, RateLimitConfig } from "../config.js";
import { methodAccess } from "../contract/options.js";
import { type CodeLookups, callerKey, codeLookupsKey } from "../services/context.js";
import type { MongoStore, Store } from "../store/store.js";
import type { Call, Interceptor, Next } from "./pipeline.js";

/**
 * The rate limits as two steps of the pipeline, on either side of
 * authentication, and the count authentication makes of its failures.
 */
export interface RateLimits {
  /**
   * Before authentication, by client address: counts admin calls, and
   * refuses an admin call from an address over its failed-authentication
   * limit before the admin token is checked (an operator's token may be
   * guessable; an API key is not, see `authenticationFailed`).
   */
  readonly byAddress: Interceptor;
  /**
   * Counts a failed authentication against the caller's address (the
   * authentication step calls it): once the address is over its limit, the
   * call is refused (429) instead of answered 401, until the window ends.
   * Only failures are refused: a call with a valid API key is served from
   * an address over its limit, so one broken client behind a NAT or a proxy
   * does not lock out every other user of its address. Keys are 128 random
   * bits and more, so letting guesses be checked gives a guesser nothing.
   */
  authenticationFailed(call: Call): Promise<void>;
  /**
   * The same for a credential checked outside the pipeline (the metrics
   * token): a blocked address is refused before `valid` is asked, and a
   * wrong credential counts as a failed authentication. Says whether it
   * was valid; throws RESOURCE_EXHAUSTED once the address is over its
   * limit. The limit's headers go in `answered` either way.
   */
  checkCredential(answered: Answered, address: string, valid: () => boolean): Promise<boolean>;
  /**
   * After authentication: counts the call against its API key, by the key's
   * kind, and gives the implementation the limit of failed referral-code
   * lookups for the call's key and address (see {@link codeLookupsOf}).
   */
  readonly byKey: Interceptor;
  /**
   * Counts a share link followed (`/r/{code}`) against the client's address;
   * RESOURCE_EXHAUSTED past its limit. The limit's headers go in `answered`.
   */
  followLink(answered: Answered, address: string): Promise<void>;
}

/**
 * The MongoDB collection of the counters (rate-limiter-flexible's schema:
 * one document per limit and key, `key` unique, removed by a TTL index on
 * `expire` once its window is over).
 */
const rateLimitCollection = "rateLimits";

/** The names of the limits, as the headers and the `rpc_rate_limited_total` metric show them. */
export type LimitName = keyof RateLimitConfig;

/**
 * Builds the limits. With MongoDB the counters live in the service's
 * database, so every instance on it enforces one limit; on the embedded
 * store they live in this process, or, in a cluster's worker, in the
 * primary (rate-limiter-flexible's cluster limiter), so the workers share
 * one budget per key.
 */
export async function createRateLimits(
  config: RateLimitConfig,
  deps: {
    store: Store;
    countRateLimited(limit: LimitName): void;
    /** In a cluster's worker: the counters are the primary's. */
    sharedByWorkers?: boolean;
  },
): Promise<RateLimits> {
  const database = deps.store.engine === "mongodb" ? deps.store.database : undefined;
  const where: CounterHome = database
    ? { kind: "mongodb", database }
    : { kind: deps.sharedByWorkers ? "primary" : "memory" };
  const counterOf = (name: LimitName) => {
    const limit = config[name];
    return limit ? createCounter(name, limit, where) : undefined;
  };
  const counters = {
    public: counterOf("public"),
    secret: counterOf("secret"),
    admin: counterOf("admin"),
    unauthenticated: counterOf("unauthenticated"),
    codeLookups: counterOf("codeLookups"),
    links: counterOf("links"),
  };
  const mongoLimiter = Object.values(counters)
    .map((counter) => counter?.limiter)
    .find((limiter) => limiter instanceof RateLimiterMongo);
  // The counters share one collection; its indexes are made here, not by the
  // library in the background, so a failure stops the start.
  if (mongoLimiter) await mongoLimiter.createIndexes();

  const refuse = (call: Answered, counter: Counter, verdict: Verdict): never => {
    deps.countRateLimited(counter.name);
    const retryAfter = secondsUntil(verdict.resetMs);
    call.responseHeaders.set("retry-after", String(retryAfter));
    throw new ConnectError(`${counter.refusal}: retry in ${retryAfter} s`, Code.ResourceExhausted);
  };
  const blocked = blockedAddresses();
  const failures = counters.unauthenticated;
  // An address over its failure limit is refused before its credential is checked.
  const refuseBlocked = (call: Answered, failures: Counter, blockedMs: number): never => {
    const verdict = { allowed: false, remaining: 0, resetMs: blockedMs };
    announce(call, failures, verdict);
    return refuse(call, failures, verdict);
  };
  const countFailure = async (call: Answered, failures: Counter, address: string) => {
    const verdict = await failures.consume(addressKey(address));
    announce(call, failures, verdict);
    if (verdict.remaining === 0) blocked.add(address, verdict.resetMs);
    // Counted elsewhere first (another instance): over the limit, whatever this credential was.
    if (!verdict.allowed) refuse(call, failures, verdict);
  };
  return {
    byAddress: addressStep(counters.admin, failures, blocked, { refuse, refuseBlocked }),
    async authenticationFailed(call) {
      if (!failures) return;
      const address = call.clientAddress;
      const blockedMs = blocked.remainingMs(address);
      // Already over: refused without another round trip to the counter.
      if (blockedMs > 0) refuseBlocked(call, failures, blockedMs);
      await countFailure(call, failures, address);
    },
    async checkCredential(answered, address, valid) {
      if (!failures) return valid();
      const blockedMs = blocked.remainingMs(address);
      if (blockedMs > 0) refuseBlocked(answered, failures, blockedMs);
      if (valid()) return true;
      await countFailure(answered, failures, address);
      return false;
    },
    byKey: withCodeLookups(
      keyStep(counters.public, counters.secret, refuse),
      counters.codeLookups,
      refuse,
    ),
    async followLink(answered, address) {
      const links = counters.links;
      if (!links) return;
      const verdict = await links.consume(addressKey(address));
      announce(answered, links, verdict);
      if (!verdict.allowed) refuse(answered, links, verdict);
    },
  };
}

/**
 * Gives every call with a key the limit of its failed referral-code
 * lookups: counted per key and, apart, per client address (an address's
 * guesses with many keys, a key's guesses from many addresses), each past
 * its limit refusing that key's or address's lookups, found or not, until
 * its window ends — a refusal only of wrong codes would still tell which
 * codes exist. Each process learns of a block at its own next failure (the
 * counter is the primary's or MongoDB's, so the count is the service's).
 */
function withCodeLookups(
  step: Interceptor,
  counter: Counter | undefined,
  refuse: (call: Answered, counter: Counter, verdict: Verdict) => never,
): Interceptor {
  if (!counter) return step;
  // Counted under these names, already in their final form.
  const blocked = blockedAddresses((key) => key);
  const keysOf = (call: Call, keyId: string) => [
    `key:${keyId}`,
    `address:${addressKey(call.clientAddress)}`,
  ];
  const lookupsOf = (call: Call, keyId: string): CodeLookups => ({
    beforeLookup() {
      if (blocked.isEmpty()) return;
      const blockedMs = Math.max(...keysOf(call, keyId).map((key) => blocked.remainingMs(key)));
      if (blockedMs > 0) {
        const verdict = { allowed: false, remaining: 0, resetMs: blockedMs };
        announce(call, counter, verdict);
        refuse(call, counter, verdict);
      }
    },
    async lookupFailed() {
      // One after the other, the key's count first: a failure the key's
      // limit refuses takes nothing of the address's. Counted together,
      // concurrent failures interleaved their two counts, and a call
      // allowed by one was refused by the other's count of a call the
      // first refused: fewer than the limit were answered.
      const keys = keysOf(call, keyId);
      const verdicts: Verdict[] = [];
      for (const key of keys) {
        const verdict = await counter.consume(key);
        verdicts.push(verdict);
        if (verdict.remaining === 0) blocked.add(key, verdict.resetMs);
        if (!verdict.allowed) break;
      }
      const tightest = verdicts.reduce((a, b) => (b.remaining < a.remaining ? b : a));
      announce(call, counter, tightest);
      const refused = verdicts.find((verdict) => !verdict.allowed);
      if (refused) refuse(call, counter, refused);
    },
  });
  return (call, next) => {
    const caller = call.context.values.get(callerKey);
    if (caller) call.context.values.set(codeLookupsKey, lookupsOf(call, caller.keyId));
    return step(call, next);
  };
}

/** Where the limits' headers go: a call's response headers, or a route's. */
export type Answered = Pick<Call, "responseHeaders">;

// Async only where it waits for a counter: most calls pass through without
// a promise of this step's own.
function addressStep(
  admin: Counter | undefined,
  failures: Counter | undefined,
  blocked: BlockedAddresses,
  refusals: {
    refuse: (call: Answered, counter: Counter, verdict: Verdict) => never;
    refuseBlocked: (call: Answered, failures: Counter, blockedMs: number) => never;
  },
): Interceptor {
  if (!admin && !failures) return (call, next) => next(call);
  // Async, so the refusal is a rejected promise like any step's.
  const refuseBlocked = async (call: Call, failures: Counter, blockedMs: number) =>
    refusals.refuseBlocked(call, failures, blockedMs);
  const countAdmin = async (call: Call, next: Next, counter: Counter) => {
    const verdict = await counter.consume(addressKey(call.clientAddress));
    announce(call, counter, verdict);
    if (!verdict.allowed) refusals.refuse(call, counter, verdict);
    return next(call);
  };
  return (call, next) => {
    if (methodAccess(call.rpc.method) !== Access.ADMIN) return next(call);
    if (failures && !blocked.isEmpty()) {
      // Only now: finding a caller's address is a header lookup and a parse.
      const blockedMs = blocked.remainingMs(call.clientAddress);
      if (blockedMs > 0) return refuseBlocked(call, failures, blockedMs);
    }
    return admin ? countAdmin(call, next, admin) : next(call);
  };
}

function keyStep(
  publicKeys: Counter | undefined,
  secretKeys: Counter | undefined,
  refuse: (call: Answered, counter: Counter, verdict: Verdict) => never,
): Interceptor {
  if (!publicKeys && !secretKeys) return (call, next) => next(call);
  return async (call, next) => {
    const caller = call.context.values.get(callerKey);
    // Admin calls have no key: they are limited by address.
    const counter = caller && (caller.keyKind === "secret" ? secretKeys : publicKeys);
    if (!counter) return next(call);
    let verdict: Verdict;
    if (counter.leased) {
      // A worker's slice of the budget: most calls take from it without a promise.
      const taken = counter.leased(caller.keyId);
      verdict = taken instanceof Promise ? await taken : taken;
    } else {
      // The limiter's own promise awaited here, not `counter.consume`'s: every
      // call passes this step, and a promise fewer before the response counts.
      try {
        verdict = allowedVerdict(await counter.limiter.consume(caller.keyId));
      } catch (error) {
        verdict = refusedVerdict(error);
      }
    }
    announce(call, counter, verdict);
    if (!verdict.allowed) refuse(call, counter, verdict);
    return await next(call);
  };
}

/** What a counter said of one call. */
interface Verdict {
  readonly allowed: boolean;
  /** Calls left in the window. */
  readonly remaining: number;
  /** Milliseconds until the window ends. */
  readonly resetMs: number;
}

/** One limit, its counter and how the headers and the error name it. */
interface Counter {
  readonly name: LimitName;
  readonly limiter: RateLimiterAbstract;
  /** The `RateLimit-Policy` item: `"public";q=200;w=1`. */
  readonly policy: string;
  /** The error message, before "retry in". */
  readonly refusal: string;
  consume(key: string): Promise<Verdict>;
  /** In a cluster's worker: `consume` from the worker's slice of the budget (see {@link leasedBudget}). */
  readonly leased?: (key: string) => Verdict | Promise<Verdict>;
}

const refusals: Record<LimitName, string> = {
  public: "this public key is over its rate limit",
  secret: "this secret key is over its rate limit",
  admin: "too many admin calls from this address",
  unauthenticated: "too many failed authentications from this address",
  codeLookups: "too many unknown referral codes from this key or address",
  links: "too many share links followed from this address",
};

/** Where a limit's counters live. */
type CounterHome =
  | { kind: "mongodb"; database: MongoStore["database"] }
  | { kind: "primary" }
  | { kind: "memory" };

function createCounter(name: LimitName, limit: RateLimit, where: CounterHome): Counter {
  const options = { keyPrefix: name, points: limit.calls, duration: limit.windowSeconds };
  const limiter =
    where.kind === "mongodb"
      ? new RateLimiterMongo({
          ...options,
          storeClient: where.database,
          tableName: rateLimitCollection,
          disableIndexesCreation: true,
          // A key that has used its window up is refused from memory, without
          // a round trip, until the window ends.
          inMemoryBlockOnConsumed: limit.calls,
          // While MongoDB is unreachable each instance counts on its own.
          insuranceLimiter: new RateLimiterMemory(options),
        })
      : where.kind === "primary"
        ? new RateLimiterCluster({ ...options, timeoutMs: 5_000 })
        : new RateLimiterMemory(options);
  const consume = (key: string) => limiter.consume(key).then(allowedVerdict, refusedVerdict);
  // Only the keys' limits are leased: every call counts against them. The
  // addresses' limits count rare calls (admin calls, failures), exactly: a
  // failure that uses the last call of its window blocks its address. A
  // small limit's slices would be single calls.
  const leased =
    where.kind === "primary" && leasedLimits.has(name) && limit.calls >= leaseSlices
      ? leasedBudget(limiter, limit)
      : undefined;
  return {
    name,
    limiter,
    policy: `"${name}";q=${limit.calls};w=${limit.windowSeconds}`,
    refusal: `${refusals[name]} (${limit.calls} calls per ${limit.windowSeconds} s)`,
    ...(leased ? { leased, consume: async (key: string) => leased(key) } : { consume }),
  };
}

/** A worker takes a hundredth of a limit's calls at a time. */
const leaseSlices = 100;
const leasedLimits: ReadonlySet<LimitName> = new Set(["public", "secret"]);
// Beyond this many keys leased, the expired leases are swept out.
const leaseSweepSize = 10_000;

/** A worker's slice of one key's budget for the current window. */
interface Lease {
  /** Calls this worker may still let through without asking. */
  left: number;
  /** What the primary had left for the key when it handed the slice out. */
  remaining: number;
  resetAt: number;
  /** The primary refused: every call is refused until `resetAt`. */
  refused: boolean;
}

/**
 * One limit counted in the primary (one budget per key for every worker),
 * asked for a slice of calls at a time: a round trip to the primary per
 * slice, not per call, which would cost every call more than the call
 * itself. A call waiting for a slice is served from it, or, when the calls
 * that waited with it took the slice up, asks again: a worker refuses a
 * call only once the primary refused it, that is once the whole service
 * has counted the key's limit. Near the end of a window up to a slice less
 * one per worker may go unused (at 1,000 calls a second, 9 per worker).
 */
function leasedBudget(
  limiter: RateLimiterAbstract,
  limit: RateLimit,
): (key: string) => Verdict | Promise<Verdict> {
  const slice = Math.floor(limit.calls / leaseSlices);
  const leases = new Map<string, Lease>();
  const asking = new Map<string, Promise<void>>();
  // Per key, the calls waiting for a slice: the next request asks for them all.
  const waiting = new Map<string, number>();

  const usable = (lease: Lease | undefined, now: number): lease is Lease =>
    lease !== undefined && lease.resetAt > now && (lease.left > 0 || lease.refused);
  const fromLease = (lease: Lease, now: number): Verdict => {
    if (lease.left <= 0) return { allowed: false, remaining: 0, resetMs: lease.resetAt - now };
    lease.left -= 1;
    return { allowed: true, remaining: lease.remaining + lease.left, resetMs: lease.resetAt - now };
  };
  const ask = (key: string): Promise<void> => {
    let pending = asking.get(key);
    if (pending) return pending;
    const now = Date.now();
    const current = leases.get(key);
    const known = current && current.resetAt > now ? current.remaining : limit.calls;
    // The primary refuses a request larger than what it has left, and counts
    // it all the same: never more than it last said it had.
    const points = Math.max(1, Math.min(Math.max(slice, waiting.get(key) ?? 0), known));
    if (leases.size >= leaseSweepSize) {
      for (const [leased, lease] of leases) if (lease.resetAt <= now) leases.delete(leased);
    }
    pending = limiter
      .consume(key, points)
      .then(
        (result) => {
          const resetAt = Date.now() + result.msBeforeNext;
          leases.set(key, {
            left: points,
            remaining: result.remainingPoints,
            resetAt,
            refused: false,
          });
        },
        (error: unknown) => {
          if (!(error instanceof RateLimiterRes)) throw error;
          const resetAt = Date.now() + error.msBeforeNext;
          leases.set(key, { left: 0, remaining: 0, resetAt, refused: true });
        },
      )
      .finally(() => asking.delete(key));
    asking.set(key, pending);
    return pending;
  };
  const takeOnceGranted = async (key: string): Promise<Verdict> => {
    waiting.set(key, (waiting.get(key) ?? 0) + 1);
    try {
      for (;;) {
        await ask(key);
        const lease = leases.get(key);
        const now = Date.now();
        if (usable(lease, now)) return fromLease(lease, now);
        // The calls that waited with this one took the slice up: ask for the shortfall.
      }
    } finally {
      const left = (waiting.get(key) ?? 1) - 1;
      if (left > 0) waiting.set(key, left);
      else waiting.delete(key);
    }
  };
  return (key) => {
    const now = Date.now();
    const lease = leases.get(key);
    return usable(lease, now) ? fromLease(lease, now) : takeOnceGranted(key);
  };
}

function allowedVerdict(result: RateLimiterRes): Verdict {
  return { allowed: true, remaining: result.remainingPoints, resetMs: result.msBeforeNext };
}

/** The library rejects with its result when over the limit, with an Error when the store fails. */
function refusedVerdict(error: unknown): Verdict {
  if (!(error instanceof RateLimiterRes)) throw error;
  return { allowed: false, remaining: 0, resetMs: error.msBeforeNext };
}

/**
 * Adds the limit's state to the IETF headers
 * (draft-ietf-httpapi-ratelimit-headers): `RateLimit-Policy` for the quota
 * and window, `RateLimit` for the calls left and the seconds until the
 * window ends. A call that two limits count lists both.
 */
function announce(call: Answered, counter: Counter, verdict: Verdict): void {
  appendHeader(call, "ratelimit-policy", counter.policy);
  appendHeader(
    call,
    "ratelimit",
    `"${counter.name}";r=${verdict.remaining};t=${secondsUntil(verdict.resetMs)}`,
  );
}

function appendHeader(call: Answered, name: string, item: string): void {
  const existing = call.responseHeaders.get(name);
  call.responseHeaders.set(name, existing === undefined ? item : `${existing}, ${item}`);
}

/** Whole seconds, rounded up: a client waiting this long finds the window over. */
function secondsUntil(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000));
}

/**
 * The key an address is counted under. An IPv6 client usually holds a whole
 * /64, so it is counted by that prefix; an IPv4-mapped IPv6 address is its
 * IPv4 address.
 */
export function addressKey(address: string): string {
  if (!address.includes(":") || !ipaddr.isValid(address)) return address;
  const parsed = ipaddr.process(address);
  if (parsed.kind() === "ipv4") return parsed.toString();
  const prefix = (parsed as ipaddr.IPv6).parts.slice(0, 4);
  return `${prefix.map((part) => part.toString(16)).join(":")}::/64`;
}

/** Addresses over the failed-authentication limit, checked on every call before authentication. */
interface BlockedAddresses {
  isEmpty(): boolean;
  remainingMs(address: string): number;
  add(address: string, ms: number): void;
}

// Beyond this many blocked addresses, the expired ones are swept out.
const blockedSweepSize = 10_000;

/**
 * The addresses this process saw use their failure limit up, until when.
 * Every call reads it, so it is a Map in memory: empty (one size check,
 * before the caller's address is even read) unless an address is blocked,
 * and no store round trip. On several
 * instances each learns of a block from the shared counter at its own next
 * failure from that address.
 */
function blockedAddresses(keyOf: (address: string) => string = addressKey): BlockedAddresses {
  const until = new Map<string, number>();
  return {
    isEmpty: () => until.size === 0,
    remainingMs(address) {
      const key = keyOf(address);
      const end = until.get(key);
      if (end === undefined) return 0;
      const remaining = end - Date.now();
      if (remaining <= 0) until.delete(key);
      return Math.max(0, remaining);
    },
    add(address, ms) {
      if (until.size >= blockedSweepSize) {
        const now = Date.now();
        for (const [key, end] of until) if (end <= now) until.delete(key);
      }
      until.set(keyOf(address), Date.now() + ms);
    },
  };
}
