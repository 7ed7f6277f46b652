/**
 * The service as `npm start` builds it on `PORT`, the same service without
 * its operations steps (see `service-variant.ts`) on
 * `PORT_WITHOUT_OPERATIONS`, and that one again with a step that only burns
 * `CALIBRATION_MICROS` of CPU before each call goes on, on
 * `PORT_CALIBRATION`: in one process, each on its own store (`DATA_DIR`,
 * `DATA_DIR_WITHOUT_OPERATIONS`, `DATA_DIR_CALIBRATION`). Two processes of
 * one build can differ by a third in CPU per call for their whole life; in
 * one process all three run at the same speed, so the bench's operations
 * suite, loading one port at a time, sees what the steps cost, and what a
 * known amount of work before the response costs on this machine. Not for
 * production.
 */
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import type * as AppModule from "../src/app.js";
import type * as ConfigModule from "../src/config.js";
import type * as InterceptorsModule from "../src/transport/interceptors.js";
import type { Interceptor } from "../src/transport/pipeline.js";

// The compiled service (`npm run build`), as deployed, not these sources.
const compiled = (module: string) =>
  pathToFileURL(join(import.meta.dirname, "../dist/src", module)).href;
const { loadConfig } = (await import(compiled("config.js"))) as typeof ConfigModule;
const { buildApp } = (await import(compiled("app.js"))) as typeof AppModule;
const { withoutOperations } = (await import(
  compiled("transport/interceptors.js")
)) as typeof InterceptorsModule;

const config = loadConfig();
const { store } = config;
if (!("dataDir" in store)) throw new Error("needs the embedded store (DATA_DIR)");
const required = (name: string): string => {
  const value = process.env[name];
  if (!value) throw new Error(`needs ${name}`);
  return value;
};
// performance.now() counts milliseconds.
const calibrationMs = Number(required("CALIBRATION_MICROS")) / 1000;
const burnCalibration: Interceptor = (call, next) => {
  const end = performance.now() + calibrationMs;
  while (performance.now() < end) {
    // Only CPU: what any step's work costs before the response.
  }
  return next(call);
};
const apps = [
  { port: config.port, app: await buildApp(config) },
  {
    port: Number(required("PORT_WITHOUT_OPERATIONS")),
    app: await buildApp(
      { ...config, store: { ...store, dataDir: required("DATA_DIR_WITHOUT_OPERATIONS") } },
      { steps: withoutOperations },
    ),
  },
  {
    port: Number(required("PORT_CALIBRATION")),
    app: await buildApp(
      { ...config, store: { ...store, dataDir: required("DATA_DIR_CALIBRATION") } },
      {
        steps: (standard) => [
          ...withoutOperations(standard),
          { name: "burn-calibration", run: burnCalibration },
        ],
      },
    ),
  },
];
for (const { port, app } of apps) await app.listen(port, config.host);
process.once("SIGTERM", () => {
  Promise.all(apps.map(({ app }) => app.close())).then(
    () => process.exit(0),
    () => process.exit(1),
  );
});
