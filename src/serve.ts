/** Builds the service from the environment, listens, and stops on SIGINT/SIGTERM. */
import { buildApp } from "./app.js";
import { loadConfig } from "./config.js";
import { startupBanner } from "./startup-banner.js";
import { StoreOpenError } from "./store/sqlite.js";

const config = loadConfig();
const app = await buildApp(config).catch((error: unknown) => {
  // An unreadable database is an operator's problem to fix, not a bug: say
  // which file in one line instead of a stack trace.
  if (!(error instanceof StoreOpenError)) throw error;
  process.stderr.write(`referral-service: ${error.message}\n`);
  process.exit(1);
});
const port = await app.listen(config.port, config.host);
process.stdout.write(
  startupBanner({
    port,
    host: config.host,
    engine: app.store.engine,
    demo: app.demo,
    adminEnabled: config.adminToken !== undefined,
  }),
);

let stopping = false;
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    app.close().then(
      () => process.exit(0),
      (error: unknown) => {
        console.error("shutdown failed", error);
        process.exit(1);
      },
    );
  });
}
