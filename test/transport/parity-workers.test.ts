import { parityMatrix } from "./parity-matrix.js";

// The same matrix with WORKERS=2: a primary writing the store and two
// workers serving the port, each call landing on either worker.
await parityMatrix({ tls: false, workers: 2 });
