import { Webhook } from "standardwebhooks";
import type { WebhookConfig } from "../config.js";
import { newId } from "../domain/ids.js";
import type { Clock } from "../domain/tenancy.js";
import { isSuccessStatus, nextAttemptAt, shouldDisable } from "../domain/webhook-delivery.js";
import {
  type AttemptOutcome,
  bringForwardWaitingDeliveries,
  claimDueDelivery,
  type FirstAttempt,
  newDelivery,
  type QueuedLease,
  recordAttempt,
  releaseDelivery,
  skipDelivery,
} from "../store/deliveries.js";
import type { DeliveryDoc, EventDoc, WebhookDoc } from "../store/documents.js";
import { withErasedScrubbed } from "../store/erasure.js";
import { findEvent } from "../store/events.js";
import { keptWhileMarkStays } from "../store/kept-reads.js";
import type { SecretBox } from "../store/secret-box.js";
import { changeMarksOf, erasureMarkOf, forgetFreedOf, type Store } from "../store/store.js";
import {
  disableFailingWebhook,
  findWebhookById,
  recordWebhookFailure,
  recordWebhookSuccess,
} from "../store/webhooks.js";
import type { WebhookSender } from "./sender.js";

/** How an attempt ended (see {@link FirstAttempt}), or null when a stop cut it short. */
type Attempted = { readonly outcome: AttemptOutcome | null } | null;

/** A delivery the relay handed to this dispatcher, with its event. */
interface HandedOver {
  readonly delivery: DeliveryDoc;
  readonly event: EventDoc;
  /**
   * Set when the delivery is not stored yet (its first attempt comes
   * first): told how the attempt went, for the relay to store, or null
   * when it was not made. Otherwise it was queued leased to this dispatcher.
   */
  readonly attempted?: (attempt: FirstAttempt | null) => void;
}

/**
 * Handed-over deliveries waiting at most, first attempts included: past
 * this the relay queues them unleased, so a slow endpoint holds no more
 * than this in memory (nor this many outboxes waiting for their first
 * attempts) and a lease never outlives its wait.
 */
const maxHandedOver = 1_000;

/** Signers kept at most (one per endpoint secret in use). */
const maxSigners = 1_000;

/** Endpoints kept at most between their changes (see `endpointOf`). */
const maxEndpointsKept = 1_000;

/**
 * While an endpoint succeeds, its `lastSuccessAt` is written at most once
 * a second: under load, a write per delivery to the same endpoint
 * document cost the service more than the delivery's own records.
 */
const successRecordIntervalMs = 1_000;

/**
 * While an endpoint catches up, its next deliveries are brought forward at
 * most this often by one instance: each step reads a batch, and the batch
 * reaches seconds ahead (see `catchUpPace`).
 */
const catchUpStepIntervalMs = 1_000;

/** Endpoints whose catch-up steps are remembered at most (see {@link catchUpStepIntervalMs}). */
const maxCatchingUp = 1_000;

/** Whether a success changes nothing worth a write: no failures to clear, a recent success. */
function isHealthyAndFresh(webhook: WebhookDoc, at: Date): boolean {
  const { health } = webhook;
  return (
    health.consecutiveFailures === 0 &&
    health.failingSince === null &&
    health.lastSuccessAt !== null &&
    at.getTime() - health.lastSuccessAt.getTime() < successRecordIntervalMs
  );
}

/** What a dispatcher needs. */
export interface DispatcherDeps {
  readonly store: Store;
  readonly clock: Clock;
  readonly config: WebhookConfig;
  readonly secretBox: SecretBox;
  readonly send: WebhookSender;
  readonly log: (error: unknown, message: string) => void;
  /** Told each attempt's outcome (metrics). */
  readonly countDelivery?: (outcome: "succeeded" | "failed" | "skipped") => void;
  /** Wakes the idle workers: deliveries were brought forward and are due sooner than they sleep. */
  readonly wakeWorkers?: () => void;
  /** Wakes one idle worker: a delivery was handed over in memory. */
  readonly wakeWorker?: () => void;
  /** Told when an attempt failed and its delivery is due again (at its next attempt). */
  readonly dueAgainAt?: (at: Date) => void;
}

