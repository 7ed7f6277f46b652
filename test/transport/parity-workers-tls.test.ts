import { parityMatrix } from "./parity-matrix.js";

// Over TLS with WORKERS=2: each worker terminates TLS on the shared port.
await parityMatrix({ tls: true, workers: 2 });
