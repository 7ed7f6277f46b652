import type { DestinationStream, Logger } from "pino";
import type { MetricObjectWithValues, MetricValue } from "prom-client";
import type { PrimaryLink } from "./cluster/link.js";
import type { Config } from "./config.js";
import { startWebhookRuntime } from "./delivery/runtime.js";
import type { WebhookSender } from "./delivery/sender.js";
import type { Clock, Ticker } from "./domain/tenancy.js";
import { rootLogger } from "./logging.js";
import { type Authenticator, createAuthenticator } from "./services/authentication.js";
import { disposableDomains } from "./services/evidence.js";
import { type ProvisionedDemo, provisionDemo } from "./services/provisioning.js";
import { type RewardSweepReport, startRewardSweep } from "./services/reward-sweep.js";
import { deliveryQueueOf } from "./store/deliveries.js";
import { startRetentionSweep } from "./store/retention.js";
import { createSecretBox, keyFromDataDir, type SecretBox } from "./store/secret-box.js";
import type { StatsWatchers } from "./store/stats.js";
import {
  type EmbeddedReader,
  type EmbeddedWriter,
  type MongoStore,
  openStore,
  type Store,
} from "./store/store.js";
import { type StoreHealth, startStoreHealth } from "./store/store-health.js";
import { clientAddressResolver } from "./transport/client-address.js";
import type { ErrorLogger } from "./transport/errors.js";
import { createGrpcServer } from "./transport/grpc.js";
import { buildHttpApp } from "./transport/http-app.js";
import { idempotencyKeys } from "./transport/idempotency.js";
import { interceptors, type NamedStep } from "./transport/interceptors.js";
import { createMetrics, measureCalls } from "./transport/metrics.js";
import { createPipeline, observeCalls, type ServiceRegistration } from "./transport/pipeline.js";
import { createRateLimits } from "./transport/rate-limit.js";
import { createReadiness, type Readiness } from "./transport/readiness.js";
import { logCalls } from "./transport/request-log.js";
import { createServiceRegistrations, type ServiceDeps } from "./transport/routes.js";
import { createSharedPortServer } from "./transport/server.js";
import { localStreamSlots, type StreamsByKey, streamsByKey } from "./transport/streams-by-key.js";

/**
 * The process's part in a cluster (WORKERS above 1). The writer (the
 * primary, on the embedded store) opens the file for writing and runs the
 * background jobs, serving no port; a worker serves the port, reading the
 * file itself and sending writes, webhook wake-ups and revoked keys to the
 * primary through `link`. On MongoDB every worker is a whole service.
 */
export type ClusterRole =
  | { readonly role: "writer" }
  | { readonly role: "worker"; readonly link: PrimaryLink };

/** A built service: listen, then close. */
export interface App {
  readonly store: Store;
  /** Set by `listen` on the first start of an empty store: the demo tenant and its keys. */
  readonly demo: ProvisionedDemo | undefined;
  /**
   * Runs a pass of the reward sweep now (it also runs every second):
   * approvals at the end of holds, expiries, and work a crash interrupted.
   */
  sweepRewards(): Promise<RewardSweepReport>;
  /** Starts listening, then provisions the demo tenant on an empty store; resolves with the bound port. */
  listen(port: number, host: string): Promise<number>;
  /** Wakes the webhook relay (a worker's services wrote events). */
  notifyWebhooks(): void;
  /** Forgets a revoked key's cached authentication (revoked through another worker). */
  forgetKey(hash: string): void;
  /** This process's metrics, for the primary to add up (see `AggregatorRegistry.aggregate`). */
  metricsJson(): Promise<MetricObjectWithValues<MetricValue<string>>[]>;
  /** Tells the store's health of a failure a worker's forwarded write met. */
  noteStoreFailure(error: unknown): void;
  /** Why the store refuses writes now (a disk under MIN_FREE_DISK from the start, ...); undefined while it takes them. */
  writesRefused(): string | undefined;
  /** Told each time the store starts or stops taking writes (the reason, or undefined). */
  onWritesRefused(listener: (reason: string | undefined) => void): void;
  /**
   * Drains, then closes the store: health turns NOT_SERVING and `/readyz`
   * 503, the port stops accepting, calls in flight and webhook attempts
   * finish (up to SHUTDOWN_GRACE; attempts still running are released).
   * Calling it again returns the same promise.
   */
  close(): Promise<void>;
}

/**
 * Builds the whole service without listening: store, provisioning,
 * services, and the three transports on one shared-port server.
 */
