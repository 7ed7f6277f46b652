import type { Message } from "@bufbuild/protobuf";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { checkJsonDepth } from "../../contract/json-depth.js";
import { restSuccessStatus } from "../../contract/options.js";
import { limits } from "../../domain/limits.js";
import { type ErrorLogger, httpError } from "../errors.js";
import { type Pipeline, type Rpc, type ServiceRegistration, TransportCall } from "../pipeline.js";
import { rpcsOf } from "../routes.js";
import { holdOpenWhileStreaming } from "../server.js";
import { type HttpRoute, httpRouteOf } from "./http-rules.js";
import { sendStream } from "./streams.js";
import { type RestRequestReader, requestReader, restBodyFromResponse } from "./transcode.js";

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
 * written as the specification's JSON, or for a server-streaming RPC as a
 * stream (see `sendStream`). Errors go to the app's error handler; on a
 * stream, those before its first message.
 */
export async function registerRest(
  app: FastifyInstance,
  deps: { registrations: readonly ServiceRegistration[]; pipeline: Pipeline; log: ErrorLogger },
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
      const streaming = rpc.method.methodKind === "server_streaming";
      registered.push({ verb: route.verb, route });
      scope.route({
        method: route.verb as "GET",
        url: route.fastifyPath,
        handler: async (request, reply) => {
          // `/customers/` is no customer's path: an empty segment is no id.
          const params = request.params as Record<string, string>;
          if (route.pathFields.some((field) => params[field.name] === "")) {
            throw httpError(404, `no route for ${request.method} ${request.url.split("?")[0]}`);
          }
          const call = new RestCall(rpc, request, readRequest);
          if (streaming) {
            // The client may leave while the stream opens, or at any time after.
            reply.raw.once("close", () => call.context.abort());
            holdOpenWhileStreaming(request.raw, reply.raw);
            await deps.pipeline(call);
            return sendStream(reply, call, route, deps.log);
          }
          const output = await deps.pipeline(call);
          // Encoded here, with the type Fastify would set, so Fastify sends
          // the text or bytes as they are instead of inspecting and serializing.
          const body = restBodyFromResponse(rpc.method.output, route, output);
          for (const [name, value] of call.responseHeaders) reply.header(name, value);
          reply.code(status);
          if (body === undefined) return reply.send();
          return reply.type(jsonContentType).send(body);
        },
      });
    }
    // A literal path is not a value of a template beside it: `GET
    // /customers/identify` is the identify path with the wrong method (405),
    // not GetCustomer of a customer "identify".
    for (const [template, allowed] of literalPaths(registered)) {
      for (const { verb } of registered) {
        const shadowed = registered.some(
          (other) =>
            other.verb === verb &&
            other.route.template !== template &&
            other.route.pattern.test(template),
        );
        if (allowed.includes(verb) || !shadowed) continue;
        if (scope.hasRoute({ method: verb as "GET", url: template })) continue;
        scope.route({
          method: verb as "GET",
          url: template,
          handler: async (request, reply) => {
            reply.header("allow", allowed.join(", "));
            throw httpError(
              405,
              `${request.method} is not allowed on ${template}; use ${allowed.join(" or ")}`,
            );
          },
        });
      }
    }
  });
  return registered;
}

/** The routes' paths without variables, each with the verbs served on it. */
function literalPaths(routes: readonly RegisteredRestRoute[]): Map<string, string[]> {
  const paths = new Map<string, string[]>();
  for (const { verb, route } of routes) {
    if (route.template.includes("{")) continue;
    const verbs = paths.get(route.template) ?? [];
    if (!verbs.includes(verb)) verbs.push(verb);
    paths.set(route.template, verbs);
  }
  return paths;
}

/** A REST call as the pipeline sees it. */
class RestCall extends TransportCall {
  constructor(
    rpc: Rpc,
    private readonly raw: FastifyRequest,
    private readonly readRequest: RestRequestReader,
  ) {
    super(rpc, "rest", raw.method, raw.url, () => headersOf(raw.headers));
  }

  private address: string | undefined;

  /** Kept once read: a connection closed after the response has no peer address left. */
  get clientAddress(): string {
    this.address ??= this.raw.clientAddress;
    return this.address;
  }

  header(name: string): string | undefined {
    const value = this.raw.headers[name];
    return Array.isArray(value) ? value[0] : value;
  }

  decode(): Message {
    return this.readRequest({
      params: this.raw.params as Record<string, string>,
      query: this.raw.query as Record<string, string | string[] | undefined>,
      body: this.raw.body,
    });
  }
}

function headersOf(raw: Record<string, string | string[] | undefined>): Headers {
  const headers = new Headers();
  for (const [name, value] of Object.entries(raw)) {
    // HTTP/2's pseudo-headers (`:method`, `:path`) are the request line, not headers.
    if (value === undefined || name.startsWith(":")) continue;
    for (const item of Array.isArray(value) ? value : [value]) headers.append(name, item);
  }
  return headers;
}
