import {
  type DescField,
  type DescMessage,
  type DescMethod,
  type Message,
  ScalarType,
  toBinary,
  toJson,
} from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import * as grpc from "@grpc/grpc-js";
import test, { type ExecutionContext } from "ava";
import fc from "fast-check";
import { Access } from "../../gen/referral/v1/options_pb.js";
import { methodAccess } from "../../src/contract/options.js";
import { toPlain } from "../../src/contract/plain-codec.js";
import { httpRouteOf } from "../../src/transport/rest/http-rules.js";
import { arbitraryMessage } from "../helpers/arbitrary-messages.js";
import { contractServices } from "../helpers/contract.js";
import {
  grpcWebFrame,
  grpcWebStatus,
  internalText,
  isServerErrorCode,
  postRaw,
  type RawResponse,
} from "../helpers/hostile.js";
import { keys, useServer } from "../helpers/server.js";

/**
 * Random input for every RPC on every protocol: JSON (and text that is not
 * JSON) for every REST route, bytes (random, and valid messages with bytes
 * changed) for every Connect binary, Connect JSON, gRPC-Web and gRPC
 * method. Whatever comes in, the answer is a 4xx (a code Connect's table
 * puts below 500), within a timeout, with no internal text.
 *
 * Bounded to a few seconds; FUZZ_SEED replays a run (fast-check prints the
 * seed of a failure) and FUZZ_RUNS multiplies the runs for a longer search.
 */

// Rate limits would turn most calls into 429s before they reach a decoder.
const server = useServer({
  env: {
    RATE_LIMIT_PUBLIC: "off",
    RATE_LIMIT_SECRET: "off",
    RATE_LIMIT_ADMIN: "off",
    RATE_LIMIT_UNAUTHENTICATED: "off",
  },
});

const seed = process.env.FUZZ_SEED ? Number(process.env.FUZZ_SEED) : Date.now() % 2 ** 31;
const runs = (base: number) => base * Number(process.env.FUZZ_RUNS ?? 1);
const callTimeoutMs = 5000;

const methods = (await contractServices()).flatMap((service) => service.methods);

/** A field of free-form JSON (`google.protobuf.Struct`). */
function isFreeForm(field: DescField): boolean {
  return field.message?.typeName === "google.protobuf.Struct";
}

/** Methods, those that take free-form JSON five times as often as the others. */
function weightedMethods(candidates: readonly DescMethod[]): fc.Arbitrary<DescMethod> {
  return fc.oneof(
    ...candidates.map((method) => ({
      weight: method.input.fields.some(isFreeForm) ? 5 : 1,
      arbitrary: fc.constant(method),
    })),
  );
}

/** The credential that gets past authentication, so the input reaches the decoders. */
function keyOf(method: DescMethod): string {
  return methodAccess(method) === Access.ADMIN ? keys.admin : keys.secret;
}

/** Keys an attacker tries: engine operators, prototype names, paths, control characters. */
const nastyKeys = [
  "__proto__",
  "constructor",
  "prototype",
  "toString",
  "$where",
  "$set",
  "$$date",
  "a.b",
  "",
  "\u0000",
  "\u0001D",
];

/** JSON texts no generator writes by chance. */
const nastyJson = [
  "",
  "null",
  "[]",
  "1e400",
  '"\\ud800"',
  '{"a":-0}',
  `${"[".repeat(10_000)}${"]".repeat(10_000)}`,
  `${'{"a":'.repeat(2000)}1${"}".repeat(2000)}`,
  '{"__proto__":{"polluted":true}}',
  '{"constructor":{"prototype":{"polluted":true}}}',
];

const anyKey = fc.oneof(fc.string({ maxLength: 8 }), fc.constantFrom(...nastyKeys));
/** Free-form objects (Struct fields) with the keys above, nested. */
const anyObject = fc.dictionary(
  fc.oneof(
    { weight: 1, arbitrary: fc.string({ maxLength: 8 }) },
    {
      weight: 2,
      arbitrary: fc.constantFrom(...nastyKeys),
    },
  ),
  fc.oneof(
    fc.jsonValue({ maxDepth: 2 }),
    fc.dictionary(anyKey, fc.jsonValue({ maxDepth: 1 }), { maxKeys: 3 }),
  ),
  { maxKeys: 4 },
);
const anyValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }),
  anyObject,
  fc.constantFrom(1e308, -1, 2 ** 53, "2026-01-01T00:00:00Z", "\u0001D2026-01-01T00:00:00.000Z"),
);

