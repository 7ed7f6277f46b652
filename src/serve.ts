/**
 * Builds the service from the environment, listens, and drains on SIGINT or
 * SIGTERM. A start that fails for a reason the operator can fix (a wrong
 * variable, the port taken, DATA_DIR not writable, an unreadable database)
 * says so in one line and exits with 1.
 */
import cluster from "node:cluster";
import { accessSync, constants, mkdirSync } from "node:fs";
import { isAbsolute, relative } from "node:path";
import { saveCodeCache } from "./code-cache.js";
import { type Config, loadConfig } from "./config.js";
import { developmentSecretsIn } from "./development.js";
import type { ProvisionedDemo } from "./services/provisioning.js";
import { startupBanner } from "./startup-banner.js";
import { StoreOpenError } from "./store/errors.js";
import { mongoServerSelectionTimeoutMs } from "./store/mongo-options.js";

// Declared before the start below awaits anything: a SIGINT or SIGTERM may
// arrive while it runs, and its handler reads this.
let stopping = false;

const config = (() => {
  try {
    return loadConfig();
  } catch (error) {
    // Every configuration error names its variable.
    return exitWith((error as Error).message);
  }
})();
// Loaded only after the configuration is read, so a wrong variable or
// directory is reported before the whole service (drivers, transports) is.
if (config.workers > 1 && cluster.isWorker) {
  await serveAsWorker(config);
} else {
  checkDataDir(config);
  const { buildApp } = await import("./app.js");
  if (config.workers > 1) await serveAsPrimary(config, buildApp);
  else await serveAlone(config, buildApp);
}

type BuildApp = typeof import("./app.js")["buildApp"];

/** WORKERS=1: this process does everything. */
async function serveAlone(config: Config, buildApp: BuildApp): Promise<void> {
  const app = await buildApp(config).catch((error: unknown) => exitOnStartupError(error, config));
  const port = await app.listen(config.port, config.host).catch(async (error: unknown) => {
    await app.close();
    return exitOnStartupError(error, config);
  });
  printBanner(config, port, app);
  onStopSignal(config, () => app.close());
  saveCodeCache();
}

/**
 * The primary of a cluster: the store's writer and the background jobs
 * here, the port served by the workers it forks.
 */
async function serveAsPrimary(config: Config, buildApp: BuildApp): Promise<void> {
  const { startPrimary } = await import("./cluster/primary.js");
  // Dates, maps and errors' fields cross the IPC channel as they are.
  cluster.setupPrimary({ serialization: "advanced" });
  const app = await buildApp(config, { cluster: { role: "writer" } }).catch((error: unknown) =>
    exitOnStartupError(error, config),
  );
  // Listened for before the first fork: a signal's default action ends a
  // process at once, and a primary ended between its forks and its handler
  // left workers starting with nobody at the other end of their channel
  // (each died printing EPIPE). Handled, the signal waits for this turn,
  // when every worker is forked and the primary drains them (the handler
  // reads `primary`, declared next, only then).
  onStopSignal(config, () => primary.stop());
  const primary = startPrimary(config, app, process.env);
  const port = await primary.started.catch(async (error: unknown) => {
    await primary.stop();
    return exitWith((error as Error).message);
  });
  // Binds nothing: provisions the demo tenant, once the workers serve the port.
  await app.listen(port, config.host);
  await primary.ready();
  printBanner(config, port, app);
  saveCodeCache();
}

/** A worker of a cluster: serves the port, sends its writes to the primary. */
async function serveAsWorker(config: Config): Promise<void> {
  const { linkToPrimary } = await import("./cluster/link.js");
  const { buildApp } = await import("./app.js");
  const workerId = cluster.worker?.id ?? 0;
  const link = linkToPrimary(workerId);
  // Without its primary a worker can write nothing: it ends at once.
  process.on("disconnect", () => process.exit(1));
  const failed = async (error: unknown): Promise<never> => {
    const message = startupErrorMessage(error, config);
    if (message === undefined) throw error;
    // Sent before exiting: an exit right after a send can lose the message.
    await new Promise((resolve) => process.send?.({ type: "start-failed", message }, resolve));
    return process.exit(1);
  };
  const app = await buildApp(config, { cluster: { role: "worker", link } }).catch(failed);
  link.provideMetrics(() => app.metricsJson());
  const port = await app.listen(config.port, config.host).catch(async (error: unknown) => {
    await app.close();
    return failed(error);
  });
  const stop = () => app.close();
  link.onDrain(() => void drainAndExit(config, stop));
  onStopSignal(config, stop);
  link.listening(port);
  saveCodeCache();
}

