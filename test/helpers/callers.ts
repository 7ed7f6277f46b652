import type { DescMethod } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { fromPlain, toPlain } from "../../src/contract/plain-codec.js";
import { httpRouteOf } from "../../src/transport/rest/http-rules.js";
import { connectClient, grpcCall, type Json, rest, type TestServer } from "./server.js";

/** The protocols a rule is checked on. */
export type Protocol = "rest" | "grpc" | "connect";

/** Every protocol, for tests that run once per protocol. */
export const protocols: readonly Protocol[] = ["rest", "grpc", "connect"];

/**
 * What a call returned, the same way on every protocol: the REST JSON of the
 * result (the `response_body` field where the route has one), or the error
 * code as REST spells it (`failed_precondition`) and its message.
 */
export type Outcome = { ok: true; body: Json } | { ok: false; code: string; message: string };

/**
 * Calls an RPC over a protocol with a request written as REST JSON. REST
 * takes the path, query and body from the method's `google.api.http` rule;
 * gRPC and Connect send the same request as a message.
 */
export async function call(
  server: TestServer,
  protocol: Protocol,
  method: DescMethod,
  request: Record<string, unknown>,
  key: string,
): Promise<Outcome> {
  const route = httpRouteOf(method);
  if (!route) throw new Error(`${method.name} has no REST route`);
  const unwrap = (body: Json) => (route.responseBody ? body[route.responseBody.jsonName] : body);
  if (protocol === "rest") {
    const remaining = { ...request };
    const path = route.template.replace(/\{([^}=]+)\}/g, (_match, name: string) => {
      const field = route.pathFields.find((f) => f.name === name);
      const value = remaining[field?.jsonName ?? name];
      delete remaining[field?.jsonName ?? name];
      return encodeURIComponent(String(value));
    });
    const hasBody = route.body !== "";
    const query = hasBody ? "" : `?${new URLSearchParams(remaining as Record<string, string>)}`;
    const response = await rest(server, route.verb, `${path}${query === "?" ? "" : query}`, {
      key,
      body: hasBody ? remaining : undefined,
    });
    if (response.status < 300) return { ok: true, body: response.body };
    return { ok: false, code: response.body.code, message: response.body.message };
  }
  const message = fromPlain(method.input, request);
  if (protocol === "grpc") {
    const outcome = await grpcCall(server, method, message, key);
    if (!outcome.ok) return { ok: false, code: codeWord(outcome.code), message: outcome.details };
    return { ok: true, body: unwrap(toPlain(method.output, outcome.message)) };
  }
  const client = connectClient(server, method.parent, { key }) as unknown as Record<
    string,
    (input: unknown) => Promise<never>
  >;
  try {
    const response = await (client[method.localName] as (input: unknown) => Promise<never>)(
      message,
    );
    return { ok: true, body: unwrap(toPlain(method.output, response)) };
  } catch (error) {
    const connectError = ConnectError.from(error);
    return { ok: false, code: codeWord(connectError.code), message: connectError.rawMessage };
  }
}

/** `Code.FailedPrecondition` as REST spells it: `failed_precondition`. */
function codeWord(code: Code): string {
  return Code[code].replace(/[A-Z]/g, (letter, at) => `${at ? "_" : ""}${letter.toLowerCase()}`);
}
