import { createServer as createTcpServer, type Socket, type Server as TcpServer } from "node:net";
import * as grpc from "@grpc/grpc-js";
import type { FastifyInstance } from "fastify";

/** Every connection an HTTP/2 client opens starts with this preface. */
const http2Preface = Buffer.from("PRI * HTTP/2.0");

/**
 * One TCP port for everything: a connection that opens with the HTTP/2
 * preface goes to grpc-js (gRPC, reflection, health); any other is HTTP/1.1
 * and goes to Fastify (REST, Connect, gRPC-Web).
 */
export interface SharedPortServer {
  /** Starts listening; resolves with the bound port. */
  listen(port: number, host: string): Promise<number>;
  /** Stops accepting, ends both sides, waits for in-flight calls (up to `graceMs`). */
  close(graceMs?: number): Promise<void>;
}

/** Creates the shared-port server over a grpc-js server and a ready Fastify app. */
export function createSharedPortServer(
  grpcServer: grpc.Server,
  app: FastifyInstance,
): SharedPortServer {
  const injector = grpcServer.createConnectionInjector(grpc.ServerCredentials.createInsecure());
  const sockets = new Set<Socket>();
  const tcp: TcpServer = createTcpServer((socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
    routeByPreface(socket, (isHttp2) => {
      if (isHttp2) injector.injectConnection(socket);
      else app.server.emit("connection", socket);
    });
  });

  return {
    listen(port, host) {
      return new Promise((resolve, reject) => {
        tcp.once("error", reject);
        tcp.listen(port, host, () => {
          tcp.off("error", reject);
          const address = tcp.address();
          resolve(typeof address === "object" && address ? address.port : port);
        });
      });
    },
    async close(graceMs = 5_000) {
      const listenerClosed = new Promise<void>((resolve) => tcp.close(() => resolve()));
      const grpcClosed = new Promise<void>((resolve) => grpcServer.tryShutdown(() => resolve()));
      injector.drain(graceMs);
      // Idle keep-alive sockets would otherwise hold the HTTP side open.
      app.server.closeIdleConnections();
      let forceTimer: NodeJS.Timeout | undefined;
      const forced = new Promise<void>((resolve) => {
        forceTimer = setTimeout(() => {
          for (const socket of sockets) socket.destroy();
          grpcServer.forceShutdown();
          resolve();
        }, graceMs);
      });
      await Promise.race([Promise.all([app.close(), grpcClosed]), forced]);
      clearTimeout(forceTimer);
      for (const socket of sockets) socket.destroy();
      grpcServer.forceShutdown();
      await app.close();
      await listenerClosed;
    },
  };
}

/**
 * Reads until the first bytes tell HTTP/2 from HTTP/1.1, puts them back and
 * hands the socket on. A socket that closes before saying anything is dropped.
 */
function routeByPreface(socket: Socket, handOff: (isHttp2: boolean) => void): void {
  let received = Buffer.alloc(0);
  const onData = (chunk: Buffer) => {
    received = Buffer.concat([received, chunk]);
    const compared = Math.min(received.length, http2Preface.length);
    const isHttp2 = received.subarray(0, compared).equals(http2Preface.subarray(0, compared));
    if (isHttp2 && received.length < http2Preface.length) return;
    socket.off("data", onData);
    socket.pause();
    socket.unshift(received);
    handOff(isHttp2);
    // The HTTP/2 session reads what is buffered itself (it takes over the
    // socket's handle); resuming would flush those bytes to no listener.
    // The HTTP/1.1 parser listens for 'data', so that side flows again.
    if (!isHttp2) socket.resume();
  };
  socket.on("data", onData);
  socket.once("error", () => socket.destroy());
}
