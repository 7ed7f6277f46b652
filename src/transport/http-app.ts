import { type ServerResponse, STATUS_CODES } from "node:http";
import type { Duplex } from "node:stream";
import { Code } from "@connectrpc/connect";
import Fastify, {
  type FastifyBaseLogger,
  type FastifyError,
  type FastifyInstance,
  type FastifyRequest,
  LogController,
} from "fastify";
import type { Logger } from "pino";
import type { Registry } from "prom-client";
import type { CorsOrigins } from "../config.js";
import { secretsEqual } from "../domain/api-keys.js";
import type { Store } from "../store/store.js";
import type { ClientAddressOf } from "./client-address.js";
import { registerConnect } from "./connect.js";
import { registerCors } from "./cors.js";
import { registerDashboard } from "./dashboard.js";
import { registerDocs } from "./docs.js";
import {
  type ErrorLogger,
  httpError,
  httpStatusOf,
  restErrorBody,
  restErrorText,
  shuttingDownError,
  toConnectError,
} from "./errors.js";
import { registerLinks } from "./links.js";
import { registerOpenApi } from "./openapi.js";
import { endStreams, type Pipeline, type ServiceRegistration } from "./pipeline.js";
import type { RateLimits } from "./rate-limit.js";
import { type RegisteredRestRoute, registerRest } from "./rest/plugin.js";
import { isRefusedByDrain } from "./server.js";

/** Options of the HTTP side (everything but gRPC). */
export interface HttpAppOptions {
  readonly registrations: readonly ServiceRegistration[];
  readonly pipeline: Pipeline;
  readonly store: Store;
  readonly log: ErrorLogger;
  readonly logger: Logger;
  /** What `GET /metrics` serves, to callers with `metricsToken`. */
  readonly metrics: Pick<Registry, "contentType" | "metrics">;
  readonly metricsToken: string | undefined;
  /**
   * Checks a credential against the failed-authentication limit of its
   * address (see `RateLimits.checkCredential`): a wrong metrics token counts.
   */
  readonly checkCredential: RateLimits["checkCredential"];
  readonly maxBodyBytes: number;
  /** True once the service is draining: `/readyz` answers 503. */
  readonly isDraining?: () => boolean;
  /** False until the service is ready (see `App.listen`): `/readyz` answers 503 meanwhile. */
  readonly isReady?: () => boolean;
  /** Why the store refuses writes now, if it does: `/readyz` answers 503 meanwhile. */
  readonly writesRefused?: () => string | undefined;
  /** The origins browsers may call from; `*` when unset. */
  readonly corsOrigins?: CorsOrigins;
  /** The client's address, from the peer and the headers of trusted proxies (TRUSTED_PROXIES). */
  readonly clientAddressOf: ClientAddressOf;
  /** What `/r/{code}` needs: the store, the clock, the network keys' box, its limit. */
  readonly links?: Parameters<typeof registerLinks>[1];
}

declare module "fastify" {
  interface FastifyRequest {
    /** The client's address for limits and logs (see `ClientAddressOf`). */
    readonly clientAddress: string;
  }
  interface FastifyInstance {
    /**
     * The drain's first step: ends every stream the pipeline serves, on
     * every protocol (gRPC's too), and opens no more (see `endStreams`).
     */
    endStreams(): void;
  }
}

/**
 * The Fastify instance for every HTTP/1.1 request and every HTTP/2 stream that is not gRPC: CORS, REST routes,
 * Connect and gRPC-Web, `/healthz`, `/readyz`, `/openapi.json` and `/docs`,
 * and one error handler that writes every REST error body. It does not listen; `createServer` hands it
 * connections.
 */
