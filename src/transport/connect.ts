import type { Interceptor } from "@connectrpc/connect";
import { fastifyConnectPlugin } from "@connectrpc/connect-fastify";
import type { FastifyInstance } from "fastify";
import { tenantKey } from "../services/context.js";
import type { Authenticator } from "./auth.js";
import { type ErrorLogger, toConnectError } from "./errors.js";
import type { ServiceRegistration } from "./routes.js";

/**
 * Serves the Connect protocol (JSON and binary) and gRPC-Web over HTTP/1.1 on
 * the Fastify instance, with authentication in an interceptor.
 */
export async function registerConnect(
  app: FastifyInstance,
  deps: {
    registrations: readonly ServiceRegistration[];
    authenticator: Authenticator;
    log: ErrorLogger;
    maxBodyBytes: number;
  },
): Promise<void> {
  const authenticate: Interceptor = (next) => async (request) => {
    try {
      const tenant = await deps.authenticator.authenticate(
        request.method,
        request.header.get("authorization"),
      );
      if (tenant) request.contextValues.set(tenantKey, tenant);
    } catch (error) {
      throw toConnectError(error, request.method.name, deps.log);
    }
    return next(request);
  };
  await app.register(fastifyConnectPlugin, {
    routes(router) {
      for (const { service, impl } of deps.registrations) router.service(service, impl);
    },
    interceptors: [authenticate],
    grpc: false,
    grpcWeb: true,
    connect: true,
    readMaxBytes: deps.maxBodyBytes,
  });
}
