import type { FastifyInstance } from "fastify";
import { checkJsonDepth } from "../../contract/json-depth.js";
import { restSuccessStatus } from "../../contract/options.js";
import { limits } from "../../domain/limits.js";
import { CallContext, type Pipeline, type ServiceRegistration } from "../pipeline.js";
import { rpcsOf } from "../routes.js";
import { type HttpRoute, httpRouteOf } from "./http-rules.js";
import { requestReader, restJsonFromResponse } from "./transcode.js";

const jsonContentType = "application/json; charset=utf-8";

/** A REST route as registered, for 404/405 decisions. */
export interface RegisteredRestRoute {
  readonly verb: string;
  readonly route: HttpRoute;
}

/**
 * Registers one Fastify route per `google.api.http` annotation. A route only
 * transcodes: its request reader turns path, query and body into the RPC
 * request (inside the pipeline, after authentication), and the response is
 * written as the specification's JSON. Errors go to the app's error handler.
 */
export async function registerRest(
  app: FastifyInstance,
  deps: { registrations: readonly ServiceRegistration[]; pipeline: Pipeline },
): Promise<RegisteredRestRoute[]> {
  const registered: RegisteredRestRoute[] = [];
  await app.register(async (scope) => {
    // REST takes JSON only (other media types are 415); a POST whose JSON
    // body is empty reads as {}; anything else must parse, and nest no
    // deeper than `limits.jsonDepth` (see checkJsonDepth).
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser(
      "application/json",
      { parseAs: "string" },
      (_request, body, done) => {
        const text = (body as string).trim();
        if (text === "") return done(null, {});
        let json: unknown;
        try {
          json = JSON.parse(text);
        } catch {
          const error = Object.assign(new Error("the body is not valid JSON"), { statusCode: 400 });
          return done(error, undefined);
        }
        try {
          checkJsonDepth(json, limits.jsonDepth);
        } catch (error) {
          return done(error as Error, undefined);
        }
        done(null, json);
      },
    );
    for (const rpc of rpcsOf(deps.registrations)) {
      const route = httpRouteOf(rpc.method);
      if (!route) continue;
      const status = restSuccessStatus(rpc.method);
      const readRequest = requestReader(rpc.method.input, route);
      registered.push({ verb: route.verb, route });
      scope.route({
        method: route.verb as "GET",
        url: route.fastifyPath,
        handler: async (request, reply) => {
          const responseHeaders = new Map<string, string>();
          const output = await deps.pipeline({
            rpc,
            protocol: "rest",
            clientAddress: request.ip,
            responseHeaders,
            header: (name) => {
              const value = request.headers[name];
              return Array.isArray(value) ? value[0] : value;
            },
            decode: () =>
              readRequest({
                params: request.params as Record<string, string>,
                query: request.query as Record<string, string | string[] | undefined>,
                body: request.body,
              }),
            context: new CallContext(rpc.method, "rest", request.method, request.url, () =>
              headersOf(request.headers),
            ),
          });
          // Stringified here, with the type Fastify would set, so Fastify
          // sends the string as it is instead of inspecting and serializing.
          const json = restJsonFromResponse(rpc.method.output, route, output);
          for (const [name, value] of responseHeaders) reply.header(name, value);
          reply.code(status);
          if (json === undefined) return reply.send();
          return reply.type(jsonContentType).send(json);
        },
      });
    }
  });
  return registered;
}

function headersOf(raw: Record<string, string | string[] | undefined>): Headers {
  const headers = new Headers();
  for (const [name, value] of Object.entries(raw)) {
    if (value === undefined) continue;
    for (const item of Array.isArray(value) ? value : [value]) headers.append(name, item);
  }
  return headers;
}
