import type { FastifyInstance } from "fastify";
import { restSuccessStatus } from "../../contract/options.js";
import type { Authenticator } from "../auth.js";
import { callContext } from "../call-context.js";
import { type ErrorLogger, httpStatusByCode, restErrorBody, toConnectError } from "../errors.js";
import { rpcsOf, type ServiceRegistration } from "../routes.js";
import { type HttpRoute, httpRouteOf } from "./http-rules.js";
import { requestReader, restJsonFromResponse } from "./transcode.js";

const jsonContentType = "application/json; charset=utf-8";

/** A REST route as registered, for 404/405 decisions. */
export interface RegisteredRestRoute {
  readonly verb: string;
  readonly route: HttpRoute;
}

/**
 * Registers one Fastify route per `google.api.http` annotation. Each route
 * authenticates, transcodes JSON to the RPC request, calls the same
 * implementation as gRPC and Connect, and writes the specification's JSON.
 * Returns the routes so the not-found handler can answer 405.
 */
export async function registerRest(
  app: FastifyInstance,
  deps: {
    registrations: readonly ServiceRegistration[];
    authenticator: Authenticator;
    log: ErrorLogger;
  },
): Promise<RegisteredRestRoute[]> {
  const registered: RegisteredRestRoute[] = [];
  await app.register(async (scope) => {
    // REST takes JSON only (other media types are 415); a POST whose JSON
    // body is empty reads as {}; anything else must parse.
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser(
      "application/json",
      { parseAs: "string" },
      (_request, body, done) => {
        const text = (body as string).trim();
        if (text === "") return done(null, {});
        try {
          done(null, JSON.parse(text));
        } catch {
          const error = Object.assign(new Error("the body is not valid JSON"), { statusCode: 400 });
          done(error, undefined);
        }
      },
    );
    for (const rpc of rpcsOf(deps.registrations)) {
      const route = httpRouteOf(rpc.method);
      if (!route) continue;
      const status = restSuccessStatus(rpc.method);
      const readRequest = requestReader(rpc.method.input, route);
      const name = `${rpc.service.typeName}/${rpc.method.name}`;
      registered.push({ verb: route.verb, route });
      scope.route({
        method: route.verb as "GET",
        url: route.fastifyPath,
        handler: async (request, reply) => {
          try {
            const tenant = await deps.authenticator.authenticate(
              rpc.method,
              request.headers.authorization,
            );
            const input = readRequest({
              params: request.params as Record<string, string>,
              query: request.query as Record<string, string | string[] | undefined>,
              body: request.body,
            });
            const output = await rpc.handler(
              input,
              callContext({
                service: rpc.service,
                method: rpc.method,
                protocolName: "rest",
                requestMethod: request.method,
                url: request.url,
                tenant,
              }),
            );
            // Stringified here, with the type Fastify would set, so Fastify
            // sends the string as it is instead of inspecting and serializing.
            const json = restJsonFromResponse(rpc.method.output, route, output);
            reply.code(status);
            if (json === undefined) return reply.send();
            return reply.type(jsonContentType).send(json);
          } catch (error) {
            const connectError = toConnectError(error, name, deps.log);
            return reply
              .code(httpStatusByCode[connectError.code])
              .send(restErrorBody(connectError));
          }
        },
      });
    }
  });
  return registered;
}
