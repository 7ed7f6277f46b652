import {
  type DescMethod,
  fromJson,
  type JsonObject,
  type Message,
  type MessageInitShape,
  toJson,
} from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-node";
import { fromPlain, toPlain } from "../../src/contract/plain-codec.js";
import { type HttpRoute, httpRouteOf } from "../../src/transport/rest/http-rules.js";
import {
  connectClient,
  grpcCall,
  type HttpVersion,
  http2SessionOf,
  httpFetch,
  type Json,
  rest,
  type TestServer,
} from "./server.js";
import { callStream } from "./streams.js";

/** The protocols a rule is checked on. */
export type Protocol = "rest" | "grpc" | "connect";

/** Every protocol, for tests that run once per protocol. */
export const protocols: readonly Protocol[] = ["rest", "grpc", "connect"];

/**
 * Every protocol the port serves: the three above, Connect binary and
 * gRPC-Web, over HTTP/1.1; and the four that are not gRPC again over
 * cleartext HTTP/2 (`-h2`). gRPC is HTTP/2 only.
 */
export type WireProtocol =
  | Protocol
  | "connect-binary"
  | "grpc-web"
  | "rest-h2"
  | "connect-h2"
  | "connect-binary-h2"
  | "grpc-web-h2";

/** Every protocol the port serves, on every HTTP version, for parity tests. */
export const wireProtocols: readonly WireProtocol[] = [
  "rest",
  "grpc",
  "connect",
  "connect-binary",
  "grpc-web",
  "rest-h2",
  "connect-h2",
  "connect-binary-h2",
  "grpc-web-h2",
];

/** A wire protocol's own protocol, and the HTTP version it is sent over. */
export function wireOf(protocol: WireProtocol): {
  base: Protocol | "connect-binary" | "grpc-web";
  httpVersion: HttpVersion;
} {
  return protocol.endsWith("-h2")
    ? { base: protocol.slice(0, -3) as Protocol, httpVersion: "2" }
    : { base: protocol as Protocol, httpVersion: "1.1" };
}

/**
 * What a call returned, the same way on every protocol: the REST JSON of the
 * result (the `response_body` field where the route has one), or the error
 * code as REST spells it (`failed_precondition`) and its message.
 */
export type Outcome = { ok: true; body: Json } | { ok: false; code: string; message: string };

/**
 * Calls an RPC over a protocol with a request written as REST JSON. REST
 * takes the path, query and body from the method's `google.api.http` rule;
 * the other protocols send the same request as a message. Without `key` the
 * call carries no credential.
 */
export async function call(
  server: TestServer,
  protocol: WireProtocol,
  method: DescMethod,
  request: Record<string, unknown>,
  key?: string,
): Promise<Outcome> {
  if (method.methodKind === "server_streaming") {
    // A stream's outcome: its messages (an export's whole body; a watch's
    // first update, then it is cancelled), or the error that opened it.
    const first = method.output.typeName === "google.api.HttpBody" ? undefined : 1;
    const outcome = await callStream(server, protocol, method, request, key, first);
    if (outcome.error && outcome.messages.length === 0) return { ok: false, ...outcome.error };
    return { ok: true, body: outcome };
  }
  const { base, httpVersion } = wireOf(protocol);
  if (base === "rest") return callRest(server, routeOf(method), request, key, httpVersion);
  return callMessage(
    server,
    protocol as Exclude<WireProtocol, "rest" | "rest-h2">,
    method,
    fromPlain(method.input, request),
    key,
  );
}

/**
 * Calls an RPC over a protocol other than REST with a request message, for
 * values REST JSON cannot write (an enum number the contract lacks).
 */
export async function callMessage<M extends DescMethod>(
  server: TestServer,
  protocol: Exclude<WireProtocol, "rest" | "rest-h2">,
  method: M,
  request: MessageInitShape<M["input"]>,
  key?: string,
): Promise<Outcome> {
  const unwrap = unwrapperOf(routeOf(method));
  const { base, httpVersion } = wireOf(protocol);
  if (base === "grpc") {
    const outcome = await grpcCall(server, method, request, key);
    if (!outcome.ok) return { ok: false, code: codeWord(outcome.code), message: outcome.details };
    return { ok: true, body: unwrap(toPlain(method.output, outcome.message)) };
  }
  const client = (base === "grpc-web"
    ? createClient(method.parent, grpcWebTransport(server, key, httpVersion))
    : connectClient(server, method.parent, {
        key,
        binary: base === "connect-binary",
        httpVersion,
      })) as unknown as Record<string, (input: unknown) => Promise<Message>>;
  try {
    const response = await (client[method.localName] as (input: unknown) => Promise<Message>)(
      request,
    );
    return { ok: true, body: unwrap(toPlain(method.output, response)) };
  } catch (error) {
    const connectError = ConnectError.from(error);
    return { ok: false, code: codeWord(connectError.code), message: connectError.rawMessage };
  }
}