/** The JSON form a protocol speaks: REST's plain form, or protobuf's canonical JSON (Connect). */
type JsonForm = "rest" | "connect";

/**
 * JSON objects for a message: a valid request (so calls get past the
 * required fields to deeper checks) with up to three entries set to
 * hostile values (a field by either name, or another key), or only such
 * entries.
 */
function jsonObject(method: DescMethod, form: JsonForm): fc.Arbitrary<Record<string, unknown>> {
  const schema = method.input;
  const entries = [
    ...schema.fields.map((field) =>
      isFreeForm(field)
        ? // Free-form fields are where hostile keys get stored: tried most.
          { weight: 5, arbitrary: fc.tuple(fc.constantFrom(field.jsonName, field.name), anyObject) }
        : { weight: 1, arbitrary: fc.tuple(fc.constantFrom(field.jsonName, field.name), anyValue) },
    ),
    { weight: 1, arbitrary: fc.tuple(anyKey, anyValue) },
  ];
  const valid = arbitraryMessage(schema)
    .map((message) => plausible(schema, message))
    .map((message) =>
      form === "rest"
        ? toPlain(schema, message)
        : (toJson(schema, message) as Record<string, unknown>),
    );
  return fc
    .tuple(
      fc.oneof({ weight: 3, arbitrary: valid }, { weight: 1, arbitrary: fc.constant({}) }),
      fc.array(fc.oneof(...entries), { maxLength: 3 }),
    )
    .map(([base, pairs]) => {
      const out = { ...base };
      // Defined, not assigned, so a "__proto__" key is a key.
      for (const [key, value] of pairs) {
        Object.defineProperty(out, key, {
          value,
          enumerable: true,
          writable: true,
          configurable: true,
        });
      }
      return out;
    });
}

/**
 * A random message made likelier to pass the first checks: strings not
 * blank, email fields an address. Then the hostile entries meet the checks
 * behind them.
 */
function plausible(schema: DescMessage, message: Message): Message {
  const values = message as unknown as Record<string, unknown>;
  for (const field of schema.fields) {
    if (field.fieldKind !== "scalar" || field.scalar !== ScalarType.STRING) continue;
    const value = values[field.localName];
    if (typeof value !== "string") continue;
    if (/email/i.test(field.name)) values[field.localName] = "fuzz@example.com";
    else if (value.trim() === "") values[field.localName] = "x";
  }
  return message;
}

/** JSON texts for a message: objects as above, any JSON, and text that is not JSON. */
function jsonText(method: DescMethod, form: JsonForm): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 4, arbitrary: jsonObject(method, form).map(stringify) },
    { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 3 }).map(stringify) },
    { weight: 1, arbitrary: fc.constantFrom(...nastyJson) },
    { weight: 1, arbitrary: fc.string({ maxLength: 40 }) },
  );
}

function stringify(value: unknown): string {
  return JSON.stringify(value) ?? "null";
}

/** Bytes for a message: random ones, and valid messages with bytes changed or cut. */
function messageBytes(method: DescMethod): fc.Arbitrary<Uint8Array> {
  const mutated = fc
    .tuple(
      arbitraryMessage(method.input, { lossy: true }).map((m) => toBinary(method.input, m)),
      fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { maxLength: 3 }),
      fc.option(fc.nat(), { nil: undefined }),
    )
    .map(([bytes, changes, cut]) => {
      const out = Uint8Array.from(bytes);
      for (const [at, byte] of changes) if (out.length > 0) out[at % out.length] = byte;
      return cut === undefined || out.length === 0 ? out : out.subarray(0, cut % out.length);
    });
  return fc.oneof(
    { weight: 2, arbitrary: mutated },
    {
      weight: 1,
      arbitrary: arbitraryMessage(method.input, { lossy: true }).map((m) =>
        toBinary(method.input, m),
      ),
    },
    { weight: 2, arbitrary: fc.uint8Array({ maxLength: 64 }) },
  );
}