export async function buildApp(
  config: Config,
  options: {
    clock?: Clock;
    /**
     * Tests only: when open streams look again for what they are not told
     * of (see {@link Ticker}); every STREAM_POLL_INTERVAL when unset.
     */
    streamTicks?: Ticker;
    sendWebhook?: WebhookSender;
    /** Where log lines go; stdout when unset (tests read them). */
    logTo?: DestinationStream;
    /**
     * Tests and the bench: the steps of every call, given the standard ones
     * in order (see `interceptors`). The drain tests add one that holds
     * calls in flight; the bench leaves out the operations steps
     * (`operationsSteps`) to measure what they cost, and adds one that burns
     * a known amount of CPU for its calibration.
     */
    steps?: (standard: readonly NamedStep[]) => readonly NamedStep[];
    /**
     * Tests only: replaces the services every transport serves (a fake
     * implementation of one service), given the standard ones.
     */
    registrations?: (standard: ServiceRegistration[]) => ServiceRegistration[];
    /**
     * The bench: what keeps the program's counters (`statsWatchers` when
     * unset); its variant without them passes none (`bench/service-variant.ts`).
     */
    statsWatchers?: StatsWatchers;
    /** In a cluster: this process's part (see {@link ClusterRole}); alone when unset. */
    cluster?: ClusterRole;
  } = {},
): Promise<App> {
  const clock = options.clock ?? (() => new Date());
  const streamTicks = options.streamTicks ?? intervalTicker(config.streamPollMs);
  const cluster = options.cluster;
  const { logger, metrics } = observabilityOf(config, cluster, options.logTo);
  const link = cluster?.role === "worker" ? cluster.link : undefined;
  const store = await openStore(config.store, {
    observe: metrics.observeStore,
    eventRetentionMs: config.eventRetentionMs,
    ...(options.statsWatchers ? { watchers: options.statsWatchers } : {}),
    // A worker on the embedded store reads the file and sends its writes to the primary.
    ...(link && "dataDir" in config.store ? { forwardWrites: link.writes } : {}),
  });
  const part = partOf(cluster, store);
  if (store.engine === "embedded" && store.role === "writer" && store.upgradedRows > 0) {
    logger.info(
      { rows: store.upgradedRows },
      "upgraded the stored documents to the current format",
    );
  }
  let jobs: BackgroundJobs | undefined;
  let draining = false;
  const readiness = createReadiness();
  let setServing: ((serving: boolean) => void) | undefined;
  const writesRefusedListeners: ((reason: string | undefined) => void)[] = [];
  const onWritesRefused = (reason: string | undefined) => {
    setServing?.(serving());
    for (const listener of writesRefusedListeners) listener(reason);
  };
  const storeHealth =
    part.kind === "reader"
      ? part.link.storeHealth
      : startStoreHealth({
          store: part.store,
          minFreeBytes: config.minFreeDiskBytes,
          logger,
          onChange: onWritesRefused,
        });
  // gRPC health says SERVING while `/readyz` would answer 200.
  const serving = () =>
    readiness.isReady() && !draining && storeHealth.writesRefused() === undefined;
  watchStore(part, storeHealth, metrics, () => setServing?.(serving()));
  const seeNewCommits = part.kind === "reader" ? () => part.store.seeNewCommits() : undefined;
  // The store's passing failures (a full disk, ...) are told to its health,
  // which logs them once a second with a count; anything else is logged here.
  const logError = (error: unknown, fields: Record<string, unknown>, message: string) => {
    if (storeHealth.noteFailure(error) === undefined)
      logger.error({ err: error, ...fields }, message);
  };
  try {
    const authenticator = createAuthenticator({ store, adminToken: config.adminToken });
    const secretBox = createSecretBox(webhookSecretKey(config));
    const streams = streamsByKey({
      limit: config.streamsPerKey,
      // With workers, the primary counts every worker's streams.
      slots: link
        ? {
            take: (keyId) => link.takeStreamSlot(keyId),
            free: (keyId) => link.freeStreamSlot(keyId),
          }
        : localStreamSlots(config.streamsPerKey),
      isRevoked: (keyId) => authenticator.isRevoked(keyId),
      ticker: streamTicks,
      seeNewCommits,
      log: (error, where) => logError(error, { where }, "unexpected error"),
    });
    // A key revoked through another worker: forgotten here too, and its streams here end.
    link?.onKeyRevoked((hash) => {
      authenticator.forget(hash);
      streams.keyRevoked();
    });
    const transports = !part.serves
      ? undefined
      : await buildTransports(
          config,
          {
            store,
            clock,
            fraudPolicy: config.fraudPolicy,
            disposableDomains: disposableDomains(
              config.disposableEmailDomains.add,
              config.disposableEmailDomains.remove,
            ),
            secretBox,
            allowPrivateWebhooks: config.webhooks.allowPrivate,
            publicUrl: config.publicUrl,
            notifyWebhooks: link ? () => link.notifyWebhooks() : () => jobs?.notifyWebhooks(),
            streamTicks,
            onKeyRevoked: (hash) => {
              authenticator.forget(hash);
              link?.keyRevoked(hash);
              streams.keyRevoked();
            },
          },
          { authenticator, logger, metrics, logError },
          {
            isDraining: () => draining,
            readiness,
            writesRefused: () => storeHealth.writesRefused(),
            writeQueueFull: writeQueueFull(config.writeQueueLimit, part),
            seeNewCommits,
            steps: options.steps,
            registrations: options.registrations,
            link,
            streams,
          },
        );
    // The background jobs run once, in the primary (or the one process).
    jobs = part.background
      ? startBackgroundJobs(config, {
          store,
          clock,
          secretBox,
          sendWebhook: options.sendWebhook,
          logError,
          logger,
          metrics,
        })
      : undefined;
    const background = jobs;
    const server = transports
      ? createSharedPortServer({
          grpc: transports.grpc.server,
          http: transports.http,
          limits: config.connections,
          ...(config.tls ? { tls: config.tls } : {}),
        })
      : undefined;
    setServing = (serving) => transports?.grpc.setServing(serving);
    setServing(serving());
    const markReady = () => {
      readiness.markReady();
      setServing?.(serving());
    };
    // A worker serves once the writer says what it needs is committed, and
    // looks at the file again before it does.
    link?.onReady(() => {
      seeNewCommits?.();
      markReady();
      link.served();
    });
    let demo: ProvisionedDemo | undefined;
    let closed: Promise<void> | undefined;
    return {
      store,
      get demo() {
        return demo;
      },
      sweepRewards: () => {
        if (!background) throw new Error("the reward sweep runs in the primary");
        return background.sweepRewards();
      },
      notifyWebhooks: () => background?.notifyWebhooks(),
      forgetKey: (hash) => authenticator.forget(hash),
      noteStoreFailure: (error) => {
        storeHealth.noteFailure(error);
      },
      metricsJson: async () => {
        transports?.settleCalls();
        return metrics.registry.getMetricsAsJSON();
      },
      writesRefused: () => storeHealth.writesRefused(),
      onWritesRefused: (listener) => {
        writesRefusedListeners.push(listener);
      },
      async listen(port, host) {
        // The writer of a cluster binds nothing: its workers serve the port.
        const bound = server ? await server.listen(port, host) : port;
        // A worker leaves the demo to the primary, which provisions it once,
        // and serves once the primary says it is ready.
        if (cluster?.role === "worker") return bound;
        // Only once the port is bound: a start that cannot listen must not
        // create demo keys it never gets to print.
        demo = await provisionDemo(store, {
          clock,
          bootstrapSecretKey: config.bootstrapSecretKey,
          bootstrapPublicKey: config.bootstrapPublicKey,
        });
        markReady();
        return bound;
      },
      close() {
        closed ??= (async () => {
          draining = true;
          transports?.grpc.setServing(false);
          storeHealth.stop();
          const graceMs = config.connections.shutdownGraceMs;
          logger.info({ graceMs }, "draining");
          await Promise.all([server?.close(graceMs), background?.stopDeliveries(graceMs)]);
          transports?.settleCalls();
          await background?.stopSweeps();
          await store.close();
        })();
        return closed;
      },
    };
  } catch (error) {
    storeHealth.stop();
    await jobs?.stopDeliveries(0);
    await jobs?.stopSweeps();
    await store.close();
    throw error;
  }
}

