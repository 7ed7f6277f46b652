import { Webhook } from "standardwebhooks";
import type { WebhookConfig } from "../config.js";
import { newId } from "../domain/ids.js";
import type { Clock } from "../domain/tenancy.js";
import { isSuccessStatus, nextAttemptAt, shouldDisable } from "../domain/webhook-delivery.js";
import {
  type AttemptOutcome,
  claimDueDelivery,
  recordAttempt,
  releaseDelivery,
  skipDelivery,
} from "../store/deliveries.js";
import type { DeliveryDoc, WebhookDoc } from "../store/documents.js";
import { findEvent } from "../store/events.js";
import type { SecretBox } from "../store/secret-box.js";
import type { Store } from "../store/store.js";
import {
  disableFailingWebhook,
  findWebhookById,
  recordWebhookFailure,
  recordWebhookSuccess,
} from "../store/webhooks.js";
import type { WebhookSender } from "./sender.js";

/** Signers kept at most (one per endpoint secret in use). */
const maxSigners = 1_000;

/**
 * While an endpoint succeeds, its `lastSuccessAt` is written at most once
 * a second: under load, a write per delivery to the same endpoint
 * document cost the service more than the delivery's own records.
 */
const successRecordIntervalMs = 1_000;

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
}

/**
 * Delivers due deliveries: claims one under a lease, signs the event with
 * the endpoint's secret(s) the Standard Webhooks way, POSTs it, and records
 * the attempt, the next one on the retry schedule, and the endpoint's
 * health. Returns false when nothing was due.
 */
export function createDispatcher(deps: DispatcherDeps) {
  const { clock, config } = deps;
  const db = deps.store.system;
  const owner = newId("wkr");
  const inFlight = new AbortController();

  async function deliverOne(): Promise<boolean> {
    const now = clock();
    // The lease outlives the attempt's timeout, so a live worker never loses it.
    const leaseUntil = new Date(now.getTime() + config.timeoutMs + 30_000);
    const delivery = await claimDueDelivery(db, now, owner, leaseUntil);
    if (!delivery) return false;
    const webhook = await findWebhookById(db, delivery.webhookId);
    const event = await findEvent(db, delivery.eventId);
    if (!webhook || webhook.deletedAt || !webhook.enabled || !event) {
      await skipDelivery(db, delivery, owner, clock());
      deps.countDelivery?.("skipped");
      return true;
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
      // not when the lease ends.
      await releaseDelivery(db, delivery, owner, clock());
      return true;
    }
    const succeeded = response.statusCode !== null && isSuccessStatus(response.statusCode);
    await recordAttempt(db, delivery, owner, outcomeOf(delivery, succeeded, attemptedAt, response));
    deps.countDelivery?.(succeeded ? "succeeded" : "failed");
    if (succeeded) {
      if (!isHealthyAndFresh(webhook, attemptedAt)) {
        await recordWebhookSuccess(db, webhook._id, attemptedAt);
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
    return true;
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
    deliverOne,
    /** Aborts attempts in flight (the service is stopping); each is released, not recorded. */
    abort: () => inFlight.abort(),
  };
}
