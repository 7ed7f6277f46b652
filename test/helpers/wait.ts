import { setTimeout as sleep } from "node:timers/promises";

/** How long and how often `eventually` looks. */
export interface EventuallyOptions {
  /** When to give up and reject; 10 s unless set. */
  readonly timeoutMs?: number;
  /** The pause between two looks; 20 ms unless set. */
  readonly intervalMs?: number;
}

/**
 * Resolves with the first value `probe` returns that is neither `undefined`
 * nor `false`, looking again every `intervalMs`; rejects after `timeoutMs`,
 * naming `what`. For waiting on something the service does in the
 * background (a delivery recorded, a sweep done) instead of sleeping for a
 * guessed time: a slow machine makes it wait longer, not fail.
 */
export async function eventually<T>(
  what: string,
  probe: () => T | undefined | false | Promise<T | undefined | false>,
  options: EventuallyOptions = {},
): Promise<T> {
  const { timeoutMs = 10_000, intervalMs = 20 } = options;
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined && value !== false) return value;
    if (performance.now() > deadline) throw new Error(`waited ${timeoutMs} ms for ${what}`);
    await sleep(intervalMs);
  }
}

/**
 * Resolves once the clock has moved past `iso` (a time the service
 * stamped), so that the next write's time differs from it: on a fast machine
 * two writes can fall in the same millisecond.
 */
export function clockPasses(iso: string): Promise<true> {
  const after = Date.parse(iso);
  if (Number.isNaN(after)) throw new Error(`not a time: ${iso}`);
  return eventually(`the clock to pass ${iso}`, () => Date.now() > after || undefined, {
    intervalMs: 1,
  });
}

/**
 * Settles with `promise`, or rejects after `ms` naming `what`: something
 * that should happen and never does fails its test, not the whole run.
 */
export function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}