/**
 * Fails the test when an answer is a 5xx or shows internal text. An answer
 * may quote what the caller sent ("campaign .js:0 not found" for the id
 * `.js:0`): a match found in `sent` is the caller's own text, not ours.
 */
function assertClientError(
  t: ExecutionContext,
  what: string,
  status: number,
  text: string,
  sent: string,
): boolean {
  const ours = [...text.matchAll(new RegExp(internalText.source, "g"))].filter(
    ([match]) => !sent.includes(match),
  );
  const ok = status < 500 && ours.length === 0;
  if (!ok) t.log(`${what} answered ${status}: ${text.slice(0, 500)}`);
  return ok;
}

/** What a caller sent, as the service may quote it back: URL-decoded, UTF-8. */
function sentText(url: string, body: string | Uint8Array | undefined): string {
  const decoded = url.replace(/(%[0-9A-Fa-f]{2})+/g, (run) => {
    try {
      return decodeURIComponent(run);
    } catch {
      return run;
    }
  });
  const bodyText =
    typeof body === "string" ? body : new TextDecoder().decode(body ?? new Uint8Array());
  return `${url}\n${decoded}\n${bodyText}`;
}

test.serial("REST: random JSON on every route is answered 4xx with no internal text", async (t) => {
  t.log(`seed ${seed}`);
  const routed = methods.filter((method) => httpRouteOf(method));
  const property = fc.asyncProperty(
    weightedMethods(routed).chain((method) =>
      fc.record({
        method: fc.constant(method),
        params: fc.array(
          fc.oneof(
            fc.string({ maxLength: 12 }).map(encodeURIComponent),
            fc.constantFrom("%", "%zz", "%E0%A4%A", "..", "x".repeat(120), "cus_1"),
          ),
          { minLength: 3, maxLength: 3 },
        ),
        // Now and then query parameters of any name (a body route takes none).
        query: fc.oneof(
          { weight: 4, arbitrary: fc.constant([]) },
          {
            weight: 1,
            arbitrary: fc.array(fc.tuple(anyKey, fc.string({ maxLength: 8 })), { maxLength: 2 }),
          },
        ),
        request: jsonObject(method, "rest"),
        // Now and then the body is any JSON text, or text that is not JSON.
        text: fc.option(jsonText(method, "rest"), { freq: 3, nil: undefined }),
        // Mostly with the key that reaches the decoders, sometimes none.
        withKey: fc.integer({ min: 0, max: 9 }).map((n) => n > 0),
      }),
    ),
    async ({ method, params, query, request, text, withKey }) => {
      const route = httpRouteOf(method);
      if (!route) return true;
      let index = 0;
      const path = route.template.replace(/\{[^}]+\}/g, () => params[index++] ?? "x");
      const search = new URLSearchParams(query);
      let body: string | undefined;
      if (route.body === "*") body = text ?? stringify(request);
      else if (route.body) body = text ?? stringify(request[route.body] ?? request);
      else {
        // No body: the request's fields go in the query, as REST reads them.
        for (const [name, value] of Object.entries(request)) {
          if (typeof value !== "object" || value === null) search.append(name, String(value));
        }
      }
      const url = `${path}${search.size > 0 ? `?${search}` : ""}`;
      const response = await postRaw(server, url, {
        method: route.verb,
        contentType: "application/json",
        body: route.verb === "GET" ? undefined : body,
        key: withKey ? keyOf(method) : undefined,
        timeoutMs: callTimeoutMs,
      }).catch(refusedOrHung(route.verb, url));
      return assertClientError(
        t,
        `${route.verb} ${url}`,
        response.status,
        response.text,
        sentText(url, body),
      );
    },
  );
  await fc.assert(property, { seed, numRuns: runs(400) });
  t.pass();
});

