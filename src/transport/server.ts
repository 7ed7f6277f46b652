import type { Server as HttpServer, IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { createServer as createTcpServer, type Socket, type Server as TcpServer } from "node:net";
import { createServer as createTlsServer, type TLSSocket } from "node:tls";
import * as grpc from "@grpc/grpc-js";
import type { FastifyInstance } from "fastify";
import type { ConnectionConfig, TlsConfig } from "../config.js";
import { createHttp2Injector, type HttpRequestHandler } from "./http2-streams.js";

/** The client connection preface of HTTP/2 (RFC 9113 §3.4); a SETTINGS frame must follow it. */
const http2Preface = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
const frameHeaderLength = 9;
const settingsFrameType = 0x4;
/** The largest frame a peer may send before settings raise it (RFC 9113 §4.2). */
const initialMaxFrameSize = 16_384;

/**
 * One TCP port for everything, cleartext or TLS: a connection that opens
 * with the HTTP/2 preface (or negotiates `h2` by ALPN) is an HTTP/2 session,
 * whose gRPC streams go to grpc-js (gRPC, reflection, health) and whose
 * other streams go to Fastify; any other connection is HTTP/1.1 and goes to
 * Fastify (REST, Connect, gRPC-Web, health, metrics, docs).
 */
export interface SharedPortServer {
  /** Starts listening; resolves with the bound port (rejects with the listen error, e.g. EADDRINUSE). */
  listen(port: number, host: string): Promise<number>;
  /**
   * Drains: stops accepting, ends open server streams (UNAVAILABLE), lets
   * calls in flight on both sides finish (HTTP/1.1 responses then carry
   * `Connection: close`, HTTP/2 clients get a GOAWAY), and after `graceMs`
   * closes whatever is left.
   */
  close(graceMs: number): Promise<void>;
}

/** Creates the shared-port server over a grpc-js server and a ready Fastify app. */
export function createSharedPortServer(deps: {
  grpc: grpc.Server;
  http: FastifyInstance;
  limits: ConnectionConfig;
  /** Serves HTTPS (ALPN `h2` and `http/1.1`) with this certificate; cleartext without. */
  tls?: TlsConfig;
}): SharedPortServer {
  const { limits } = deps;
  const httpServer = deps.http.server;
  // TLS, when on, ends before either side: grpc-js gets plain HTTP/2 connections.
  const injector = createHttp2Injector(
    deps.grpc,
    grpc.ServerCredentials.createInsecure(),
    deps.http.routing as unknown as HttpRequestHandler,
    limits,
  );
  applyHttp1Limits(httpServer, limits);

  const sockets = new Set<Socket>();
  /** Connections whose first bytes have not said which protocol they speak yet. */
  const undecided = new Set<Socket>();
  /**
   * The HTTP/1.1 connections, each with the response it owes last (a pipelined
   * request's answer is written after the ones before it), if any. Kept per
   * connection rather than per request: a map that gains and loses a key on
   * every request reallocates its table over and over, and a table held by a
   * long-lived map outlives two young-generation collections, so each was
   * promoted: the old generation grew by 184 bytes a REST read that way,
   * and by about 30 this way.
   */
  const http1Sockets = new Map<Socket, { owed: ServerResponse | undefined }>();
  /**
   * The HTTP/2 connections. grpc-js's `tryShutdown` reports an injected
   * connection closed as soon as it has sent its GOAWAY (Node's server
   * close marks the session closed first), while its streams go on; the
   * session ends its connection once the last stream is done, so the drain
   * waits for these to close.
   */
  const http2Sockets = new Set<Socket>();
  let draining = false;
  let onHttp1Drained: (() => void) | undefined;
  let onHttp2Drained: (() => void) | undefined;

  // Sees every HTTP/1.1 request before Fastify does: the drain needs to know
  // which connections are busy, and to end them once their response is out.
  httpServer.prependListener("request", (request: IncomingMessage, response: ServerResponse) => {
    const connection = http1Sockets.get(request.socket);
    const pipelined = connection?.owed !== undefined;
    if (connection) {
      connection.owed = response;
      response.once("close", () => {
        if (connection.owed === response) connection.owed = undefined;
      });
    }
    if (draining) {
      // The connection closes after the response it owes, so this request
      // would never be answered: it must not run either (a client sends it
      // again, to another instance, and a write would run twice).
      if (pipelined) refusedByDrain.add(request);
      closeAfter(response, request.socket);
    }
  });

  /**
   * Takes a connection (a TCP one, or a TLS one once its handshake is done)
   * to the side its protocol is for: the one ALPN chose, else the one its
   * first bytes speak.
   */
  const accept = (socket: Socket, negotiated?: "http/1.1" | "h2") => {
    sockets.add(socket);
    undecided.add(socket);
    // A fixed deadline, not an idle timer: a client trickling a byte at a
    // time must not hold the connection either.
    const prefaceTimer = setTimeout(() => socket.destroy(), limits.prefaceTimeoutMs);
    socket.once("close", () => {
      clearTimeout(prefaceTimer);
      sockets.delete(socket);
      undecided.delete(socket);
    });
    const handOff = (protocol: "http/1.1" | "h2") => {
      clearTimeout(prefaceTimer);
      undecided.delete(socket);
      if (protocol === "h2") {
        http2Sockets.add(socket);
        socket.once("close", () => {
          http2Sockets.delete(socket);
          if (http2Sockets.size === 0) onHttp2Drained?.();
        });
        injector.injectConnection(socket);
        return;
      }
      http1Sockets.set(socket, { owed: undefined });
      socket.once("close", () => {
        http1Sockets.delete(socket);
        if (http1Sockets.size === 0) onHttp1Drained?.();
      });
      httpServer.emit("connection", socket);
    };
    if (negotiated) handOff(negotiated);
    else routeByPreface(socket, handOff);
  };

  // Responses go out as soon as they are written (Nagle off), as Node's own
  // HTTP server sets for the connections it accepts; this listener accepts
  // them for both sides.
  let tcp: TcpServer;
  if (deps.tls) {
    tcp = createTlsServer({
      cert: deps.tls.cert,
      key: deps.tls.key,
      ALPNProtocols: ["h2", "http/1.1"],
      handshakeTimeout: limits.prefaceTimeoutMs,
      noDelay: true,
    });
    // The TCP sockets under the TLS ones, so that a drain's end closes the
    // ones still in their handshake too.
    tcp.on("connection", (raw: Socket) => {
      sockets.add(raw);
      raw.once("close", () => sockets.delete(raw));
    });
    tcp.on("secureConnection", (socket: TLSSocket) => {
      const alpn = socket.alpnProtocol;
      accept(socket, alpn === "h2" || alpn === "http/1.1" ? alpn : undefined);
    });
  } else {
    tcp = createTcpServer({ noDelay: true }, (socket) => accept(socket));
  }
  // Node refuses connections past this at once (it closes them on accept).
  tcp.maxConnections = limits.maxConnections;

  return {
    listen(port, host) {
      return new Promise((resolve, reject) => {
        tcp.once("error", reject);
        tcp.listen(port, host, () => {
          tcp.off("error", reject);
          // Node's HTTP server enforces headersTimeout and requestTimeout,
          // and finds idle connections, only through the connection list it
          // sets up on 'listening'. This one never listens (the router hands
          // it sockets), so it is told the port is open.
          httpServer.emit("listening");
          const address = tcp.address();
          resolve(typeof address === "object" && address ? address.port : port);
        });
      });
    },

    async close(graceMs) {
      draining = true;
      // Streams never finish by themselves (a watch) or take long (an
      // export): they end now, with UNAVAILABLE, rather than hold the drain
      // for its whole grace. Their connections then close as other calls'.
      deps.http.endStreams();
      const listenerClosed = new Promise<void>((resolve) => tcp.close(() => resolve()));
      for (const socket of undecided) socket.destroy();

      const http1Drained = new Promise<void>((resolve) => {
        onHttp1Drained = resolve;
        if (http1Sockets.size === 0) resolve();
      });
      for (const [socket, { owed }] of http1Sockets) if (owed) closeAfter(owed, socket);
      // Connections between requests would otherwise wait for their keep-alive timeout.
      httpServer.closeIdleConnections();
      // Sends every HTTP/2 connection a GOAWAY; its open streams go on.
      const grpcShutDown = new Promise<void>((resolve) => deps.grpc.tryShutdown(() => resolve()));
      const http2Drained = new Promise<void>((resolve) => {
        onHttp2Drained = resolve;
        if (http2Sockets.size === 0) resolve();
      });

      const everyDrain = Promise.all([http1Drained, grpcShutDown, http2Drained]);
      const drained = await settlesWithin(everyDrain, graceMs);
      if (!drained) deps.grpc.forceShutdown();
      for (const socket of sockets) socket.destroy();
      // Fastify's own close (its onClose hooks) once nothing uses it any more.
      await deps.http.close();
      await listenerClosed;
    },
  };
}

/** Requests pipelined behind a busy one once the drain began (see the request listener). */
const refusedByDrain = new WeakSet<IncomingMessage>();

/** Whether a request came, pipelined, on a connection the drain is closing: it must not run. */
export function isRefusedByDrain(request: IncomingMessage): boolean {
  return refusedByDrain.has(request);
}

/**
 * An HTTP/1.1 connection serving a stream is not idle while the stream is
 * quiet (a watch with nothing new): its idle timeout (HTTP_IDLE_TIMEOUT)
 * is off until the response is done, then back. HTTP/2 streams have no
 * such timeout.
 */
export function holdOpenWhileStreaming(
  request: IncomingMessage | Http2ServerRequest,
  response: ServerResponse | Http2ServerResponse,
): void {
  if (request.httpVersionMajor !== 1) return;
  const { socket } = request as IncomingMessage;
  const idleMs = socket.timeout ?? 0;
  socket.setTimeout(0);
  // Ahead of Node's own listener, which sets the keep-alive timeout once a response is done.
  (response as ServerResponse).prependOnceListener("finish", () => socket.setTimeout(idleMs));
}

/** Header, request, keep-alive and idle timeouts of the HTTP/1.1 side. */
function applyHttp1Limits(server: HttpServer, limits: ConnectionConfig): void {
  server.headersTimeout = limits.headersTimeoutMs;
  server.requestTimeout = limits.requestTimeoutMs;
  server.keepAliveTimeout = limits.keepAliveTimeoutMs;
  server.timeout = limits.idleTimeoutMs;
  // How often Node looks for requests past those timeouts (30 s by default,
  // which would let a slow client overstay a 10 s limit threefold).
  (server as HttpServer & { connectionsCheckingInterval: number }).connectionsCheckingInterval =
    Math.max(50, Math.min(1000, Math.min(limits.headersTimeoutMs, limits.requestTimeoutMs) / 4));
}

/**
 * Ends an HTTP/1.1 connection after this response: by `Connection: close`
 * while its headers are unsent, else (they said keep-alive) once it is done.
 */
function closeAfter(response: ServerResponse, socket: Socket): void {
  if (!response.headersSent) response.setHeader("connection", "close");
  else response.once("close", () => socket.end());
}

/** Whether `promise` settles within `ms`. */
async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([promise.then(() => true), timedOut]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Which protocol the first bytes speak: HTTP/2 once the whole client preface
 * (the magic string and its SETTINGS frame) is in, HTTP/1.1 as soon as they
 * differ from the magic; undefined while more bytes are needed.
 */
function protocolOf(received: Buffer): "http/1.1" | "h2" | undefined {
  const compared = Math.min(received.length, http2Preface.length);
  if (!received.subarray(0, compared).equals(http2Preface.subarray(0, compared))) {
    return "http/1.1";
  }
  const settingsAt = http2Preface.length;
  if (received.length < settingsAt + frameHeaderLength) return undefined;
  const length = received.readUIntBE(settingsAt, 3);
  // Anything else than a SETTINGS frame of a valid size is for the HTTP/2
  // stack to refuse, with the error the protocol prescribes.
  if (received[settingsAt + 3] !== settingsFrameType || length > initialMaxFrameSize) return "h2";
  return received.length >= settingsAt + frameHeaderLength + length ? "h2" : undefined;
}

/**
 * Reads until the first bytes tell HTTP/2 from HTTP/1.1, puts them back and
 * hands the socket on. A socket that closes before that is dropped.
 */
function routeByPreface(socket: Socket, handOff: (protocol: "http/1.1" | "h2") => void): void {
  let received = Buffer.alloc(0);
  const onData = (chunk: Buffer) => {
    received = Buffer.concat([received, chunk]);
    const protocol = protocolOf(received);
    if (!protocol) return;
    socket.off("data", onData);
    socket.pause();
    socket.unshift(received);
    handOff(protocol);
    // The HTTP/2 session reads what is buffered itself (it takes over the
    // socket's handle); resuming would flush those bytes to no listener.
    // The HTTP/1.1 parser listens for 'data', so that side flows again.
    if (protocol === "http/1.1") socket.resume();
  };
  socket.on("data", onData);
  socket.once("error", () => socket.destroy());
}
