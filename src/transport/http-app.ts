import Fastify, { type FastifyInstance } from "fastify";
import type { Store } from "../store/store.js";
import { registerConnect } from "./connect.js";
import {
  type ErrorLogger,
  httpError,
  httpStatusOf,
  restErrorBody,
  toConnectError,
} from "./errors.js";
import type { Pipeline, ServiceRegistration } from "./pipeline.js";
import { type RegisteredRestRoute, registerRest } from "./rest/plugin.js";

/** Options of the HTTP/1.1 side. */
export interface HttpAppOptions {
  readonly registrations: readonly ServiceRegistration[];
  readonly pipeline: Pipeline;
  readonly store: Store;
  readonly log: ErrorLogger;
  readonly logLevel: string;
  readonly maxBodyBytes: number;
}

/**
 * The Fastify instance for every HTTP/1.1 connection: REST routes, Connect
 * and gRPC-Web, `/healthz` and `/readyz`, and one error handler that writes
 * every REST error body. It does not listen; `createServer` hands it
 * connections.
 */
export async function buildHttpApp(options: HttpAppOptions): Promise<FastifyInstance> {
  const app = Fastify({
    logger: options.logLevel === "silent" ? false : { level: options.logLevel },
    bodyLimit: options.maxBodyBytes,
  });

  app.get("/healthz", async () => ({ status: "ok" }));
  app.get("/readyz", async (_request, reply) => {
    try {
      await options.store.ping();
      return { status: "ok" };
    } catch (error) {
      options.log(error, "readyz");
      return reply.code(503).send({ status: "unavailable" });
    }
  });

  app.setErrorHandler((error, request, reply) => {
    const connectError = toConnectError(error, `${request.method} ${request.url}`, options.log);
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
    throw httpError(404, `no route for ${request.method} ${path}`);
  });

  return app;
}

function allowedVerbs(routes: readonly RegisteredRestRoute[], path: string): string[] {
  return [
    ...new Set(routes.filter(({ route }) => route.pattern.test(path)).map(({ verb }) => verb)),
  ];
}
