import { startingError } from "./errors.js";

/**
 * Whether the service is ready to serve: its port may be bound before what
 * it serves exists (the demo keys a first start provisions; in a cluster's
 * worker, the writer's word that they are committed). Until then `/readyz`
 * and gRPC health say so, and calls wait for it.
 */
export interface Readiness {
  isReady(): boolean;
  /** Resolves once ready; rejects with `startingError` after `waitMs`. */
  whenReady(): Promise<void>;
  markReady(): void;
}

/**
 * How long a call that arrives before the service is ready waits for it: a
 * start takes a few hundred milliseconds from the bind to ready, and a call
 * that waits is served, where one refused would have to be sent again.
 */
const readyWaitMs = 10_000;

export function createReadiness(waitMs = readyWaitMs): Readiness {
  let ready = false;
  let markReady: () => void = () => {};
  const readyNow = new Promise<void>((resolve) => {
    markReady = resolve;
  });
  return {
    isReady: () => ready,
    whenReady() {
      if (ready) return Promise.resolve();
      return new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(startingError()), waitMs);
        void readyNow.then(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    },
    markReady() {
      ready = true;
      markReady();
    },
  };
}
