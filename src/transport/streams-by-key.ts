import { Code, ConnectError } from "@connectrpc/connect";
import type { Ticker } from "../domain/tenancy.js";
import { callerKey } from "../services/context.js";
import type { ErrorLogger } from "./errors.js";
import type { Call, Interceptor, Next, ResponseStream } from "./pipeline.js";

/**
 * The server streams (watches, exports) each API key holds open: at most
 * STREAMS_PER_KEY at once, and ended with UNAUTHENTICATED once their key
 * is revoked.
 */
export interface StreamsByKey {
  /**
   * The pipeline's step, once the request is decoded: takes a slot for a
   * key's stream before it opens (RESOURCE_EXHAUSTED when the key holds the
   * limit), and gives it back however the stream ends.
   */
  readonly step: Interceptor;
  /**
   * A key was revoked (through this process or another): every key with a
   * stream open here is looked up again now, and the streams of a revoked
   * one end.
   */
  keyRevoked(): void;
}

/**
 * Where a key's open streams are counted: in this process, or in a
 * cluster's primary for every worker (see `PrimaryLink.takeStreamSlot`).
 */
export interface StreamSlots {
  /** Takes a slot for a stream of `keyId`; false when the key holds the limit already. */
  take(keyId: string): boolean | Promise<boolean>;
  /** Gives a slot back: the stream ended. */
  free(keyId: string): void;
}

/**
 * The streams per key. Each key with a stream open is looked up again at
 * each tick of `ticker` (STREAM_POLL_INTERVAL) as well as when a
 * revocation is heard: a key revoked through another instance on the same
 * MongoDB is told to nobody here.
 */
export function streamsByKey(deps: {
  /** STREAMS_PER_KEY, as the refusal names it. */
  limit: number;
  slots: StreamSlots;
  /** Whether a key is revoked now, past any cache (`Authenticator.isRevoked`). */
  isRevoked(keyId: string): Promise<boolean>;
  ticker: Ticker;
  /** A cluster worker's store: a look-up sees the commit of a revocation it heard of. */
  seeNewCommits?: () => void;
  log: ErrorLogger;
}): StreamsByKey {
  const open = new Map<string, Set<ResponseStream>>();
  let cancelTick: (() => void) | undefined;
  let checking = false;
  let checkAgain = false;
  // Revocations heard so far: a stream that opened meanwhile is checked once it is held.
  let revocationsHeard = 0;

  const endRevoked = async (): Promise<void> => {
    deps.seeNewCommits?.();
    const keyIds = [...open.keys()];
    const revoked = await Promise.all(
      keyIds.map((keyId) =>
        deps.isRevoked(keyId).catch((error: unknown) => {
          // The store out of reach: the streams go on until a look-up answers.
          deps.log(error, "looking up the keys of open streams");
          return false;
        }),
      ),
    );
    for (const [index, keyId] of keyIds.entries()) {
      if (!revoked[index]) continue;
      for (const stream of [...(open.get(keyId) ?? [])]) stream.end(revokedKeyError());
    }
  };
  // One look-up at a time; what is asked meanwhile runs once after it.
  const checkKeys = (): void => {
    if (checking) {
      checkAgain = true;
      return;
    }
    checking = true;
    void (async () => {
      try {
        do {
          checkAgain = false;
          await endRevoked();
        } while (checkAgain);
      } finally {
        checking = false;
      }
    })();
  };
  const onTick = (): void => {
    cancelTick = undefined;
    if (open.size === 0) return;
    checkKeys();
    cancelTick = deps.ticker.onNextTick(onTick);
  };

  const hold = (keyId: string, stream: ResponseStream): void => {
    let streams = open.get(keyId);
    if (!streams) {
      streams = new Set();
      open.set(keyId, streams);
    }
    streams.add(stream);
    cancelTick ??= deps.ticker.onNextTick(onTick);
  };
  const release = (keyId: string, stream: ResponseStream): void => {
    const streams = open.get(keyId);
    streams?.delete(stream);
    if (streams?.size === 0) open.delete(keyId);
    if (open.size === 0) {
      cancelTick?.();
      cancelTick = undefined;
    }
  };

  const openKeyStream = async (call: Call, next: Next, keyId: string) => {
    const taken = deps.slots.take(keyId);
    if (!(taken instanceof Promise ? await taken : taken)) throw tooManyStreamsError(deps.limit);
    const heardBefore = revocationsHeard;
    let response: Awaited<ReturnType<Next>>;
    try {
      response = await next(call);
    } catch (error) {
      deps.slots.free(keyId);
      throw error;
    }
    const stream = call.responseStream;
    if (!stream) {
      deps.slots.free(keyId);
      return response;
    }
    hold(keyId, stream);
    stream.whenEnded(() => {
      release(keyId, stream);
      deps.slots.free(keyId);
    });
    if (revocationsHeard !== heardBefore) checkKeys();
    return response;
  };

  return {
    step: (call, next) => {
      if (call.rpc.method.methodKind !== "server_streaming") return next(call);
      // Admin calls carry no key; every stream is a tenant's.
      const caller = call.context.values.get(callerKey);
      return caller ? openKeyStream(call, next, caller.keyId) : next(call);
    },
    keyRevoked() {
      revocationsHeard++;
      if (open.size > 0) checkKeys();
    },
  };
}

