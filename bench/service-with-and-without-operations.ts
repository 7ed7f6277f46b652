/**
 * The service as `npm start` builds it on `PORT`, and the same service
 * without its operations steps (see `service-without-operations.ts`) on
 * `PORT_WITHOUT_OPERATIONS`, in one process, each on its own store
 * (`DATA_DIR`, `DATA_DIR_WITHOUT_OPERATIONS`). Two processes of one build
 * can differ by a third in CPU per call for their whole life; in one
 * process both variants run at the same speed, so the bench's operations
 * suite, loading one port at a time, sees only what the steps cost. Not for
 * production.
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

const config = loadConfig();
const portWithout = Number(process.env.PORT_WITHOUT_OPERATIONS);
const dataDirWithout = process.env.DATA_DIR_WITHOUT_OPERATIONS;
if (!("dataDir" in config.store) || !dataDirWithout || !Number.isInteger(portWithout)) {
  throw new Error(
    "needs the embedded store, PORT_WITHOUT_OPERATIONS and DATA_DIR_WITHOUT_OPERATIONS",
  );
}
const deployed = await buildApp(config);
const withoutOperations = await buildApp(
  { ...config, store: { ...config.store, dataDir: dataDirWithout } },
  { operations: false },
);
await deployed.listen(config.port, config.host);
await withoutOperations.listen(portWithout, config.host);
process.once("SIGTERM", () => {
  Promise.all([deployed.close(), withoutOperations.close()]).then(
    () => process.exit(0),
    () => process.exit(1),
  );
});
