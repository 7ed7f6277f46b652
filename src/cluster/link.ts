import { storeUnavailableReason } from "../store/errors.js";
import { ForwardedWrites } from "../store/forwarded-writes.js";
import type { StoreHealth } from "../store/store-health.js";
import {
  isPrimaryMessage,
  type MetricsJson,
  type PrimaryMessage,
  type WorkerMessage,
} from "./messages.js";

/** What a worker's service asks of the primary, and hears from it. */
export interface PrimaryLink {
  /** The worker's number (`cluster.worker.id`), in its logs and metrics. */
  readonly workerId: number;
  /** The embedded store's writes, sent to the writer. */
  readonly writes: ForwardedWrites;
  /** The writer's store health, as the primary last told it. */
  readonly storeHealth: StoreHealth;
  notifyWebhooks(): void;
  keyRevoked(hash: string): void;
  onKeyRevoked(listener: (hash: string) => void): void;
  /**
   * Asks the primary, which counts every worker's streams, for a slot for
   * a stream of `keyId`; false when the key holds STREAMS_PER_KEY already.
   */
  takeStreamSlot(keyId: string): Promise<boolean>;
  /** Gives back a slot `takeStreamSlot` granted: the stream ended. */
  freeStreamSlot(keyId: string): void;
  onWritesRefused(listener: (reason: string | undefined) => void): void;
  onStatsChanged(listener: (scopes: ReadonlySet<string>) => void): void;
  /**
   * Told once the primary says the service is ready (at once if it said so
   * already); `served` tells it back that this worker serves.
   */
  onReady(listener: () => void): void;
  /** Tells the primary this worker serves every key it committed before it said ready. */
  served(): void;
  /** The whole service's metrics, as `GET /metrics` shows them. */
  clusterMetrics(): Promise<string>;
  /** How this worker answers the primary's request for its metrics. */
  provideMetrics(provide: () => Promise<MetricsJson>): void;
  /** Told to drain (the primary stops). */
  onDrain(listener: () => void): void;
  /** Tells the primary the port is served. */
  listening(port: number): void;
}

/** How long `GET /metrics` waits for the primary's sum. */
const metricsTimeoutMs = 5_000;

/** The link of this process, a `node:cluster` worker, over its IPC channel. */
export function linkToPrimary(workerId: number): PrimaryLink {
  const send = (message: WorkerMessage) => {
    if (process.connected) process.send?.(message);
  };
  const writes = new ForwardedWrites({ send });
  let refused: string | undefined;
  let ready = false;
  const listeners = {
    ready: [] as (() => void)[],
    keyRevoked: [] as ((hash: string) => void)[],
    writesRefused: [] as ((reason: string | undefined) => void)[],
    statsChanged: [] as ((scopes: ReadonlySet<string>) => void)[],
    drain: [] as (() => void)[],
  };
  let provide: (() => Promise<MetricsJson>) | undefined;
  let nextMetricsId = 1;
  const metricsWaiting = new Map<number, (text: string) => void>();
  let nextSlotId = 1;
  const slotsWaiting = new Map<number, (granted: boolean) => void>();
  // Wakes are sent once per turn however many writes asked.
  let wakeSent = false;

  process.on("message", (message: unknown) => {
    if (!isPrimaryMessage(message)) return;
    handle(message);
  });
  // What the primary said before this listener existed (a worker loads its
  // code after the channel opens) is lost: it says it again.
  send({ type: "linked" });
  // The primary is gone: nothing can be written any more.
  process.on("disconnect", () => writes.writerLost());

  function handle(message: PrimaryMessage): void {
    switch (message.type) {
      case "store-reply":
        writes.settle(message);
        return;
      case "key-revoked":
        for (const listener of listeners.keyRevoked) listener(message.hash);
        return;
      case "stream-slot-reply":
        slotsWaiting.get(message.id)?.(message.granted);
        slotsWaiting.delete(message.id);
        return;
      case "writes-refused":
        refused = message.reason;
        for (const listener of listeners.writesRefused) listener(message.reason);
        return;
      case "stats-changed": {
        const scopes = new Set(message.scopes);
        for (const listener of listeners.statsChanged) listener(scopes);
        return;
      }
      case "metrics-reply":
        metricsWaiting.get(message.id)?.(message.text);
        metricsWaiting.delete(message.id);
        return;
      case "metrics-json":
        void (provide?.() ?? Promise.resolve([])).then(
          (metrics) => send({ type: "metrics-json-reply", id: message.id, metrics }),
          () => send({ type: "metrics-json-reply", id: message.id, metrics: [] }),
        );
        return;
      case "ping":
        send({ type: "pong" });
        return;
      case "ready":
        if (ready) return;
        ready = true;
        for (const listener of listeners.ready) listener();
        return;
      case "drain":
        for (const listener of listeners.drain) listener();
        return;
    }
  }

  return {
    workerId,
    writes,
    storeHealth: {
      writesRefused: () => refused,
      // The writer met the failure and counts it; here it only gets its reason.
      noteFailure: (error) => storeUnavailableReason(error),
      diskUsage: () => undefined,
      stop: () => {},
    },
    notifyWebhooks() {
      if (wakeSent) return;
      wakeSent = true;
      setImmediate(() => {
        wakeSent = false;
        send({ type: "webhooks" });
      });
    },
    keyRevoked: (hash) => send({ type: "key-revoked", hash }),
    onKeyRevoked: (listener) => listeners.keyRevoked.push(listener),
    takeStreamSlot(keyId) {
      const id = nextSlotId++;
      // Without its primary the worker exits (see serve.ts): no answer is awaited for ever.
      return new Promise((resolve) => {
        slotsWaiting.set(id, resolve);
        send({ type: "stream-slot", id, keyId });
      });
    },
    freeStreamSlot: (keyId) => send({ type: "stream-slot-freed", keyId }),
    onWritesRefused: (listener) => listeners.writesRefused.push(listener),
    onStatsChanged: (listener) => listeners.statsChanged.push(listener),
    onReady(listener) {
      if (ready) listener();
      else listeners.ready.push(listener);
    },
    served: () => send({ type: "ready" }),
    onDrain: (listener) => listeners.drain.push(listener),
    provideMetrics(provider) {
      provide = provider;
    },
    clusterMetrics() {
      const id = nextMetricsId++;
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          metricsWaiting.delete(id);
          reject(new Error("the primary did not add up the metrics in time"));
        }, metricsTimeoutMs);
        metricsWaiting.set(id, (text) => {
          clearTimeout(timer);
          resolve(text);
        });
        send({ type: "metrics", id });
      });
    },
    listening: (port) => send({ type: "listening", port }),
  };
}
