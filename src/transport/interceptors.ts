import { Code, ConnectError } from "@connectrpc/connect";
import { rejectUnknownFields } from "../contract/unknown-fields.js";
import { type Authenticator, KeyKindRefused, UserHashRefused } from "../services/authentication.js";
import { type Caller, callClientKey, callerKey } from "../services/context.js";
import {
  type ErrorLogger,
  storeUnavailableError,
  toConnectError,
  writeQueueFullError,
} from "./errors.js";
import { isWriteRpc } from "./idempotency.js";
import type { Interceptor } from "./pipeline.js";
import type { RateLimits } from "./rate-limit.js";
import type { Readiness } from "./readiness.js";

/** A step of every call, by name: tests and the bench find a step by it (see `buildApp`'s `steps`). */
export interface NamedStep {
  readonly name: string;
  readonly run: Interceptor;
}

/**
 * The steps that operate the service rather than answer the call: the
 * request log and id, the metrics, the rate limits, idempotency keys. The
 * bench leaves them out to measure what they cost; the service always runs
 * them. (A refused credential is still counted, by `authenticate` itself:
 * the bench's calls are never refused.)
 */
export const operationsSteps: ReadonlySet<string> = new Set([
  "observe-calls",
  "rate-limit-by-address",
  "rate-limit-by-key",
  "idempotency",
]);

/** The standard steps without {@link operationsSteps} (the bench's variant, and tests of it). */
export function withoutOperations(standard: readonly NamedStep[]): NamedStep[] {
  return standard.filter((step) => !operationsSteps.has(step.name));
}

/**
 * Every step a call takes before its implementation, in order, for every
 * protocol. A cross-cutting concern is one more entry here. The log and the
 * metrics sit outside the error step, so they see every outcome as the
 * caller will (a ConnectError), and the headers they add reach the caller
 * on success and failure alike.
 */
export function interceptors(deps: {
  authenticator: Authenticator;
  log: ErrorLogger;
  /** The request log and the call metrics (`observeCalls`). */
  observeCalls: Interceptor;
  rateLimits: RateLimits;
  /** The streams each key holds open (see `streamsByKey`): capped, and ended when the key is revoked. */
  streamsByKey: Interceptor;
  /**
   * Idempotency keys (see `idempotency.ts`): last, as it needs the caller
   * and the request. Unary calls only: a stream's first message is not its
   * outcome, and a stream is a read.
   */
  idempotency: Interceptor;
  /** Calls wait until the service is ready (see `Readiness`). */
  readiness?: Readiness;
  /** Why the store refuses writes now, if it does (see `StoreHealth`). */
  writesRefused?: () => string | undefined;
  /** WRITE_QUEUE_LIMIT while that many writes wait for the store; undefined below it. */
  writeQueueFull?: () => number | undefined;
  /** A cluster worker's store: each call sees the commits before it (`EmbeddedReader.seeNewCommits`). */
  seeNewCommits?: () => void;
}): NamedStep[] {
  const steps: [string, Interceptor | false][] = [
    ["observe-calls", deps.observeCalls],
    ["normalise-errors", normaliseErrors(deps.log)],
    ["wait-until-ready", deps.readiness !== undefined && waitUntilReady(deps.readiness)],
    ["see-new-commits", deps.seeNewCommits !== undefined && seeCommitsBefore(deps.seeNewCommits)],
    // Around authentication: an address is throttled before its credential
    // is checked, a key once it is known.
    ["rate-limit-by-address", deps.rateLimits.byAddress],
    ["authenticate", authenticate(deps.authenticator, deps.rateLimits)],
    ["rate-limit-by-key", deps.rateLimits.byKey],
    [
      "refuse-writes",
      deps.writesRefused !== undefined &&
        refuseWritesWhileStoreRefuses(deps.writesRefused, deps.writeQueueFull ?? (() => undefined)),
    ],
    ["decode-request", decodeRequest],
    // After decoding: a malformed request is told so, and takes no slot.
    ["streams-by-key", deps.streamsByKey],
    ["idempotency", unaryOnly(deps.idempotency)],
  ];
  return steps.flatMap(([name, run]) => (run === false ? [] : [{ name, run }]));
}

