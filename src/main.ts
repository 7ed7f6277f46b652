// The runtime is checked before anything else is loaded (see runtime-check.ts).
import "./runtime-check.js";
import { enableCodeCache } from "./code-cache.js";

// Before the service's modules load: each process (the primary and every
// worker) compiles them all at start, and a start that reads them compiled
// is ready sooner (see code-cache.ts).
enableCodeCache();

await import("./serve.js");
