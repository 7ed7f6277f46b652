/**
 * The service as `npm start` runs it (compiled, configured from the
 * environment) but built without one of its parts, named by the argument:
 * `without-operations` leaves out the operations steps (no request log or
 * request id, no metrics, no rate limits, no idempotency keys; the
 * operations suite), `without-stats` keeps no program counters
 * (InsightsService reads zeros; the insights suite). The bench runs it next
 * to the deployed service to measure what that part costs. Not for
 * production: it skips the start-up checks and the signal handling of
 * `src/serve.ts` beyond a plain stop.
 */
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import type * as AppModule from "../src/app.js";
import type * as ConfigModule from "../src/config.js";

// The compiled service (`npm run build`), as deployed, not these sources.
const compiled = (module: string) =>
  pathToFileURL(join(import.meta.dirname, "../dist/src", module)).href;
const { loadConfig } = (await import(compiled("config.js"))) as typeof ConfigModule;
const { buildApp } = (await import(compiled("app.js"))) as typeof AppModule;

const variant = process.argv[2];
if (variant !== "without-operations" && variant !== "without-stats") {
  throw new Error(`usage: service-variant.ts without-operations|without-stats (got ${variant})`);
}
const config = loadConfig();
const app = await buildApp(
  config,
  variant === "without-operations" ? { operations: false } : { keepStats: false },
);
await app.listen(config.port, config.host);
process.once("SIGTERM", () => {
  app.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
});
