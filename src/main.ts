// The runtime is checked before anything else is loaded (see runtime-check.ts).
import "./runtime-check.js";

await import("./serve.js");