/**
 * Calls an RPC over a JSON protocol with fields no typed client can send:
 * `extra` (an unknown field, an enum word the contract lacks) is added as
 * given to the request, REST JSON on REST, the Connect (proto3) JSON of
 * `request` on Connect, POSTed with fetch as the Connect protocol does.
 */
export async function callJson(
  server: TestServer,
  protocol: "rest" | "connect" | "rest-h2" | "connect-h2",
  method: DescMethod,
  request: Record<string, unknown>,
  extra: Record<string, unknown>,
  key?: string,
): Promise<Outcome> {
  const route = routeOf(method);
  const { base, httpVersion } = wireOf(protocol);
  if (base === "rest") {
    return callRest(server, route, { ...request, ...extra }, key, httpVersion);
  }
  const body = {
    ...(toJson(method.input, fromPlain(method.input, request)) as JsonObject),
    ...extra,
  };
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (key !== undefined) headers.authorization = key;
  const path = `/${method.parent.typeName}/${method.name}`;
  const response = await httpFetch(
    server,
    httpVersion,
    "POST",
    path,
    headers,
    JSON.stringify(body),
  );
  const json = (await response.json()) as Json;
  if (!response.ok) return { ok: false, code: json.code, message: json.message };
  return {
    ok: true,
    body: unwrapperOf(route)(toPlain(method.output, fromJson(method.output, json))),
  };
}

/** The REST call of a request: path variables, then the body or the query, per the route. */
async function callRest(
  server: TestServer,
  route: HttpRoute,
  request: Record<string, unknown>,
  key: string | undefined,
  httpVersion: HttpVersion,
): Promise<Outcome> {
  const remaining = { ...request };
  const path = route.template.replace(/\{([^}=]+)\}/g, (_match, name: string) => {
    const field = route.pathFields.find((f) => f.name === name);
    const value = remaining[field?.jsonName ?? name];
    delete remaining[field?.jsonName ?? name];
    return encodeURIComponent(String(value));
  });
  let body: unknown;
  if (route.body === "*") {
    body = { ...remaining };
    for (const name of Object.keys(remaining)) delete remaining[name];
  } else if (route.body !== "") {
    // The body is one field (a campaign); the other fields go in the query.
    const name = Object.keys(remaining).find((k) => snakeCase(k) === snakeCase(route.body));
    if (name !== undefined) {
      body = remaining[name];
      delete remaining[name];
    }
  }
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(remaining)) {
    for (const item of Array.isArray(value) ? value : [value]) query.append(name, String(item));
  }
  const search = query.size > 0 ? `?${query}` : "";
  const response = await rest(server, route.verb, `${path}${search}`, { key, body, httpVersion });
  if (response.status < 300) return { ok: true, body: response.body };
  return { ok: false, code: response.body.code, message: response.body.message };
}

function snakeCase(name: string): string {
  return name.replace(/[A-Z]/g, (letter) => `_${letter.toLowerCase()}`);
}

function routeOf(method: DescMethod): HttpRoute {
  const route = httpRouteOf(method);
  if (!route) throw new Error(`${method.name} has no REST route`);
  return route;
}

/** Takes the REST `response_body` field out of a response, where the route has one. */
function unwrapperOf(route: HttpRoute): (body: Json) => Json {
  return (body) => (route.responseBody ? body[route.responseBody.jsonName] : body);
}

/** A gRPC-Web transport over HTTP/1.1 or HTTP/2 that sends `key`, when given. */
export function grpcWebTransport(
  server: TestServer,
  key: string | undefined,
  httpVersion: HttpVersion,
): Transport {
  return createGrpcWebTransport({
    baseUrl: server.baseUrl,
    ...(httpVersion === "2"
      ? { httpVersion: "2", sessionManager: http2SessionOf(server) }
      : { httpVersion: "1.1", ...(server.ca ? { nodeOptions: { ca: server.ca } } : {}) }),
    interceptors:
      key === undefined
        ? []
        : [
            (next) => (request) => {
              request.header.set("authorization", key);
              return next(request);
            },
          ],
  });
}

/** `Code.FailedPrecondition` as REST spells it: `failed_precondition`. */
function codeWord(code: Code): string {
  return Code[code].replace(/[A-Z]/g, (letter, at) => `${at ? "_" : ""}${letter.toLowerCase()}`);
}
