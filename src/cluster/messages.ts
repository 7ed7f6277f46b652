import type { MetricObjectWithValues, MetricValue } from "prom-client";
import type { StoreReplies, StoreRequests } from "../store/forwarded-writes.js";

/**
 * What a cluster's processes tell each other over the IPC channel
 * `node:cluster` opens (structured clone: dates and maps cross as they are).
 * Messages of other libraries (rate-limiter-flexible's cluster limiter)
 * share the channel; each side ignores what is not its own.
 */
export type WorkerMessage =
  | StoreRequests
  /** A worker's services wrote events: the relay looks for deliveries. */
  | { readonly type: "webhooks" }
  /** A key was revoked through this worker: the others forget it too. */
  | { readonly type: "key-revoked"; readonly hash: string }
  /** A stream of this key opens on this worker: may it (STREAMS_PER_KEY, for the whole service)? */
  | { readonly type: "stream-slot"; readonly id: number; readonly keyId: string }
  /** A stream of this key that the primary let open on this worker ended. */
  | { readonly type: "stream-slot-freed"; readonly keyId: string }
  /** `GET /metrics` on this worker: the whole service's, added up by the primary. */
  | { readonly type: "metrics"; readonly id: number }
  | { readonly type: "metrics-json-reply"; readonly id: number; readonly metrics: MetricsJson }
  /** The worker's event loop answered the heartbeat. */
  | { readonly type: "pong" }
  /** The worker listens to the channel now: the primary tells it what it missed. */
  | { readonly type: "linked" }
  /** The worker serves every key and campaign the primary committed before it said ready. */
  | { readonly type: "ready" }
  | { readonly type: "listening"; readonly port: number }
  /** The worker could not start (the port taken, ...): the operator's message. */
  | { readonly type: "start-failed"; readonly message: string };

export type PrimaryMessage =
  | StoreReplies
  | { readonly type: "key-revoked"; readonly hash: string }
  /** The answer to a `stream-slot`: false when the key holds STREAMS_PER_KEY streams already. */
  | { readonly type: "stream-slot-reply"; readonly id: number; readonly granted: boolean }
  /** The store started (undefined) or stopped taking writes, and why. */
  | { readonly type: "writes-refused"; readonly reason: string | undefined }
  /** The scopes whose numbers a commit moved (for the workers' watches). */
  | { readonly type: "stats-changed"; readonly scopes: readonly string[] }
  | { readonly type: "metrics-reply"; readonly id: number; readonly text: string }
  /** The primary adds up every process's metrics: this worker's, please. */
  | { readonly type: "metrics-json"; readonly id: number }
  | { readonly type: "ping" }
  /**
   * The service is ready: everything it needs to serve (the demo keys) is
   * committed. The worker looks at the file again, then serves, and says so.
   */
  | { readonly type: "ready" }
  /** Stop taking calls, finish those in flight, then exit. */
  | { readonly type: "drain" };

export type MetricsJson = MetricObjectWithValues<MetricValue<string>>[];

const workerTypes = new Set([
  "store",
  "webhooks",
  "key-revoked",
  "stream-slot",
  "stream-slot-freed",
  "metrics",
  "metrics-json-reply",
  "pong",
  "linked",
  "ready",
  "listening",
  "start-failed",
]);
const primaryTypes = new Set([
  "store-reply",
  "key-revoked",
  "stream-slot-reply",
  "writes-refused",
  "stats-changed",
  "metrics-reply",
  "metrics-json",
  "ping",
  "ready",
  "drain",
]);

/** Whether a message on the channel is one of a worker's to the primary. */
export function isWorkerMessage(message: unknown): message is WorkerMessage {
  return hasType(message, workerTypes);
}

/** Whether a message on the channel is one of the primary's to a worker. */
export function isPrimaryMessage(message: unknown): message is PrimaryMessage {
  return hasType(message, primaryTypes);
}

function hasType(message: unknown, types: ReadonlySet<string>): boolean {
  return (
    typeof message === "object" &&
    message !== null &&
    typeof (message as { type?: unknown }).type === "string" &&
    types.has((message as { type: string }).type)
  );
}
