import type { Config } from "./config.js";
import { startWebhookRuntime, type WebhookRuntime } from "./delivery/runtime.js";
import type { WebhookSender } from "./delivery/sender.js";
import type { Clock } from "./domain/tenancy.js";
import { createAuthenticator } from "./services/authentication.js";
import { type ProvisionedDemo, provisionDemo } from "./services/provisioning.js";
import { createSecretBox, keyFromDataDir } from "./store/secret-box.js";
import { openStore, type Store } from "./store/store.js";
import type { ErrorLogger } from "./transport/errors.js";
import { createGrpcServer } from "./transport/grpc.js";
import { buildHttpApp } from "./transport/http-app.js";
import { interceptors } from "./transport/interceptors.js";
import { createPipeline } from "./transport/pipeline.js";
import { createServiceRegistrations, type ServiceDeps } from "./transport/routes.js";
import { createSharedPortServer } from "./transport/server.js";

/** A built service: listen, then close. */
export interface App {
  readonly store: Store;
  /** Set on the first start of an empty store: the demo tenant and its keys. */
  readonly demo: ProvisionedDemo | undefined;
  /** Starts listening; resolves with the bound port. */
  listen(port: number, host: string): Promise<number>;
  /** Stops serving and closes the store. */
  close(): Promise<void>;
}

/**
 * Builds the whole service without listening: store, provisioning,
 * services, and the three transports on one shared-port server.
 */
export async function buildApp(
  config: Config,
  options: { clock?: Clock; sendWebhook?: WebhookSender } = {},
): Promise<App> {
  const clock = options.clock ?? (() => new Date());
  const store = await openStore(config.store);
  let webhooks: WebhookRuntime | undefined;
  try {
    const demo = await provisionDemo(store, {
      clock,
      bootstrapSecretKey: config.bootstrapSecretKey,
      bootstrapPublicKey: config.bootstrapPublicKey,
    });
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
      authenticator,
    );
    if (store.imported) {
      transports.http.log.info(
        { imported: store.imported.counts, files: store.imported.files },
        "imported the previous embedded engine's data; its files are kept, renamed",
      );
    }
    const runtime = startWebhookRuntime({
      store,
      clock,
      config: config.webhooks,
      secretBox,
      send: options.sendWebhook,
      log: (error, message) => transports.http.log.error({ err: error }, message),
    });
    webhooks = runtime;
    const server = createSharedPortServer(transports.grpc, transports.http);
    return {
      store,
      demo,
      listen: (port, host) => server.listen(port, host),
      async close() {
        await server.close();
        await runtime.stop();
        await store.close();
      },
    };
  } catch (error) {
    await webhooks?.stop();
    await store.close();
    throw error;
  }
}

/** The services and the two servers that share the port: Fastify (HTTP/1.1) and grpc-js. */
async function buildTransports(
  config: Config,
  deps: ServiceDeps,
  authenticator: ReturnType<typeof createAuthenticator>,
) {
  const { store } = deps;
  // Unexpected errors go to Fastify's structured log, which exists only once
  // the app is built; until then (never in practice) to stderr.
  let sink: ErrorLogger = (error, rpc) => console.error(`unexpected error in ${rpc}`, error);
  const log: ErrorLogger = (error, rpc) => sink(error, rpc);
  const registrations = createServiceRegistrations(deps);
  const pipeline = createPipeline(interceptors({ authenticator, log }));
  const http = await buildHttpApp({
    registrations,
    pipeline,
    store,
    log,
    logLevel: config.logLevel,
    maxBodyBytes: config.maxBodyBytes,
  });
  sink = (error, rpc) => http.log.error({ err: error, rpc }, "unexpected error");
  const grpc = createGrpcServer({
    registrations,
    pipeline,
    log,
    maxMessageBytes: config.maxBodyBytes,
  });
  await http.ready();
  return { http, grpc };
}

/** WEBHOOK_SECRET_KEY, or on the embedded store the key file in DATA_DIR (config requires the former with MongoDB). */
function webhookSecretKey(config: Config): Buffer {
  if (config.webhooks.secretKey) return config.webhooks.secretKey;
  if ("dataDir" in config.store) return keyFromDataDir(config.store.dataDir);
  throw new Error("WEBHOOK_SECRET_KEY is required with MONGODB_URI");
}
