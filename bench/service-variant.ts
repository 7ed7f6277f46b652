/**
 * The service as `npm start` runs it (compiled, configured from the
 * environment) but built without one of its parts, or one behaviour
 * changed, named by the argument: `without-operations` leaves out the
 * operations steps (no request log or request id, no metrics, no rate
 * limits, no idempotency keys; the operations suite), `without-stats` keeps
 * no program counters (InsightsService reads zeros; the insights suite),
 * `per-write-commit` commits each write of the embedded store alone instead
 * of the writes of one event-loop turn together (`WriteLimits.groupCommit`
 * false; the cluster suite). The bench runs it next to the deployed service
 * to measure what that part costs. Always one process (WORKERS=1: it builds
 * the app itself, never a cluster). Not for production: it skips the
 * start-up checks and the signal handling of `src/serve.ts` beyond a plain
 * stop.
 */
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import type * as AppModule from "../src/app.js";
import type * as ConfigModule from "../src/config.js";
import type * as InterceptorsModule from "../src/transport/interceptors.js";

// The compiled service (`npm run build`), as deployed, not these sources.
const compiled = (module: string) =>
  pathToFileURL(join(import.meta.dirname, "../dist/src", module)).href;
const { loadConfig } = (await import(compiled("config.js"))) as typeof ConfigModule;
const { buildApp } = (await import(compiled("app.js"))) as typeof AppModule;
const { withoutOperations } = (await import(
  compiled("transport/interceptors.js")
)) as typeof InterceptorsModule;

const variants = ["without-operations", "without-stats", "per-write-commit"] as const;
const variant = process.argv[2] as (typeof variants)[number];
if (!variants.includes(variant)) {
  throw new Error(`usage: service-variant.ts ${variants.join("|")} (got ${variant})`);
}
const config = loadConfig();
const app =
  variant === "per-write-commit"
    ? await buildApp(perWriteCommit(config))
    : await buildApp(
        config,
        variant === "without-operations" ? { steps: withoutOperations } : { statsWatchers: {} },
      );
await app.listen(config.port, config.host);
process.once("SIGTERM", () => {
  app.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
});

/** The configuration with the embedded store committing every write on its own. */
function perWriteCommit(config: ConfigModule.Config): ConfigModule.Config {
  if (!("dataDir" in config.store)) {
    throw new Error("per-write-commit is a variant of the embedded store: unset MONGODB_URI");
  }
  const store = config.store;
  return {
    ...config,
    store: { ...store, writeLimits: { ...store.writeLimits, groupCommit: false } },
  };
}
