/**
 * Builds the service from the environment, listens, and drains on SIGINT or
 * SIGTERM. A start that fails for a reason the operator can fix (a wrong
 * variable, the port taken, DATA_DIR not writable, an unreadable database)
 * says so in one line and exits with 1.
 */
import { accessSync, constants, mkdirSync } from "node:fs";
import { type Config, loadConfig } from "./config.js";
import { startupBanner } from "./startup-banner.js";
import { mongoServerSelectionTimeoutMs } from "./store/mongo-options.js";
import { StoreOpenError } from "./store/sqlite.js";

const config = (() => {
  try {
    return loadConfig();
  } catch (error) {
    // Every configuration error names its variable.
    return exitWith((error as Error).message);
  }
})();
checkDataDir(config);
// Loaded only now, so a wrong variable or directory is reported before the
// whole service (drivers, transports) is.
const { buildApp } = await import("./app.js");
const app = await buildApp(config).catch((error: unknown) => exitOnStartupError(error, config));
const port = await app.listen(config.port, config.host).catch(async (error: unknown) => {
  await app.close();
  return exitOnStartupError(error, config);
});
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
  }),
);

let stopping = false;
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.on(signal, () => {
    // A terminal's Ctrl-C reaches both npm and this process, and npm
    // forwards it: the second one is the same request.
    if (stopping) return;
    stopping = true;
    // The drain is bounded by SHUTDOWN_GRACE; this bounds the rest (closing the store).
    setTimeout(() => {
      process.stderr.write("referral-service: the shutdown did not finish in time\n");
      process.exit(1);
    }, config.connections.shutdownGraceMs + 10_000).unref();
    app.close().then(
      () => process.exit(0),
      (error: unknown) => {
        console.error("shutdown failed", error);
        process.exit(1);
      },
    );
  });
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
  if (error instanceof StoreOpenError) exitWith(error.message);
  // The driver's words below quote no credentials, so no password is printed.
  const { name, message } = error as Error;
  const { code, syscall } = error as NodeJS.ErrnoException;
  if (name === "MongoParseError" || name === "MongoRuntimeError") {
    exitWith(`MONGODB_URI is not a MongoDB connection string: ${firstLine(message)}`);
  }
  if (syscall === "querySrv" || syscall === "queryTxt") {
    exitWith(`MONGODB_URI: its DNS records do not resolve (${firstLine(message)})`);
  }
  if (name === "MongoServerSelectionError") {
    const seconds = mongoServerSelectionTimeoutMs / 1000;
    exitWith(`MONGODB_URI: no MongoDB server answered within ${seconds} s (${firstLine(message)})`);
  }
  if (name === "MongoServerError" && (error as { code?: unknown }).code === 18) {
    exitWith("MONGODB_URI: MongoDB refused its credentials");
  }
  const { port, host } = config;
  if (code === "EADDRINUSE") {
    exitWith(`PORT ${port} is already in use on ${host}: stop the other process or set PORT`);
  }
  if (code === "EACCES" && syscall === "listen") {
    exitWith(`PORT ${port} needs privileges this process lacks (ports below 1024 do): set PORT`);
  }
  if (code === "EADDRNOTAVAIL") exitWith(`HOST ${host} is not an address of this machine`);
  if (code === "ENOTFOUND" || code === "EAI_AGAIN") exitWith(`HOST ${host} does not resolve`);
  throw error;
}

function firstLine(text: string): string {
  return text.split("\n", 1)[0] ?? "";
}

function exitWith(message: string): never {
  process.stderr.write(`referral-service: ${message}\n`);
  process.exit(1);
}