test.serial(
  "Connect: random bytes and JSON for every method are 4xx with no internal text",
  async (t) => {
    t.log(`seed ${seed}`);
    const property = fc.asyncProperty(
      weightedMethods(methods).chain((method) =>
        fc.record({
          method: fc.constant(method),
          binary: fc.boolean(),
          bytes: messageBytes(method),
          json: jsonText(method, "connect"),
        }),
      ),
      async ({ method, binary, bytes, json }) => {
        const path = `/${method.parent.typeName}/${method.name}`;
        const response = await postRaw(server, path, {
          contentType: binary ? "application/proto" : "application/json",
          body: binary ? bytes : json,
          key: keyOf(method),
          timeoutMs: callTimeoutMs,
        }).catch(refusedOrHung("POST", path));
        return assertClientError(
          t,
          `Connect ${path}`,
          response.status,
          response.text,
          sentText(path, binary ? bytes : json),
        );
      },
    );
    await fc.assert(property, { seed, numRuns: runs(500) });
    t.pass();
  },
);

test.serial("gRPC-Web: random frames for every method are 4xx with no internal text", async (t) => {
  t.log(`seed ${seed}`);
  const property = fc.asyncProperty(
    weightedMethods(methods).chain((method) =>
      fc.record({
        method: fc.constant(method),
        framed: fc.boolean(),
        bytes: messageBytes(method),
      }),
    ),
    async ({ method, framed, bytes }) => {
      const path = `/${method.parent.typeName}/${method.name}`;
      const response = await postRaw(server, path, {
        contentType: "application/grpc-web+proto",
        body: framed ? grpcWebFrame(bytes) : bytes,
        key: keyOf(method),
        timeoutMs: callTimeoutMs,
      }).catch(refusedOrHung("POST", path));
      if (response.status !== 200) {
        return assertClientError(
          t,
          `gRPC-Web ${path}`,
          response.status,
          response.text,
          sentText(path, bytes),
        );
      }
      const status = grpcWebStatus(response);
      return assertClientError(
        t,
        `gRPC-Web ${path}`,
        isServerErrorCode(status.code) ? 500 : 200,
        `${Code[status.code]}: ${status.message}`,
        sentText(path, bytes),
      );
    },
  );
  await fc.assert(property, { seed, numRuns: runs(300) });
  t.pass();
});

test.serial("gRPC: random bytes for every method are answered with client codes", async (t) => {
  t.log(`seed ${seed}`);
  const client = new grpc.Client(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure());
  try {
    const property = fc.asyncProperty(
      fc
        .constantFrom(...methods)
        .chain((method) => fc.record({ method: fc.constant(method), bytes: messageBytes(method) })),
      async ({ method, bytes }) => {
        const path = `/${method.parent.typeName}/${method.name}`;
        const metadata = new grpc.Metadata();
        metadata.set("authorization", keyOf(method));
        const error = await new Promise<grpc.ServiceError | null>((resolve) => {
          client.makeUnaryRequest(
            path,
            (value: Uint8Array) => Buffer.from(value),
            (value: Buffer) => value,
            bytes,
            metadata,
            { deadline: Date.now() + callTimeoutMs },
            (callError) => resolve(callError),
          );
        });
        if (error === null) return true;
        if (error.code === grpc.status.DEADLINE_EXCEEDED) {
          t.log(`gRPC ${path} did not answer within ${callTimeoutMs} ms`);
          return false;
        }
        return assertClientError(
          t,
          `gRPC ${path}`,
          isServerErrorCode(error.code as number as Code) ? 500 : 200,
          `${grpc.status[error.code]}: ${error.details}`,
          sentText(path, bytes),
        );
      },
    );
    await fc.assert(property, { seed, numRuns: runs(400) });
    t.pass();
  } finally {
    client.close();
  }
});

/** A request that timed out or lost its connection fails the run with what it was. */
function refusedOrHung(verb: string, path: string): (error: unknown) => RawResponse {
  return (error) => {
    const text = `${verb} ${path} got no answer: ${(error as Error).name} ${(error as Error).message}`;
    return { status: 599, headers: new Headers(), body: new Uint8Array(), text };
  };
}
