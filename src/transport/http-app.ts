import { Code, ConnectError } from "@connectrpc/connect";
import Fastify, { type FastifyInstance } from "fastify";
import type { Store } from "../store/store.js";
import type { Authenticator } from "./auth.js";
import { registerConnect } from "./connect.js";
import { codeName, type ErrorLogger, httpStatusByCode, restErrorBody } from "./errors.js";
import { type RegisteredRestRoute, registerRest } from "./rest/plugin.js";
import type { ServiceRegistration } from "./routes.js";

/** Options of the HTTP/1.1 side. */
export interface HttpAppOptions {
  readonly registrations: readonly ServiceRegistration[];
  readonly authenticator: Authenticator;
  readonly store: Store;
  readonly log: ErrorLogger;
  readonly logLevel: string;
  readonly maxBodyBytes: number;
}

/**
 * The Fastify instance for every HTTP/1.1 connection: REST routes, Connect
 * and gRPC-Web, `/healthz` and `/readyz`, and one error shape for all of it.
 * It does not listen; `createServer` hands it connections.
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
    if (error instanceof ConnectError) {
      return reply.code(httpStatusByCode[error.code]).send(restErrorBody(error));
    }
    // Fastify's own errors (body too large, bad JSON, unsupported media
    // type) carry a 4xx status and a safe message; anything else is ours.
    const status = (error as { statusCode?: number }).statusCode;
    if (status && status >= 400 && status < 500) {
      return reply.code(status).send({
        code:
          status === 413
            ? "resource_exhausted"
            : status === 401
              ? "unauthenticated"
              : "invalid_argument",
        message:
          status === 415 ? "Content-Type must be application/json" : (error as Error).message,
        details: [],
      });
    }
    options.log(error, `${request.method} ${request.url}`);
    return reply.code(500).send({ code: "internal", message: "internal error", details: [] });
  });

  // Registered after the error handler, so their scopes inherit it.
  const restRoutes = await registerRest(app, options);
  await registerConnect(app, options);

  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split("?")[0] ?? "";
    const allowed = allowedVerbs(restRoutes, path);
    if (allowed.length > 0) {
      return reply
        .code(405)
        .header("allow", allowed.join(", "))
        .send({
          code: codeName(Code.Unimplemented),
          message: `${request.method} is not allowed on ${path}; use ${allowed.join(" or ")}`,
          details: [],
        });
    }
    return reply
      .code(404)
      .send({ code: "not_found", message: `no route for ${request.method} ${path}`, details: [] });
  });

  return app;
}

function allowedVerbs(routes: readonly RegisteredRestRoute[], path: string): string[] {
  return [
    ...new Set(routes.filter(({ route }) => route.pattern.test(path)).map(({ verb }) => verb)),
  ];
}