/** The process's logger and metrics; in a cluster each line and series says which process. */
function observabilityOf(
  config: Config,
  cluster: ClusterRole | undefined,
  logTo: DestinationStream | undefined,
) {
  const workerName = cluster?.role === "worker" ? cluster.link.workerId : "primary";
  const root = rootLogger(config, logTo);
  const logger = cluster ? root.child({ worker: workerName }) : root;
  const metrics = createMetrics(cluster ? { worker: String(workerName) } : undefined);
  return { logger, metrics };
}

/**
 * What the process hears of its store: a reader from the writer (writes
 * refused, the numbers its commits moved), a writer or MongoDB from itself
 * (its disk, its commits, in the metrics).
 */
function watchStore(
  part: ProcessPart,
  storeHealth: StoreHealth,
  metrics: ReturnType<typeof createMetrics>,
  servingChanged: () => void,
): void {
  switch (part.kind) {
    case "reader":
      part.link.onWritesRefused(servingChanged);
      part.link.onStatsChanged((scopes) => part.store.statsChangedElsewhere(scopes));
      return;
    default: {
      metrics.watchDisk(() => storeHealth.diskUsage());
      const store = part.store;
      if (store.engine === "embedded") {
        metrics.watchCommits(
          () => store.commits(),
          () => store.queuedWrites(),
        );
      }
    }
  }
}