/**
 * A call that arrives before the service is ready waits for it, before its
 * credential is checked or counted: the key it names may not be committed
 * yet, and a 401 would tell a valid caller its key is wrong. Past the wait
 * it is refused as the service starting (`unavailable`), changing nothing.
 */
function waitUntilReady(readiness: Readiness): Interceptor {
  return (call, next) =>
    readiness.isReady() ? next(call) : readiness.whenReady().then(() => next(call));
}

/**
 * A worker's reads see every write acknowledged before the call arrived:
 * before authentication, so a key revoked through another worker is refused.
 */
function seeCommitsBefore(seeNewCommits: () => void): Interceptor {
  return (call, next) => {
    seeNewCommits();
    return next(call);
  };
}

/**
 * Whatever goes wrong leaves as a ConnectError (see `toConnectError`): on a
 * stream, after its first message too.
 */
function normaliseErrors(log: ErrorLogger): Interceptor {
  return async (call, next) => {
    try {
      const response = await next(call);
      call.responseStream?.normaliseErrorsWith((error) =>
        toConnectError(error, call.rpc.name, log),
      );
      return response;
    } catch (error) {
      // A stream opened under a call that failed after all is never written: it stops now.
      call.responseStream?.end();
      const connectError = toConnectError(error, call.rpc.name, log);
      for (const [name, value] of call.responseHeaders) connectError.metadata.set(name, value);
      throw connectError;
    }
  };
}

/**
 * Checks the credential against the RPC's `(referral.v1.access)` before the
 * request is decoded, and gives the implementation its caller. A credential
 * refused (`unauthenticated`) is told to the rate limit by address, which
 * may refuse the call instead (429 past the limit of failed authentications);
 * so is a `userHash` the service refuses ({@link UserHashRefused}).
 */
function authenticate(authenticator: Authenticator, rateLimits: RateLimits): Interceptor {
  return async (call, next) => {
    let caller: Caller | undefined;
    try {
      caller = await authenticator.authenticate(call.rpc.method, call.header("authorization"));
    } catch (error) {
      if (error instanceof KeyKindRefused) call.context.values.set(callerKey, error.caller);
      if (error instanceof ConnectError && error.code === Code.Unauthenticated) {
        await rateLimits.authenticationFailed(call);
      }
      throw error;
    }
    if (caller) {
      call.context.values.set(callerKey, caller);
      // Read only by the calls that keep fraud evidence: the getters parse nothing until then.
      call.context.values.set(callClientKey, {
        get address() {
          return call.clientAddress;
        },
        get userAgent() {
          return call.header("user-agent") ?? null;
        },
      });
    }
    try {
      return await next(call);
    } catch (error) {
      // A userHash refused by the service is a failed authentication too.
      if (error instanceof UserHashRefused) await rateLimits.authenticationFailed(call);
      throw error;
    }
  };
}

/** Runs `step` on unary calls; streams go straight on. */
function unaryOnly(step: Interceptor): Interceptor {
  return (call, next) => (call.rpc.method.methodKind === "unary" ? step(call, next) : next(call));
}

/**
 * Refuses a write (any RPC whose REST verb is not GET) while the store
 * cannot take writes, or while WRITE_QUEUE_LIMIT writes wait for it, before
 * its request is decoded; reads go on. A call is refused whole, before it
 * wrote anything: one admitted runs all its writes.
 */
function refuseWritesWhileStoreRefuses(
  writesRefused: () => string | undefined,
  writeQueueFull: () => number | undefined,
): Interceptor {
  return (call, next) => {
    if (!isWriteRpc(call.rpc.method)) return next(call);
    const reason = writesRefused();
    if (reason !== undefined) return Promise.reject(storeUnavailableError(reason));
    const queueFull = writeQueueFull();
    if (queueFull !== undefined) return Promise.reject(writeQueueFullError(queueFull));
    return next(call);
  };
}

/** Decodes the request where the transport left it encoded; unknown fields are refused. */
const decodeRequest: Interceptor = (call, next) => {
  const request = call.request ?? call.decode?.();
  if (!request) throw new Error(`${call.rpc.name}: the transport gave no request`);
  rejectUnknownFields(call.rpc.method.input, request);
  call.request = request;
  return next(call);
};
