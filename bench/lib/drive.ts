import { countFailure, LatencyRecorder, type LoadResult, loadResult } from "./measure.js";

/** Sends request number `i`; resolves true when it succeeded, else what went wrong. Never rejects. */
export type Send = (i: number) => Promise<true | string>;

/** How to drive a sender. */
export interface DriveOptions {
  readonly seconds: number;
  /** Closed loop: this many requests in flight, each sent when the previous one answered. */
  readonly concurrency?: number;
  /** Open loop: requests per second on a fixed schedule, whatever the answers. */
  readonly rate?: number;
  /** How many distinct requests exist (seeded referees); the run ends when they are used up. */
  readonly limit?: number;
}

// An open-loop run that falls this far behind is overloaded; stop adding to it.
const maxInFlight = 20_000;

/**
 * Drives `send` for `seconds`. The open loop measures each latency from the
 * moment the request was due, not from when it left, so a server that
 * stalls is charged for the requests it delayed (no coordinated omission).
 */
export async function drive(send: Send, options: DriveOptions): Promise<LoadResult> {
  const latency = new LatencyRecorder();
  let ok = 0;
  const failures: Record<string, number> = {};
  let next = 0;
  const limit = options.limit ?? Number.POSITIVE_INFINITY;
  const started = performance.now();
  const deadline = started + options.seconds * 1000;
  const one = async (i: number, dueAt: number) => {
    const outcome = await send(i);
    if (outcome === true) {
      ok++;
      latency.recordMs(performance.now() - dueAt);
    } else countFailure(failures, outcome);
  };

  if (options.rate === undefined) {
    const worker = async () => {
      while (performance.now() < deadline && next < limit) await one(next++, performance.now());
    };
    await Promise.all(Array.from({ length: options.concurrency ?? 1 }, worker));
  } else {
    const interval = 1000 / options.rate;
    const inFlight = new Set<Promise<void>>();
    await new Promise<void>((resolve) => {
      // Timers fire about every millisecond; each tick sends what fell due.
      const timer = setInterval(() => {
        const now = performance.now();
        const end = Math.min(now, deadline);
        while (next < limit && started + next * interval <= end && inFlight.size < maxInFlight) {
          const request = one(next, started + next * interval).finally(() =>
            inFlight.delete(request),
          );
          inFlight.add(request);
          next++;
        }
        if (now >= deadline || next >= limit) {
          clearInterval(timer);
          resolve();
        }
      }, 1);
    });
    await Promise.all(inFlight);
  }
  return loadResult(
    {
      ok,
      failures,
      seconds: (performance.now() - started) / 1000,
      exhausted: next >= limit,
      ...(options.rate !== undefined ? { targetRate: options.rate } : {}),
    },
    latency,
  );
}
