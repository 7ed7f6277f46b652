import { cors as connectCors } from "@connectrpc/connect";
import fastifyCors from "@fastify/cors";
import type { FastifyInstance } from "fastify";
import type { CorsOrigins } from "../config.js";
import { idempotencyKeyHeader, idempotentReplayedHeader } from "./idempotency.js";
import type { ServiceRegistration } from "./pipeline.js";
import { httpRouteOf } from "./rest/http-rules.js";
import { rpcsOf } from "./routes.js";

/** The request headers of this service a browser may send, beyond Connect's own. */
const serviceRequestHeaders = ["authorization", idempotencyKeyHeader, "x-request-id"];

/**
 * The response headers the pipeline writes (request-log.ts, rate-limit.ts,
 * idempotency.ts) and an export's file name (ExportReferrals), which a page
 * can read only when they are exposed.
 */
const serviceResponseHeaders = [
  "x-request-id",
  "ratelimit",
  "ratelimit-policy",
  "retry-after",
  idempotentReplayedHeader,
  "content-disposition",
];

/** Chromium caps a cached preflight at two hours; longer would only be cut. */
const preflightMaxAgeSeconds = 7200;

/**
 * CORS on every HTTP path, with `@fastify/cors`: a preflight is answered
 * in its `onRequest` hook, before any route, so it needs no key and is never
 * counted by a rate limit, and every response to a browser (errors
 * included) carries `Access-Control-Allow-Origin` for an allowed origin. The methods and
 * headers are Connect's published lists (Connect and gRPC-Web), the REST
 * routes' verbs, and this service's own headers. Registered before the
 * routes, so its hook runs for all of them; `off` registers nothing.
 */
export async function registerCors(
  app: FastifyInstance,
  options: { origins: CorsOrigins; registrations: readonly ServiceRegistration[] },
): Promise<void> {
  if (options.origins === "off") return;
  const restVerbs = rpcsOf(options.registrations).flatMap(
    (rpc) => httpRouteOf(rpc.method)?.verb ?? [],
  );
  // A list, even of one origin, is matched and echoed: a refused origin
  // gets no Access-Control-Allow-Origin.
  const allowed = options.origins === "*" ? "*" : [...options.origins];
  await app.register(fastifyCors, {
    // Only browsers send Origin, and only they read CORS headers: servers,
    // apps and curl are spared ~250 bytes on every response. Responses then
    // vary on Origin, which the plugin says in a Vary header.
    origin: (origin, allow) => allow(null, origin === undefined ? false : allowed),
    // Keys travel in the Authorization header, which needs no credentials
    // mode, and the service sets no cookies: credentials are never allowed,
    // so never with a wildcard either.
    credentials: false,
    methods: [...new Set([...connectCors.allowedMethods, ...restVerbs])],
    allowedHeaders: [...connectCors.allowedHeaders, ...serviceRequestHeaders],
    exposedHeaders: [...new Set([...connectCors.exposedHeaders, ...serviceResponseHeaders])],
    maxAge: preflightMaxAgeSeconds,
  });
}