export async function buildHttpApp(options: HttpAppOptions): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: options.logger as FastifyBaseLogger,
    // Every RPC is logged once, by the pipeline, on every protocol.
    logController: new LogController({ disableRequestLogging: true }),
    // Fastify's own lines (framework errors) need no per-request child
    // logger: making one cost every request about a microsecond.
    childLoggerFactory: (logger) => logger,
    bodyLimit: options.maxBodyBytes,
    // The router's own refusals (a malformed or too long path) come before
    // any route: they get the error handler's body like every other error.
    frameworkErrors: (error, request, reply) =>
      reply.server.errorHandler(routerError(error, reply.server), request, reply),
    clientErrorHandler: answerClientError,
  });
  const { clientAddressOf } = options;
  app.decorateRequest("clientAddress", {
    getter(this: FastifyRequest): string {
      const { headers } = this;
      return clientAddressOf(this.socket.remoteAddress ?? "", (name) => {
        const value = headers[name];
        return Array.isArray(value) ? value.join(", ") : value;
      });
    },
  });
  app.decorate("endStreams", () => endStreams(options.pipeline));
  // A callback hook, not an async one: it runs on every request.
  app.addHook("onRequest", (request, _reply, done) => {
    if (!isRefusedByDrain(request.raw)) return done();
    done(shuttingDownError());
  });
  // Only the REST and Connect scopes read bodies, with parsers of their own;
  // without one here, a JSON body sent to no route is a 404, not a parse error.
  app.removeContentTypeParser("application/json");
  // First, so its hook answers preflights ahead of every route registered below.
  await registerCors(app, {
    origins: options.corsOrigins ?? "*",
    registrations: options.registrations,
  });

  app.get("/healthz", async () => ({ status: "ok" }));
  app.get("/readyz", async (_request, reply) => {
    if (options.isDraining?.()) return reply.code(503).send({ status: "draining" });
    if (options.isReady?.() === false) return reply.code(503).send({ status: "starting" });
    // A load balancer sends writes elsewhere while this store cannot take them.
    const refused = options.writesRefused?.();
    if (refused !== undefined)
      return reply.code(503).send({ status: "unavailable", reason: refused });
    try {
      await options.store.ping();
      return { status: "ok" };
    } catch (error) {
      options.log(error, "readyz");
      return reply.code(503).send({ status: "unavailable" });
    }
  });
  registerOpenApi(app);
  await registerDocs(app);
  registerDashboard(app);
  if (options.links) registerLinks(app, options.links);

  app.get("/metrics", async (request, reply) => {
    if (!options.metricsToken) {
      throw httpError(404, "metrics are off: set METRICS_TOKEN to serve them");
    }
    const { metricsToken } = options;
    const credential = request.headers.authorization?.replace(/^bearer\s+/i, "") ?? "";
    const limits = { responseHeaders: new Map<string, string>() };
    let valid: boolean;
    try {
      valid = await options.checkCredential(limits, request.clientAddress, () =>
        secretsEqual(credential, metricsToken),
      );
    } finally {
      // The failure limit's headers, as on an API call's 401 or 429.
      for (const [name, value] of limits.responseHeaders) reply.header(name, value);
    }
    if (!valid) throw httpError(401, "metrics need the METRICS_TOKEN as a bearer token");
    return reply.type(options.metrics.contentType).send(await options.metrics.metrics());
  });

  app.setErrorHandler((error, request, reply) => {
    const connectError = toConnectError(error, `${request.method} ${request.url}`, options.log);
    for (const [name, value] of connectError.metadata) reply.header(name, value);
    return reply.code(httpStatusOf(connectError, error)).send(restErrorBody(connectError));
  });

  // Registered after the error handler, so their scopes inherit it.
  const restRoutes = await registerRest(app, options);
  await registerConnect(app, options);

  app.setNotFoundHandler(async (request, reply) => {
    const path = request.url.split("?")[0] ?? "";
    const allowed = allowedVerbs(restRoutes, path);
    if (allowed.length > 0) {
      reply.header("allow", allowed.join(", "));
      throw httpError(
        405,
        `${request.method} is not allowed on ${path}; use ${allowed.join(" or ")}`,
      );
    }
    // A path is echoed as far as a real one could go, not the megabytes sent.
    const shown = path.length > 200 ? `${path.slice(0, 200)}...` : path;
    throw httpError(404, `no route for ${request.method} ${shown}`);
  });

  return app;
}

/** A router error as an HTTP error with a message of ours (Fastify's repeats the raw path). */
function routerError(error: FastifyError, app: FastifyInstance): Error {
  switch (error.code) {
    case "FST_ERR_MAX_PARAM_LENGTH":
      return httpError(
        414,
        `path has a segment longer than ${app.initialConfig.maxParamLength ?? 100} characters`,
      );
    case "FST_ERR_BAD_URL":
      return httpError(400, "path is not a valid URL path (a malformed %-escape)");
    default:
      return error;
  }
}

/**
 * Node's HTTP parser refuses what is not an HTTP/1.1 request (an unknown
 * method, a byte a header may not hold, a request line and headers over
 * Node's 16 KB, a request not sent in time) before Fastify has a request:
 * the answer, with the REST error body, is written on the socket, which is
 * then closed.
 */
function answerClientError(error: NodeJS.ErrnoException, socket: Duplex): void {
  if (error.code === "ECONNRESET" || socket.destroyed) return;
  const [status, code, message] =
    error.code === "ERR_HTTP_REQUEST_TIMEOUT"
      ? [408, Code.DeadlineExceeded, "the request was not received in time"]
      : error.code === "HPE_HEADER_OVERFLOW"
        ? [431, Code.ResourceExhausted, "the request line and headers are over 16 KB"]
        : [400, Code.InvalidArgument, "the request is not valid HTTP/1.1"];
  const body = restErrorText(message, code);
  // As Node's own handler: nothing is written into a response already under
  // way (a pipelined request's error would land inside its body).
  const inFlight = (socket as Duplex & { _httpMessage?: ServerResponse })._httpMessage;
  if (socket.writable && !inFlight?.headersSent) {
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nConnection: close\r\n` +
        `Content-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
  }
  socket.destroy();
}

function allowedVerbs(routes: readonly RegisteredRestRoute[], path: string): string[] {
  return [
    ...new Set(routes.filter(({ route }) => route.pattern.test(path)).map(({ verb }) => verb)),
  ];
}