/**
 * Delivers due deliveries: takes one handed over by the relay, or claims
 * one under a lease, signs the event with
 * the endpoint's secret(s) the Standard Webhooks way, POSTs it, and records
 * the attempt, the next one on the retry schedule, and the endpoint's
 * health. Returns false when nothing was due.
 */
export function createDispatcher(deps: DispatcherDeps) {
  const { clock, config } = deps;
  // Leases are taken and compared in the store's time where it has one
  // (MongoDB's): instances whose clocks disagree still never hold one
  // delivery's attempt at once.
  const leaseClock = deps.store.engine === "mongodb" ? deps.store.leaseClock : clock;
  const db = deps.store.system;
  const owner = newId("wkr");
  const inFlight = new AbortController();

  // Deliveries the relay queued already leased to this dispatcher: attempted
  // without a claim (a conditional update and a query) or a read of the
  // event, which the relay hands over with them.
  const handedOver: HandedOver[] = [];

  /** When a lease taken now ends: after the attempt's timeout, so a live worker never loses it. */
  const leaseFrom = (now: Date) => new Date(now.getTime() + config.timeoutMs + 30_000);

  // Endpoints kept while the webhooks' change mark stays (see
  // `keptWhileMarkStays`): reading the endpoint was a query per delivery.
  // Where writes leave no mark here (MongoDB), every delivery reads it.
  const markOf = changeMarksOf(deps.store);
  const erasureMark = erasureMarkOf(deps.store);
  const forgetFreed = forgetFreedOf(deps.store);
  const endpointOf = keptWhileMarkStays(
    () => markOf?.("webhooks"),
    (id: string) => findWebhookById(db, id),
    maxEndpointsKept,
  );

  /** The next handed-over delivery whose lease still covers a whole attempt. */
  function takeHandedOver(now: Date): HandedOver | undefined {
    for (;;) {
      const next = handedOver.shift();
      if (!next) return undefined;
      // Not stored, nobody else can take it. One stored whose lease would
      // end mid-attempt is left to expire and be claimed like any other.
      if (next.attempted || next.delivery.leaseUntil.getTime() - now.getTime() > config.timeoutMs) {
        return next;
      }
    }
  }

  /** Attempts a delivery the relay handed over, if one waits. False when none did. */
  async function deliverHandedOver(): Promise<boolean> {
    const handed = takeHandedOver(leaseClock());
    if (!handed) return false;
    let attempted: Attempted = null;
    let event = handed.event;
    try {
      const webhook = await endpointOf(handed.delivery.webhookId);
      // Built when it was handed over, perhaps before a customer it names
      // was erased: what is sent now holds nothing the erasure removed. The
      // last read before the attempt, which signs and sends in the same turn.
      event = await withErasedScrubbed(db, handed.event, erasureMark, forgetFreed);
      const unstored = handed.attempted !== undefined;
      attempted = await attempt(handed.delivery, webhook, event, unstored);
    } finally {
      handed.attempted?.(
        attempted && {
          delivery: handed.delivery,
          outcome: attempted.outcome,
          ...(event === handed.event ? {} : { sent: event }),
        },
      );
    }
    return true;
  }

  /**
   * Claims a due delivery from the store and attempts it. False when none
   * was due. `claimed` hears whether the claim took one, before the attempt.
   */
  async function claimAndDeliver(claimed?: (found: boolean) => void): Promise<boolean> {
    const leaseNow = leaseClock();
    const delivery = await claimDueDelivery(db, clock(), owner, {
      now: leaseNow,
      until: leaseFrom(leaseNow),
    });
    claimed?.(delivery !== null);
    if (!delivery) return false;
    const webhook = await endpointOf(delivery.webhookId);
    const event = await findEvent(db, delivery.eventId);
    await attempt(delivery, webhook, event);
    return true;
  }

  /**
   * Attempts a delivery this dispatcher holds the lease of, and records
   * the attempt, or one not stored yet (`unstored`), which the relay stores
   * with its attempt. How it went; null when cut short by a stop.
   */
  async function attempt(
    delivery: DeliveryDoc,
    webhook: WebhookDoc | null,
    event: EventDoc | null,
    unstored = false,
  ): Promise<Attempted> {
    if (!webhook || webhook.deletedAt || !webhook.enabled || !event) {
      if (!unstored) await skipDelivery(db, delivery, owner, clock());
      deps.countDelivery?.("skipped");
      return { outcome: null };
    }
    const attemptedAt = clock();
    const signature = signersOf(webhook, attemptedAt)
      .map((signer) => signer.sign(event._id, attemptedAt, event.payload))
      .join(" ");
    const response = await deps.send({
      url: webhook.url,
      headers: {
        "content-type": "application/json",
        "user-agent": "referral-service-webhooks/1",
        "webhook-id": event._id,
        "webhook-timestamp": Math.floor(attemptedAt.getTime() / 1000).toString(),
        "webhook-signature": signature,
      },
      body: event.payload,
      timeoutMs: config.timeoutMs,
      allowPrivate: config.allowPrivate,
      signal: inFlight.signal,
    });
    if (inFlight.signal.aborted && response.statusCode === null) {
      // Cut short because the service is stopping: the attempt says nothing
      // about the endpoint. Handing the delivery back makes it due at once,
      // not when the lease ends; one not stored stays in its outbox.
      if (!unstored) await releaseDelivery(db, delivery, owner, clock());
      return null;
    }
    const succeeded = response.statusCode !== null && isSuccessStatus(response.statusCode);
    const outcome = outcomeOf(delivery, succeeded, attemptedAt, response);
    if (!unstored) await recordAttempt(db, delivery, owner, outcome);
    deps.countDelivery?.(succeeded ? "succeeded" : "failed");
    if (outcome.nextAttemptAt) deps.dueAgainAt?.(outcome.nextAttemptAt);
    if (succeeded) {
      if (!isHealthyAndFresh(webhook, attemptedAt)) {
        await recordWebhookSuccess(db, webhook._id, attemptedAt);
      }
      // The receiver answers again: what failed while it did not is sent
      // now rather than at its next retry, minutes or hours away. A
      // brought-forward delivery that succeeds carries the catch-up on.
      const wasFailing = webhook.health.consecutiveFailures > 0;
      if (wasFailing || delivery.broughtForwardTo) {
        await catchUp(webhook._id, { resuming: !wasFailing });
      }
    } else {
      const after = await recordWebhookFailure(db, webhook._id, attemptedAt);
      const failingSince = after?.health.failingSince ?? null;
      if (shouldDisable(failingSince, attemptedAt, config.disableAfterMs)) {
        await disableFailingWebhook(
          db,
          webhook._id,
          attemptedAt,
          `every delivery failed since ${failingSince?.toISOString()}`,
        );
      }
    }
    return { outcome };
  }

  // Per endpoint, this instance's last catch-up step, and the steps running:
  // only throttles the steps (the catch-up itself is in the store).
  const lastCatchUpStep = new Map<string, number>();
  const catchUpRunning = new Set<string>();

  /**
   * Brings the endpoint's waiting deliveries forward. A step that carries a
   * catch-up on is skipped if this instance took one for the endpoint
   * within the interval; one that starts it (the endpoint was failing) is
   * not, unless a step is running. A failed step leaves the deliveries to
   * their schedule, and the attempt that triggered it is recorded already.
   */
  async function catchUp(webhookId: string, { resuming }: { resuming: boolean }): Promise<void> {
    if (catchUpRunning.has(webhookId)) return;
    const now = clock();
    const last = lastCatchUpStep.get(webhookId);
    if (resuming && last !== undefined && now.getTime() - last < catchUpStepIntervalMs) return;
    if (lastCatchUpStep.size >= maxCatchingUp) lastCatchUpStep.clear();
    lastCatchUpStep.set(webhookId, now.getTime());
    catchUpRunning.add(webhookId);
    try {
      const broughtForward = await bringForwardWaitingDeliveries(db, webhookId, now);
      if (broughtForward > 0) deps.wakeWorkers?.();
    } catch (error) {
      deps.log(
        error,
        "bringing an endpoint's waiting deliveries forward failed; they keep their schedule",
      );
    } finally {
      catchUpRunning.delete(webhookId);
    }
  }

  function outcomeOf(
    delivery: DeliveryDoc,
    succeeded: boolean,
    attemptedAt: Date,
    response: { statusCode: number | null; durationMs: number; error: string | null },
  ): AttemptOutcome {
    const attempt = {
      attemptedAt,
      statusCode: response.statusCode,
      durationMs: response.durationMs,
      error: succeeded ? null : (response.error ?? `HTTP ${response.statusCode}`),
    };
    if (succeeded) return { attempt, status: "succeeded", nextAttemptAt: null };
    const next = nextAttemptAt(config.retrySchedule, delivery.scheduleAttempts + 1, attemptedAt);
    return { attempt, status: next ? "pending" : "failed", nextAttemptAt: next };
  }

  /** The secrets that sign now: the current one, and the previous one during its grace period. */
  function signersOf(webhook: WebhookDoc, now: Date): Webhook[] {
    const signers = [signerOf(webhook.secretSealed)];
    if (
      webhook.previousSecretSealed &&
      webhook.previousSecretExpiresAt &&
      webhook.previousSecretExpiresAt > now
    ) {
      signers.push(signerOf(webhook.previousSecretSealed));
    }
    return signers;
  }

  // Opening a sealed secret (AES-GCM) and keying its HMAC cost more than a
  // signature; a secret changes only by rotation, which seals a new one, so
  // the signer is kept per sealed secret.
  const signers = new Map<string, Webhook>();
  function signerOf(sealed: string): Webhook {
    let signer = signers.get(sealed);
    if (!signer) {
      if (signers.size >= maxSigners) signers.clear();
      signer = new Webhook(deps.secretBox.open(sealed));
      signers.set(sealed, signer);
    }
    return signer;
  }

  return {
    deliverHandedOver,
    claimAndDeliver,
    /** Attempts one delivery: a handed-over one, else one claimed from the store. False when none was due. */
    deliverOne: async () => (await deliverHandedOver()) || (await claimAndDeliver()),
    /**
     * Takes a new event's delivery to attempt before it is stored (see
     * `createOutboxRelay`); none while enough wait in this dispatcher's hands.
     */
    attemptFirst(
      event: EventDoc,
      webhook: WebhookDoc,
      now: Date,
    ): Promise<FirstAttempt | null> | undefined {
      if (handedOver.length >= maxHandedOver) return undefined;
      return new Promise((attempted) => {
        handedOver.push({ delivery: newDelivery(event, webhook, now), event, attempted });
        deps.wakeWorker?.();
      });
    },
    /**
     * The lease to queue a delivery with, so that the relay can hand it
     * over; none while this dispatcher has enough handed over already (the
     * rest wait in the store, claimed by any worker).
     */
    leaseForQueued(): QueuedLease | undefined {
      return handedOver.length < maxHandedOver
        ? { owner, until: leaseFrom(leaseClock()) }
        : undefined;
    },
    /** Takes a delivery queued with {@link leaseForQueued}'s lease, and its event. */
    handOver(delivery: DeliveryDoc, event: EventDoc): void {
      handedOver.push({ delivery, event });
      deps.wakeWorker?.();
    },
    /** Deliveries handed over and not attempted yet. */
    inHand: () => handedOver.length,
    /** Aborts attempts in flight (the service is stopping); each is released, not recorded. */
    abort: () => inFlight.abort(),
    /**
     * Releases the handed-over deliveries no worker started (the service is
     * stopping); those not stored stay in their outbox, for the next start.
     */
    async releaseHandedOver(): Promise<void> {
      const left = handedOver.splice(0);
      for (const handed of left) handed.attempted?.(null);
      await Promise.all(
        left
          .filter((handed) => !handed.attempted)
          .map(({ delivery }) => releaseDelivery(db, delivery, owner, clock())),
      );
    },
  };
}
