import { setTimeout as delay } from "node:timers/promises";
import type { WebhookConfig } from "../config.js";
import type { Clock } from "../domain/tenancy.js";
import { nextDueAt, releaseLeasesOfEarlierRuns } from "../store/deliveries.js";
import type { SecretBox } from "../store/secret-box.js";
import type { Store } from "../store/store.js";
import { createDispatcher } from "./dispatcher.js";
import { createOutboxRelay } from "./relay.js";
import { sendWebhook, type WebhookSender } from "./sender.js";

/** The background side of webhooks: the outbox relay and the delivery workers. */
export interface WebhookRuntime {
  /** Says events were written: the relay runs now instead of at its next poll. */
  notify(): void;
  /**
   * Stops relaying and claiming deliveries. Attempts in flight may finish
   * for `graceMs`; then they are aborted and their leases released, so they
   * are retried at once (by another instance, or on the next start).
   */
  stop(graceMs?: number): Promise<void>;
  /** Deliveries handed to the workers and not attempted yet (a metric). */
  inHand(): number;
}

// Both loops also poll, for work written by other instances sharing the
// database (and as a safety net); a notify makes local work immediate.
const pollMs = 1000;

/**
 * The least time from one relay pass to the next while writes keep waking
 * it. A pass reads each outbox that moved and costs about as much for one
 * event as for several; at a moderate rate a pass ran for nearly every
 * event. Deliveries leave a few milliseconds later instead.
 */
const relayGatherMs = 5;