function printBanner(
  config: Config,
  port: number,
  app: { store: { engine: string }; demo: ProvisionedDemo | undefined },
): void {
  process.stdout.write(
    startupBanner({
      port,
      host: config.host,
      engine: app.store.engine,
      demo: app.demo,
      adminEnabled: config.adminToken !== undefined,
      tls: config.tls !== undefined,
      keysGiven: {
        secret: config.bootstrapSecretKey !== undefined,
        public: config.bootstrapPublicKey !== undefined,
      },
      workers: config.workers,
      ...developmentBanner(config),
    }),
  );
}

/**
 * What a development start prints: the keys `npm run dev` made and keeps in
 * DATA_DIR, only when the service runs with them (and the admin token only
 * when it is theirs too). DEVELOPMENT alone prints nothing an operator gave.
 */
function developmentBanner(config: Config) {
  if (!config.development || !("dataDir" in config.store)) return {};
  const kept = developmentSecretsIn(config.store.dataDir);
  if (
    !kept ||
    kept.secretKey !== config.bootstrapSecretKey ||
    kept.publicKey !== config.bootstrapPublicKey
  ) {
    return {};
  }
  return {
    development: {
      secretKey: kept.secretKey,
      publicKey: kept.publicKey,
      adminToken:
        config.adminToken === kept.adminToken ? kept.adminToken : "the value of ADMIN_TOKEN",
      dataDir: shownPath(config.store.dataDir),
    },
  };
}

/** A path as a person typed it: relative to the working directory when inside it. */
function shownPath(path: string): string {
  const inside = relative(process.cwd(), path);
  return inside === "" || inside.startsWith("..") || isAbsolute(inside) ? path : `./${inside}`;
}

/** SIGINT and SIGTERM drain, once: a terminal's Ctrl-C reaches npm, which forwards it too. */
function onStopSignal(config: Config, stop: () => Promise<void>): void {
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.on(signal, () => void drainAndExit(config, stop));
  }
}

async function drainAndExit(config: Config, stop: () => Promise<void>): Promise<void> {
  if (stopping) return;
  stopping = true;
  // The drain is bounded by SHUTDOWN_GRACE; this bounds the rest (closing the store).
  setTimeout(() => {
    process.stderr.write("referral-service: the shutdown did not finish in time\n");
    process.exit(1);
  }, config.connections.shutdownGraceMs + 15_000).unref();
  try {
    await stop();
    process.exit(0);
  } catch (error) {
    console.error("shutdown failed", error);
    process.exit(1);
  }
}

/** The embedded store writes to DATA_DIR: refuse it at once, naming it, when it cannot. */
function checkDataDir(config: Config): void {
  if (!("dataDir" in config.store)) return;
  const { dataDir } = config.store;
  try {
    mkdirSync(dataDir, { recursive: true, mode: 0o700 });
    accessSync(dataDir, constants.W_OK);
  } catch (error) {
    exitWith(`DATA_DIR ${dataDir} is not writable (${(error as Error).message})`);
  }
}

/**
 * Exits with one line when the error is the operator's to fix; any other
 * is a bug, rethrown so its stack trace is printed.
 */
function exitOnStartupError(error: unknown, config: Config): never {
  const message = startupErrorMessage(error, config);
  if (message !== undefined) exitWith(message);
  throw error;
}

/** The one line for an error the operator can fix; undefined for a bug. */
function startupErrorMessage(error: unknown, config: Config): string | undefined {
  if (error instanceof StoreOpenError) return error.message;
  // The driver's words below quote no credentials, so no password is printed.
  const { name, message } = error as Error;
  const { code, syscall } = error as NodeJS.ErrnoException;
  if (name === "MongoParseError" || name === "MongoRuntimeError") {
    return `MONGODB_URI is not a MongoDB connection string: ${firstLine(message)}`;
  }
  if (syscall === "querySrv" || syscall === "queryTxt") {
    return `MONGODB_URI: its DNS records do not resolve (${firstLine(message)})`;
  }
  if (name === "MongoServerSelectionError") {
    const seconds = mongoServerSelectionTimeoutMs / 1000;
    return `MONGODB_URI: no MongoDB server answered within ${seconds} s (${firstLine(message)})`;
  }
  if (name === "MongoServerError" && (error as { code?: unknown }).code === 18) {
    return "MONGODB_URI: MongoDB refused its credentials";
  }
  const { port, host } = config;
  if (code === "EADDRINUSE") {
    return `PORT ${port} is already in use on ${host}: stop the other process or set PORT`;
  }
  if (code === "EACCES" && syscall === "listen") {
    return `PORT ${port} needs privileges this process lacks (ports below 1024 do): set PORT`;
  }
  if (code === "EADDRNOTAVAIL") return `HOST ${host} is not an address of this machine`;
  if (code === "ENOTFOUND" || code === "EAI_AGAIN") return `HOST ${host} does not resolve`;
  return undefined;
}

function firstLine(text: string): string {
  return text.split("\n", 1)[0] ?? "";
}

function exitWith(message: string): never {
  process.stderr.write(`referral-service: ${message}\n`);
  process.exit(1);
}