/** The jobs that run once for the whole service: webhook deliveries, retention, the reward sweep. */
interface BackgroundJobs {
  notifyWebhooks(): void;
  sweepRewards(): Promise<RewardSweepReport>;
  /** Lets attempts in flight finish (up to `graceMs`), then releases the others. */
  stopDeliveries(graceMs: number): Promise<void>;
  stopSweeps(): Promise<void>;
}

function startBackgroundJobs(
  config: Config,
  deps: {
    store: Store;
    clock: Clock;
    secretBox: SecretBox;
    sendWebhook: WebhookSender | undefined;
    logError: (error: unknown, fields: Record<string, unknown>, message: string) => void;
    logger: Logger;
    metrics: ReturnType<typeof createMetrics>;
  },
): BackgroundJobs {
  const { store, clock, logError, logger, metrics } = deps;
  const log = (error: unknown, message: string) => logError(error, {}, message);
  const webhooks = startWebhookRuntime({
    store,
    clock,
    config: config.webhooks,
    secretBox: deps.secretBox,
    send: deps.sendWebhook,
    log,
    countDelivery: metrics.countDelivery,
  });
  metrics.watchDeliveryQueue(() => deliveryQueueOf(store.system));
  metrics.watchDeliveriesInHand(() => webhooks.inHand());
  // On MongoDB the TTL indexes remove expired events and deliveries.
  const retention =
    store.engine === "embedded"
      ? startRetentionSweep({
          db: store.system,
          clock,
          retentionMs: config.eventRetentionMs,
          log,
          report: (removed) => logger.info({ removed }, "removed expired events and deliveries"),
        })
      : undefined;
  const rewardSweep = startRewardSweep({
    store,
    clock,
    log,
    notifyWebhooks: () => webhooks.notify(),
  });
  return {
    notifyWebhooks: () => webhooks.notify(),
    sweepRewards: () => rewardSweep.runOnce(),
    stopDeliveries: (graceMs) => webhooks.stop(graceMs),
    stopSweeps: async () => {
      await Promise.all([retention?.stop(), rewardSweep.stop()]);
    },
  };
}

/** The services and the two servers that share the port: Fastify (all but gRPC) and grpc-js (gRPC). */
async function buildTransports(
  config: Config,
  deps: ServiceDeps,
  observability: {
    authenticator: Authenticator;
    logger: Logger;
    metrics: ReturnType<typeof createMetrics>;
    logError: (error: unknown, fields: Record<string, unknown>, message: string) => void;
  },
  serving: {
    isDraining: () => boolean;
    readiness: Readiness;
    writesRefused: () => string | undefined;
    writeQueueFull: (() => number | undefined) | undefined;
    /** A cluster worker's store on the embedded engine: each call sees the commits before it. */
    seeNewCommits: (() => void) | undefined;
    steps: ((standard: readonly NamedStep[]) => readonly NamedStep[]) | undefined;
    registrations: ((standard: ServiceRegistration[]) => ServiceRegistration[]) | undefined;
    /** A worker's link to the primary: one rate limit budget and one `/metrics` for all. */
    link: PrimaryLink | undefined;
    /** The streams each key holds open (see `streamsByKey`). */
    streams: StreamsByKey;
  },
) {
  const { store } = deps;
  const { authenticator, logger, metrics, logError } = observability;
  const log: ErrorLogger = (error, where) => logError(error, { where }, "unexpected error");
  const standard = createServiceRegistrations(deps);
  const registrations = serving.registrations?.(standard) ?? standard;
  const clientAddressOf = clientAddressResolver(config.trustedProxies);
  const rateLimits = await createRateLimits(config.rateLimits, {
    store,
    countRateLimited: metrics.countRateLimited,
    sharedByWorkers: serving.link !== undefined,
  });
  const observedCalls = observeCalls([logCalls(logger), measureCalls(metrics.calls)]);
  const standardSteps = interceptors({
    authenticator,
    log,
    observeCalls: observedCalls.step,
    rateLimits,
    streamsByKey: serving.streams.step,
    idempotency: idempotencyKeys({ store, clock: deps.clock, log, secretBox: deps.secretBox }),
    readiness: serving.readiness,
    writesRefused: serving.writesRefused,
    writeQueueFull: serving.writeQueueFull,
    seeNewCommits: serving.seeNewCommits,
  });
  const steps = serving.steps?.(standardSteps) ?? standardSteps;
  const pipeline = createPipeline(steps.map((step) => step.run));
  const http = await buildHttpApp({
    registrations,
    pipeline,
    store,
    log,
    logger,
    metrics: {
      contentType: metrics.registry.contentType,
      // Outcomes not yet counted (see observeCalls) are counted first; a
      // worker shows the sum over the whole service, which the primary adds up.
      metrics: serving.link
        ? serving.link.clusterMetrics
        : () => {
            observedCalls.settle();
            return metrics.registry.metrics();
          },
    },
    metricsToken: config.metricsToken,
    checkCredential: rateLimits.checkCredential,
    maxBodyBytes: config.maxBodyBytes,
    isDraining: serving.isDraining,
    isReady: serving.readiness.isReady,
    writesRefused: serving.writesRefused,
    corsOrigins: config.corsOrigins,
    clientAddressOf,
    links: {
      store,
      clock: deps.clock,
      secretBox: deps.secretBox,
      publicUrl: deps.publicUrl,
      limit: rateLimits.followLink,
    },
  });
  const grpc = createGrpcServer({
    registrations,
    pipeline,
    log,
    maxMessageBytes: config.maxBodyBytes,
    limits: config.connections,
    clientAddressOf,
  });
  await http.ready();
  return { http, grpc, settleCalls: observedCalls.settle };
}

