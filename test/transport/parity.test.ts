import { parityMatrix } from "./parity-matrix.js";

// Every protocol on HTTP/1.1 and on cleartext HTTP/2 (prior knowledge).
await parityMatrix({ tls: false });
