import { type DestinationStream, type Logger, pino } from "pino";
import type { Config } from "./config.js";
import { startWebhookRuntime, type WebhookRuntime } from "./delivery/runtime.js";
import type { WebhookSender } from "./delivery/sender.js";
import type { Clock } from "./domain/tenancy.js";
import { type Authenticator, createAuthenticator } from "./services/authentication.js";
import { type ProvisionedDemo, provisionDemo } from "./services/provisioning.js";
import {
  type RewardSweep,
  type RewardSweepReport,
  startRewardSweep,
} from "./services/reward-sweep.js";
import { deliveryQueueOf } from "./store/deliveries.js";
import { type RetentionSweep, startRetentionSweep } from "./store/retention.js";
import { createSecretBox, keyFromDataDir } from "./store/secret-box.js";
import { openStore, type Store } from "./store/store.js";
import { startStoreHealth } from "./store/store-health.js";
import { clientAddressResolver } from "./transport/client-address.js";
import type { ErrorLogger } from "./transport/errors.js";
import { createGrpcServer } from "./transport/grpc.js";
import { buildHttpApp } from "./transport/http-app.js";
import { idempotencyKeys } from "./transport/idempotency.js";
import { interceptors } from "./transport/interceptors.js";
import { createMetrics, measureCalls } from "./transport/metrics.js";
import {
  createPipeline,
  type Interceptor,
  observeCalls,
  type ServiceRegistration,
} from "./transport/pipeline.js";
import { createRateLimits } from "./transport/rate-limit.js";
import { logCalls } from "./transport/request-log.js";
import { createServiceRegistrations, type ServiceDeps } from "./transport/routes.js";
import { createSharedPortServer } from "./transport/server.js";

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
    sendWebhook?: WebhookSender;
    /** Where log lines go; stdout when unset (tests read them). */
    logTo?: DestinationStream;
    /**
     * Tests and the bench: interceptors run after the standard ones, next
     * to the implementation (the drain tests hold calls in flight with one;
     * the bench's calibration burns a known amount of CPU in one).
     */
    extraInterceptors?: readonly Interceptor[];
    /**
     * Tests only: replaces the services every transport serves (a fake
     * implementation of one service), given the standard ones.
     */
    registrations?: (standard: ServiceRegistration[]) => ServiceRegistration[];
    /**
     * Bench-only (`bench/service-variant.ts without-operations`): false leaves out
     * the operations steps around each call (request log, metrics, rate
     * limits, idempotency keys) and the store's timings, to measure what
     * they cost. `npm start` always runs them.
     */
    operations?: boolean;
    /**
     * Bench-only (`bench/service-variant.ts without-stats`): false keeps no program
     * counters, to measure what keeping them costs the writes.
     */
    keepStats?: boolean;
  } = {},
): Promise<App> {
  const clock = options.clock ?? (() => new Date());
  const logger = pino({ level: config.logLevel }, options.logTo);
  const metrics = createMetrics();
  const operations = options.operations ?? true;
  const store = await openStore(config.store, {
    observe: operations ? metrics.observeStore : undefined,
    eventRetentionMs: config.eventRetentionMs,
    keepStats: options.keepStats ?? true,
  });
  let webhooks: WebhookRuntime | undefined;
  let retention: RetentionSweep | undefined;
  let rewardSweep: RewardSweep | undefined;
  let draining = false;
  let setServing: ((serving: boolean) => void) | undefined;
  const storeHealth = startStoreHealth({
    store,
    minFreeBytes: config.minFreeDiskBytes,
    logger,
    onChange: (takingWrites) => {
      if (!draining) setServing?.(takingWrites);
    },
  });
  metrics.watchDisk(() => storeHealth.diskUsage());
  // The store's passing failures (a full disk, ...) are told to its health,
  // which logs them once a second with a count; anything else is logged here.
  const logError = (error: unknown, fields: Record<string, unknown>, message: string) => {
    if (storeHealth.noteFailure(error) === undefined)
      logger.error({ err: error, ...fields }, message);
  };
  try {
    const authenticator = createAuthenticator({ store, adminToken: config.adminToken });
    const secretBox = createSecretBox(webhookSecretKey(config));
    const transports = await buildTransports(
      config,
      {
        store,
        clock,
        fraudPolicy: config.fraudPolicy,
        secretBox,
        allowPrivateWebhooks: config.webhooks.allowPrivate,
        notifyWebhooks: () => webhooks?.notify(),
        onKeyRevoked: (hash) => authenticator.forget(hash),
      },
      { authenticator, logger, metrics, logError },
      {
        isDraining: () => draining,
        writesRefused: () => storeHealth.writesRefused(),
        extraInterceptors: options.extraInterceptors ?? [],
        operations,
        registrations: options.registrations,
      },
    );
    const runtime = startWebhookRuntime({
      store,
      clock,
      config: config.webhooks,
      secretBox,
      send: options.sendWebhook,
      log: (error, message) => logError(error, {}, message),
      countDelivery: metrics.countDelivery,
    });
    metrics.watchDeliveryQueue(() => deliveryQueueOf(store.system));
    webhooks = runtime;
    // On MongoDB the TTL indexes remove expired events and deliveries.
    if (store.engine === "embedded") {
      retention = startRetentionSweep({
        db: store.system,
        clock,
        retentionMs: config.eventRetentionMs,
        log: (error, message) => logError(error, {}, message),
        report: (removed) => logger.info({ removed }, "removed expired events and deliveries"),
      });
    }
    rewardSweep = startRewardSweep({
      store,
      clock,
      log: (error, message) => logError(error, {}, message),
      notifyWebhooks: () => webhooks?.notify(),
    });
    const sweep = rewardSweep;
    const server = createSharedPortServer({
      grpc: transports.grpc.server,
      http: transports.http,
      limits: config.connections,
      ...(config.tls ? { tls: config.tls } : {}),
    });
    setServing = (serving) => transports.grpc.setServing(serving);
    if (storeHealth.writesRefused() !== undefined) setServing(false);
    let demo: ProvisionedDemo | undefined;
    let closed: Promise<void> | undefined;
    return {
      store,
      get demo() {
        return demo;
      },
      sweepRewards: () => sweep.runOnce(),
      async listen(port, host) {
        const bound = await server.listen(port, host);
        // Only once the port is bound: a start that cannot listen must not
        // create demo keys it never gets to print.
        demo = await provisionDemo(store, {
          clock,
          bootstrapSecretKey: config.bootstrapSecretKey,
          bootstrapPublicKey: config.bootstrapPublicKey,
        });
        return bound;
      },
      close() {
        closed ??= (async () => {
          draining = true;
          transports.grpc.setServing(false);
          storeHealth.stop();
          const graceMs = config.connections.shutdownGraceMs;
          logger.info({ graceMs }, "draining");
          await Promise.all([server.close(graceMs), runtime.stop(graceMs)]);
          transports.settleCalls();
          await Promise.all([retention?.stop(), sweep.stop()]);
          await store.close();
        })();
        return closed;
      },
    };
  } catch (error) {
    storeHealth.stop();
    await webhooks?.stop();
    await retention?.stop();
    await rewardSweep?.stop();
    await store.close();
    throw error;
  }
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
    writesRefused: () => string | undefined;
    extraInterceptors: readonly Interceptor[];
    operations: boolean;
    registrations: ((standard: ServiceRegistration[]) => ServiceRegistration[]) | undefined;
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
  });
  const observedCalls = observeCalls([logCalls(logger), measureCalls(metrics.calls)]);
  const pipeline = createPipeline([
    ...interceptors({
      authenticator,
      log,
      observeCalls: observedCalls.step,
      rateLimits,
      idempotency: idempotencyKeys({ store, clock: deps.clock, log, secretBox: deps.secretBox }),
      operations: serving.operations,
      writesRefused: serving.writesRefused,
    }),
    ...serving.extraInterceptors,
  ]);
  const http = await buildHttpApp({
    registrations,
    pipeline,
    store,
    log,
    logger,
    metrics: {
      contentType: metrics.registry.contentType,
      // Outcomes not yet counted (see observeCalls) are counted first.
      metrics: () => {
        observedCalls.settle();
        return metrics.registry.metrics();
      },
    },
    metricsToken: config.metricsToken,
    checkCredential: rateLimits.checkCredential,
    maxBodyBytes: config.maxBodyBytes,
    isDraining: serving.isDraining,
    writesRefused: serving.writesRefused,
    corsOrigins: config.corsOrigins,
    clientAddressOf,
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

/** WEBHOOK_SECRET_KEY, or on the embedded store the key file in DATA_DIR (config requires the former with MongoDB). */
function webhookSecretKey(config: Config): Buffer {
  if (config.webhooks.secretKey) return config.webhooks.secretKey;
  if ("dataDir" in config.store) return keyFromDataDir(config.store.dataDir);
  throw new Error("WEBHOOK_SECRET_KEY is required with MONGODB_URI");
}
