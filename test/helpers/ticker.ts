import type { Ticker } from "../../src/domain/tenancy.js";

/** A {@link Ticker} the test drives: nothing ticks until it says so. */
export interface ManualTicker extends Ticker {
  /** How many waits the next tick ends (watches between two looks, the streams' key check). */
  readonly waiting: number;
  /** How many waits have begun so far: each look of a watch ends in one. */
  readonly begun: number;
  /** Ticks once: every wait begun before it ends now. */
  tick(): void;
}

/** A ticker that ticks only when told, so a test sees what one poll does without waiting for it. */
export function manualTicker(): ManualTicker {
  const listeners = new Set<() => void>();
  let begun = 0;
  return {
    get waiting() {
      return listeners.size;
    },
    get begun() {
      return begun;
    },
    onNextTick(listener) {
      begun++;
      // Each wait its own entry: one listener may wait twice.
      const wait = () => listener();
      listeners.add(wait);
      return () => listeners.delete(wait);
    },
    tick() {
      const due = [...listeners];
      listeners.clear();
      for (const listener of due) listener();
    },
  };
}
