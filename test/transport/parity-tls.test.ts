import { parityMatrix } from "./parity-matrix.js";

// Every protocol over TLS: HTTP/1.1 and HTTP/2 as ALPN chooses, gRPC with TLS credentials.
await parityMatrix({ tls: true });