/** Starts the relay and `config.concurrency` delivery workers. */
export function startWebhookRuntime(deps: {
  store: Store;
  clock: Clock;
  config: WebhookConfig;
  secretBox: SecretBox;
  send?: WebhookSender;
  log: (error: unknown, message: string) => void;
  countDelivery?: (outcome: "succeeded" | "failed" | "skipped") => void;
}): WebhookRuntime {
  const { store, clock, log } = deps;
  const db = store.system;
  const relayWake = createWakeup();
  const workerWake = createWakeup();
  // Whether the store may hold due deliveries: a count that moves when
  // the relay queued some for any worker, a catch-up brought some forward,
  // or the next check fell due (a poll, or the next retry). A worker claims
  // from the store only when it moved since the worker last found nothing
  // there; after a delivery handed over in memory, a claim (a write) and
  // a look for the next due time cost more than the delivery's own record.
  let storeChecks = 0;
  const storeMayHaveWork = () => {
    storeChecks += 1;
    workerWake.wakeAll();
  };
  let nextCheck: { readonly at: number; readonly timer: NodeJS.Timeout } | undefined;
  /** Makes the next store check come within `ms`, unless one comes sooner. */
  const checkStoreWithin = (ms: number) => {
    const at = Date.now() + ms;
    if (nextCheck && nextCheck.at <= at) return;
    if (nextCheck) clearTimeout(nextCheck.timer);
    nextCheck = {
      at,
      timer: setTimeout(() => {
        nextCheck = undefined;
        storeMayHaveWork();
      }, ms),
    };
  };
  const dispatcher = createDispatcher({
    ...deps,
    send: deps.send ?? sendWebhook,
    wakeWorkers: storeMayHaveWork,
    wakeWorker: () => workerWake.wakeOne(),
    dueAgainAt: (at) => checkStoreWithin(Math.max(10, at.getTime() - clock().getTime())),
  });
  // Set by every wake-up of the relay, cleared as a pass starts: one that
  // came during a pass (when the relay sleeps not) makes another pass.
  let relayWoken = false;
  const wakeRelay = () => {
    relayWoken = true;
    relayWake.wakeAll();
  };
  const relay = createOutboxRelay({
    store,
    clock,
    workers: dispatcher,
    wake: wakeRelay,
    log,
  });
  let stopped = false;

  // The embedded store has one dispatcher, this one: a lease held as it
  // starts was left by a process killed before it released it. Released
  // before any loop takes one of its own.
  const leasesReleased =
    store.engine === "embedded"
      ? releaseLeasesOfEarlierRuns(db, clock()).then(
          () => undefined,
          (error: unknown) => log(error, "could not release the leases of an earlier run"),
        )
      : Promise.resolve();

  async function relayLoop(): Promise<void> {
    await leasesReleased;
    let passStartedAt = Number.NEGATIVE_INFINITY;
    while (!stopped) {
      const sincePass = performance.now() - passStartedAt;
      if (sincePass < relayGatherMs) await delay(relayGatherMs - sincePass);
      if (stopped) return;
      passStartedAt = performance.now();
      relayWoken = false;
      try {
        const { forAnyWorker, more } = await relay.relayOnce();
        // Workers wake for deliveries they must claim from the store; one
        // handed over in memory wakes one worker (see `wakeWorker`). Woken
        // for nothing, 32 idle workers each try a claim, which is a write:
        // at every pass, that cost more than the deliveries themselves.
        if (forAnyWorker > 0) storeMayHaveWork();
        // Not after every pass that relayed something: at a moderate rate
        // that was a pass for nothing after each event.
        if (more || relayWoken) continue;
      } catch (error) {
        log(error, "webhook relay failed; retrying");
      }
      await relayWake.wait(pollMs);
    }
  }

  // Idle workers ask at the same moments (a wake-up reaches all of them);
  // one query answers them all.
  let dueQuery: Promise<Date | null> | undefined;
  const sharedNextDue = () => {
    dueQuery ??= nextDueAt(db).finally(() => {
      dueQuery = undefined;
    });
    return dueQuery;
  };

  // The first claim made at a store check, which the other workers wait
  // for: they claim too only if it took a delivery (the store may hold
  // more). Idle, every worker woke at each poll to ask the store the same.
  let firstClaim: { readonly check: number; readonly found: Promise<boolean> } | undefined;

  /** Claims a due delivery and attempts it, at store check `check`; false when none was due. */
  function claimAt(check: number): Promise<boolean> {
    if (firstClaim?.check === check) {
      return firstClaim.found.then((found) => found && dispatcher.claimAndDeliver());
    }
    const { promise: found, resolve: tell } = Promise.withResolvers<boolean>();
    firstClaim = { check, found };
    // A claim that failed tells the others nothing was found: the next check asks again.
    return dispatcher.claimAndDeliver(tell).finally(() => tell(false));
  }

  async function workerLoop(): Promise<void> {
    await leasesReleased;
    // The store check this worker last found nothing at; none yet, so it claims at start.
    let checkedAt = -1;
    while (!stopped) {
      try {
        if (await dispatcher.deliverHandedOver()) continue;
        if (checkedAt !== storeChecks) {
          const check = storeChecks;
          if (await claimAt(check)) continue;
          checkedAt = check;
          const due = await sharedNextDue();
          const untilDue = due ? due.getTime() - clock().getTime() : pollMs;
          checkStoreWithin(Math.max(10, Math.min(pollMs, untilDue)));
        }
        await workerWake.wait(pollMs);
      } catch (error) {
        if (stopped) return;
        log(error, "webhook delivery failed; retrying");
        checkedAt = -1;
        await workerWake.wait(pollMs);
      }
    }
  }

  const loops = [
    relayLoop(),
    ...Array.from({ length: deps.config.concurrency }, () => workerLoop()),
  ];

  return {
    notify: wakeRelay,
    inHand: () => dispatcher.inHand(),
    async stop(graceMs = 0) {
      stopped = true;
      if (nextCheck) clearTimeout(nextCheck.timer);
      relayWake.wakeAll();
      workerWake.wakeAll();
      const finished = Promise.all(loops);
      let graceTimer: NodeJS.Timeout | undefined;
      const graceOver = new Promise<void>((resolve) => {
        graceTimer = setTimeout(resolve, graceMs);
      });
      await Promise.race([finished, graceOver]);
      clearTimeout(graceTimer);
      dispatcher.abort();
      await finished;
      // Queued for this instance but never started: due again at once; not
      // stored yet: left in their outbox, which the relay then leaves as it is.
      await dispatcher.releaseHandedOver();
      await relay.settled();
    },
  };
}

/** Sleeps that end early when woken. */
function createWakeup() {
  let sleepers: (() => void)[] = [];
  return {
    wait(ms: number): Promise<void> {
      return new Promise((resolve) => {
        const wake = () => {
          clearTimeout(timer);
          sleepers = sleepers.filter((sleeper) => sleeper !== wake);
          resolve();
        };
        const timer = setTimeout(wake, ms);
        sleepers.push(wake);
      });
    },
    wakeAll(): void {
      for (const wake of [...sleepers]) wake();
    },
    /** Wakes one sleeper, if any sleeps (a busy one finds the work when it loops). */
    wakeOne(): void {
      sleepers[0]?.();
    },
  };
}
