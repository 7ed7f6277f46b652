import {
  type Http2ServerRequest,
  type Http2ServerResponse,
  constants as http2Constants,
  type IncomingHttpHeaders,
  type ServerHttp2Stream,
} from "node:http2";
import { Server as NetServer } from "node:net";
import { Code } from "@connectrpc/connect";
import type * as grpc from "@grpc/grpc-js";
import { restErrorText } from "./errors.js";

/** What grpc-js's injector is given, and what routes each HTTP/2 stream. */
export interface Http2Injector {
  /** Hands a connection that opened with the HTTP/2 preface (cleartext or TLS with ALPN h2). */
  injectConnection(socket: import("node:net").Socket): void;
}

/** A request handler of the HTTP layer: Fastify's `routing`, which serves HTTP/1.1 and HTTP/2 alike. */
export type HttpRequestHandler = (
  request: Http2ServerRequest,
  response: Http2ServerResponse,
) => void;

/**
 * The connection injector of grpc-js, with its HTTP/2 streams shared out by
 * content type: a gRPC call (`application/grpc`, `application/grpc+proto`)
 * stays with grpc-js, whose sessions, keepalive, GOAWAY on shutdown and flow
 * control stay its own; any other stream (REST, Connect, gRPC-Web, health,
 * metrics, the docs) goes through Node's HTTP/2 compatibility layer to the
 * HTTP layer that serves HTTP/1.1, so both versions get one set of routes
 * and answers.
 *
 * grpc-js creates the HTTP/2 server its injector feeds and does not expose
 * it; it is found among the servers it tracks. The lock file pins grpc-js,
 * and the start fails (rather than serving gRPC alone) if an upgrade
 * changes this.
 */
export function createHttp2Injector(
  grpcServer: grpc.Server,
  credentials: grpc.ServerCredentials,
  http: HttpRequestHandler,
  limits: { requestTimeoutMs: number },
): Http2Injector {
  const tracked = (grpcServer as unknown as { http2Servers?: Map<unknown, unknown> }).http2Servers;
  const before = new Set(tracked?.keys() ?? []);
  const injector = grpcServer.createConnectionInjector(credentials);
  const created = [...(tracked?.keys() ?? [])].filter((server) => !before.has(server));
  const server = created[0];
  if (
    created.length !== 1 ||
    !(server instanceof NetServer) ||
    server.listenerCount("stream") !== 1
  ) {
    throw new Error(
      "@grpc/grpc-js no longer exposes the HTTP/2 server of its connection injector: " +
        "HTTP/2 streams cannot be shared with REST and Connect (see src/transport/http2-streams.ts)",
    );
  }
  const [grpcStreams] = server.listeners("stream") as StreamListener[];
  server.removeAllListeners("stream");
  // Node's compatibility layer adds its own 'stream' listener when the
  // first 'request' listener is added: it is taken out of the way too, and
  // the dispatcher below calls whichever of the two a stream is for.
  server.on("request", (request: Http2ServerRequest, response: Http2ServerResponse) => {
    if (!request.stream.endAfterHeaders) boundReceipt(request, response, limits.requestTimeoutMs);
    http(request, response);
  });
  const [compatibilityStreams] = server.listeners("stream") as StreamListener[];
  server.removeAllListeners("stream");
  if (!grpcStreams || !compatibilityStreams) {
    throw new Error("node:http2 did not set up its compatibility layer for the HTTP/2 server");
  }
  server.on("stream", function dispatch(this: NetServer, stream, headers, flags, rawHeaders) {
    const listener = isGrpcCall(headers) ? grpcStreams : compatibilityStreams;
    listener.call(this, stream, headers, flags, rawHeaders);
  } satisfies StreamListener);
  return { injectConnection: (socket) => injector.injectConnection(socket) };
}

type StreamListener = (
  this: NetServer,
  stream: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
  flags: number,
  rawHeaders: string[],
) => void;

/**
 * Whether an HTTP/2 stream is a gRPC call for grpc-js: what grpc-js itself
 * takes (a content type starting `application/grpc`), less gRPC-Web, which
 * the HTTP layer serves.
 */
export function isGrpcCall(headers: IncomingHttpHeaders): boolean {
  const contentType = headers["content-type"];
  return (
    typeof contentType === "string" &&
    contentType.startsWith("application/grpc") &&
    !contentType.startsWith("application/grpc-web")
  );
}

/**
 * HTTP/1.1's request timeout and body handling on an HTTP/2 stream. A
 * request whose body has not all arrived in time is answered 408 (with the
 * error body, as Node's parser answers on HTTP/1.1) and its stream
 * cancelled, so a client trickling a body cannot hold a stream. A body the
 * answer did not need (a 415, a 404) is read and dropped, as Node does on
 * HTTP/1.1: left unread, Node resets the stream as soon as the answer is
 * out, and a client still sending its body (curl 7.x among them) may take
 * that reset for a failure and drop the answer.
 */
function boundReceipt(
  request: Http2ServerRequest,
  response: Http2ServerResponse,
  timeoutMs: number,
): void {
  const timer = setTimeout(() => {
    if (request.readableEnded || request.stream.destroyed) return;
    if (!response.headersSent) {
      const body = restErrorText("the request was not received in time", Code.DeadlineExceeded);
      response.writeHead(408, { "content-type": "application/json; charset=utf-8" });
      // Cancelled once the answer is out: the rest of the body is not wanted.
      response.end(body, () => request.stream.close(http2Constants.NGHTTP2_CANCEL));
      return;
    }
    request.stream.close(http2Constants.NGHTTP2_CANCEL);
  }, timeoutMs);
  const done = () => clearTimeout(timer);
  request.once("end", done);
  request.stream.once("close", done);
  // Before the answer ends: Node decides whether to reset as it ends.
  const end = response.end as (...args: unknown[]) => Http2ServerResponse;
  response.end = ((...args: unknown[]) => {
    if (!request.readableEnded && request.readableFlowing === null) request.resume();
    return end.apply(response, args);
  }) as Http2ServerResponse["end"];
}