/**
 * Open streams counted per key and per holder (a cluster's worker; 0 for
 * a process alone), so the streams of a worker that dies are given back
 * with it.
 */
export class StreamCounts {
  private readonly byKey = new Map<string, number>();
  private readonly byHolder = new Map<number, Map<string, number>>();

  constructor(private readonly limit: number) {}

  /** Takes a slot for `holder`'s stream of `keyId`; false when the key holds the limit. */
  take(holder: number, keyId: string): boolean {
    const count = this.byKey.get(keyId) ?? 0;
    if (count >= this.limit) return false;
    this.byKey.set(keyId, count + 1);
    let held = this.byHolder.get(holder);
    if (!held) {
      held = new Map();
      this.byHolder.set(holder, held);
    }
    held.set(keyId, (held.get(keyId) ?? 0) + 1);
    return true;
  }

  /** Gives back a slot `holder` took for `keyId`. */
  free(holder: number, keyId: string): void {
    const held = this.byHolder.get(holder);
    const count = held?.get(keyId);
    if (!held || count === undefined) return;
    if (count > 1) held.set(keyId, count - 1);
    else held.delete(keyId);
    if (held.size === 0) this.byHolder.delete(holder);
    this.giveBack(keyId, 1);
  }

  /** Gives back every slot `holder` took: its process is gone. */
  dropHolder(holder: number): void {
    const held = this.byHolder.get(holder);
    if (!held) return;
    this.byHolder.delete(holder);
    for (const [keyId, count] of held) this.giveBack(keyId, count);
  }

  private giveBack(keyId: string, count: number): void {
    const left = (this.byKey.get(keyId) ?? 0) - count;
    if (left > 0) this.byKey.set(keyId, left);
    else this.byKey.delete(keyId);
  }
}

/** The slots of a process alone. */
export function localStreamSlots(limit: number): StreamSlots {
  const counts = new StreamCounts(limit);
  return {
    take: (keyId) => counts.take(0, keyId),
    free: (keyId) => counts.free(0, keyId),
  };
}

/** A stream over STREAMS_PER_KEY: RESOURCE_EXHAUSTED (REST 429), naming the limit. */
export function tooManyStreamsError(limit: number): ConnectError {
  return new ConnectError(
    `this API key has ${limit} streams open, the most STREAMS_PER_KEY allows: end one before opening another`,
    Code.ResourceExhausted,
  );
}

/** How the streams of a revoked key end, on every protocol. */
export function revokedKeyError(): ConnectError {
  return new ConnectError("the API key was revoked", Code.Unauthenticated);
}