/**
 * WRITE_QUEUE_LIMIT on the embedded store: reached while that many writes
 * wait for the writer's commit (in a worker: for the primary's answers).
 * Calls are refused whole at it, so the background jobs' writes never are.
 */
function writeQueueFull(limit: number, part: ProcessPart): (() => number | undefined) | undefined {
  if (part.kind === "reader") return () => (part.link.writes.pending >= limit ? limit : undefined);
  if (part.store.engine !== "embedded") return undefined;
  const writer = part.store;
  return () => (writer.queuedWrites() >= limit ? limit : undefined);
}

/**
 * The process's part, from its cluster role and its store: `alone` serves
 * and runs the background jobs; a cluster's `writer` (the primary) runs the
 * background jobs and serves no port; its workers serve, each a `worker`
 * that writes itself (MongoDB) or a `reader` that reads the file and sends
 * its writes to the writer (the embedded engine).
 */
type ProcessPart =
  | {
      readonly kind: "alone" | "writer";
      readonly store: MongoStore | EmbeddedWriter;
      readonly serves: boolean;
      readonly background: true;
    }
  | {
      readonly kind: "worker";
      readonly store: MongoStore;
      readonly link: PrimaryLink;
      readonly serves: true;
      readonly background: false;
    }
  | {
      readonly kind: "reader";
      readonly store: EmbeddedReader;
      readonly link: PrimaryLink;
      readonly serves: true;
      readonly background: false;
    };

function partOf(cluster: ClusterRole | undefined, store: Store): ProcessPart {
  if (store.engine === "embedded" && store.role === "reader") {
    if (cluster?.role !== "worker")
      throw new Error("a store that reads only serves a cluster's worker");
    return { kind: "reader", store, link: cluster.link, serves: true, background: false };
  }
  if (cluster?.role === "worker") {
    if (store.engine !== "mongodb")
      throw new Error("a worker on the embedded store forwards its writes");
    return { kind: "worker", store, link: cluster.link, serves: true, background: false };
  }
  const kind = cluster?.role === "writer" ? "writer" : "alone";
  return { kind, store, serves: kind === "alone", background: true };
}

/** A {@link Ticker} whose next tick is `intervalMs` after each wait begins. */
function intervalTicker(intervalMs: number): Ticker {
  return {
    onNextTick(listener) {
      const timer = setTimeout(listener, intervalMs);
      // A poll keeps no process up that has nothing else to do.
      timer.unref();
      return () => clearTimeout(timer);
    },
  };
}

/** WEBHOOK_SECRET_KEY, or on the embedded store the key file in DATA_DIR (config requires the former with MongoDB). */
function webhookSecretKey(config: Config): Buffer {
  if (config.webhooks.secretKey) return config.webhooks.secretKey;
  if ("dataDir" in config.store) return keyFromDataDir(config.store.dataDir);
  throw new Error("WEBHOOK_SECRET_KEY is required with MONGODB_URI");
}
