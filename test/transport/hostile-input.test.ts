import { gzipSync } from "node:zlib";
import { create, type DescMethod, toBinary } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import test, { type ExecutionContext } from "ava";
import { CustomersService } from "../../gen/referral/v1/customers_pb.js";
import { WebhooksService } from "../../gen/referral/v1/webhooks_pb.js";
import { sendWebhook } from "../../src/delivery/sender.js";
import { limits } from "../../src/domain/limits.js";
import { isPublicAddress, webhookUrlProblem } from "../../src/domain/webhook-delivery.js";
import { call, callMessage, type Outcome, wireProtocols } from "../helpers/callers.js";
import { engineNames } from "../helpers/engines.js";
import {
  grpcWebFrame,
  grpcWebStatus,
  internalText,
  postGrpcRaw,
  postRaw,
} from "../helpers/hostile.js";
import { type Json, keys, rest, startServer, useServer } from "../helpers/server.js";

/**
 * Input an attacker would send, each case refused with a 4xx (INVALID_ARGUMENT
 * on gRPC and Connect) that names the field, changes nothing and shows no
 * internal text. The fuzz test (fuzz.test.ts) then covers what no list does.
 */

// Many calls with one key in a second: rate limits are another test's subject.
const server = useServer({ env: { RATE_LIMIT_SECRET: "off", RATE_LIMIT_UNAUTHENTICATED: "off" } });
const identify = CustomersService.method.identifyCustomer;
const identifyPath = `/${CustomersService.typeName}/${identify.name}`;

/** A customer identified before the refused calls, to check they change nothing. */
let existing: Json;

test.serial.before(async () => {
  const response = await rest(server, "POST", "/customers/identify", {
    key: keys.secret,
    body: { externalUserId: "hostile-existing", name: "Kept", customProperties: { plan: "pro" } },
  });
  existing = response.body;
});

/** The number of customers, before a test's refused calls. */
async function customerCount(): Promise<number> {
  return (await rest(server, "GET", "/customers", { key: keys.secret })).body.total;
}

async function assertUnchanged(t: ExecutionContext, countBefore: number): Promise<void> {
  const now = await rest(server, "GET", `/customers/${existing.id}`, { key: keys.secret });
  t.deepEqual(now.body, existing, "the existing customer is unchanged");
  t.is(await customerCount(), countBefore, "no customer was created");
}

function assertRefused(t: ExecutionContext, outcome: Outcome, field: string): void {
  t.false(outcome.ok, "refused");
  if (outcome.ok) return;
  t.is(outcome.code, "invalid_argument", outcome.message);
  t.true(outcome.message.startsWith(`${field} `), outcome.message);
  t.notRegex(outcome.message, internalText);
}

/** A JSON object nested `depth` levels: `{"a":{"a":...1}}`. */
function nestedJson(depth: number): string {
  return `${'{"a":'.repeat(depth - 1)}{"a":1}${"}".repeat(depth - 1)}`;
}

/** A name, the customProperties JSON, the field the refusal names, and whether protobuf can carry it. */
const badProperties: Array<[string, string, string, boolean]> = [
  ["a nested key starting with $", '{"a":{"$b":1}}', "customProperties.a", true],
  ["a nested key with a dot", '{"a":{"b.c":1}}', "customProperties.a", true],
  ["a top-level key with a dot", '{"b.c":1}', "customProperties", true],
  ["a top-level operator", '{"$set":{"x":1}}', "customProperties", true],
  ["an engine's date tag", '{"a":{"$$date":0}}', "customProperties.a", true],
  ["a key in a list", '{"list":[1,{"$where":"x"}]}', "customProperties.list[1]", true],
  ["__proto__ at the top", '{"__proto__":{"polluted":true}}', "customProperties", true],
  ["__proto__ nested", '{"a":{"__proto__":{"polluted":true}}}', "customProperties.a", true],
  ["an empty key", '{"a":{"":1}}', "customProperties.a", true],
  ["a NUL in a key", '{"a\\u0000b":1}', "customProperties", true],
  ["a key of 257 characters", `{"${"k".repeat(257)}":1}`, "customProperties", true],
  [
    `more than ${limits.customPropertiesDepth} levels`,
    nestedJson(limits.customPropertiesDepth + 1),
    "customProperties",
    true,
  ],
  // The deepest a body may be: the service's check, not a decoder's, refuses it.
  [`${limits.jsonDepth - 1} levels`, nestedJson(limits.jsonDepth - 1), "customProperties", true],
  // Past the body's own limit, which names the same field; protobuf's
  // decoders stop at 100 nested messages, so the binary protocols cannot
  // carry these.
  ["thousands of levels", nestedJson(5000), "customProperties", false],
  [
    "hundreds of thousands of brackets",
    `{"a":${"[".repeat(400_000)}${"]".repeat(400_000)}}`,
    "customProperties",
    false,
  ],
];

for (const [name, properties, field, binary] of badProperties) {
  const json = `{"externalUserId":"hostile-existing","name":"Changed","customProperties":${properties}}`;
  test.serial(
    `customProperties with ${name}: refused naming ${field}, changing nothing`,
    async (t) => {
      const countBefore = await customerCount();
      // With an idempotency key too: its interceptor hashes the request before
      // the service sees it.
      for (const [path, headers] of [
        ["/customers/identify", {}],
        ["/customers/identify", { "idempotency-key": `hostile ${name}` }],
        [identifyPath, {}],
      ] as const) {
        const response = await postRaw(server, path, {
          contentType: "application/json",
          body: json,
          key: keys.secret,
          headers,
        });
        t.is(response.status, 400, `${path}: ${response.text.slice(0, 200)}`);
        const body = JSON.parse(response.text);
        assertRefused(t, { ok: false, code: body.code, message: body.message }, field);
        // Connect's details are google.rpc.BadRequest messages (base64); REST writes them out.
        if (path !== identifyPath) t.is(body.details[0]?.field, field);
      }
      if (binary) {
        for (const protocol of ["grpc", "connect-binary", "grpc-web"] as const) {
          const outcome = await call(server, protocol, identify, JSON.parse(json), keys.secret);
          assertRefused(t, outcome, field);
        }
      }
      await assertUnchanged(t, countBefore);
    },
  );
}

test.serial("customProperties at the depth limit is stored on every protocol", async (t) => {
  const properties = JSON.parse(nestedJson(limits.customPropertiesDepth));
  for (const protocol of wireProtocols) {
    const outcome = await call(
      server,
      protocol,
      identify,
      { externalUserId: `deep-${protocol}`, name: "Deep", customProperties: properties },
      keys.secret,
    );
    t.true(outcome.ok, protocol);
    if (outcome.ok) t.deepEqual(outcome.body.customProperties, properties, protocol);
  }
});

test.serial("a number that is not finite is refused on the binary protocols", async (t) => {
  const countBefore = await customerCount();
  for (const protocol of ["grpc", "connect-binary", "grpc-web"] as const) {
    for (const number of [Number.NaN, Number.POSITIVE_INFINITY]) {
      const outcome = await callMessage(
        server,
        protocol,
        identify,
        {
          externalUserId: "hostile-existing",
          name: "Changed",
          customProperties: { score: { nested: number } },
        },
        keys.secret,
      );
      assertRefused(t, outcome, "customProperties.score.nested");
    }
  }
  // JSON has no NaN, but 1e400 parses as Infinity.
  const response = await postRaw(server, "/customers/identify", {
    contentType: "application/json",
    key: keys.secret,
    body: '{"externalUserId":"hostile-existing","name":"C","customProperties":{"n":1e400}}',
  });
  t.is(response.status, 400);
  t.is(JSON.parse(response.text).details[0].field, "customProperties.n");
  await assertUnchanged(t, countBefore);
});

test.serial("__proto__ and constructor at the top of a body are both unknown fields", async (t) => {
  const countBefore = await customerCount();
  for (const key of ["__proto__", "constructor", "toString"]) {
    const json = `{"externalUserId":"hostile-existing","name":"Changed","${key}":{"x":1}}`;
    for (const path of ["/customers/identify", identifyPath]) {
      const response = await postRaw(server, path, {
        contentType: "application/json",
        body: json,
        key: keys.secret,
      });
      t.is(response.status, 400, `${path} ${key}: ${response.text}`);
      const body = JSON.parse(response.text);
      t.is(body.code, "invalid_argument");
      t.is(body.message, `${key} is not a known field`, path);
    }
  }
  await assertUnchanged(t, countBefore);
});

test.serial("a value of the wrong type on Connect JSON is refused in REST's words", async (t) => {
  const countBefore = await customerCount();
  for (const [json, message] of [
    ['{"externalUserId":"hostile-existing","name":7}', "name must be a string"],
    ['{"externalUserId":["x"],"name":"n"}', "externalUserId must be a string"],
    [
      '{"externalUserId":"x","name":"n","customProperties":[1]}',
      "customProperties must be an object",
    ],
    ["[]", "body must be a JSON object"],
    ["1e400", "body must be a JSON object"],
  ]) {
    for (const path of ["/customers/identify", identifyPath]) {
      const response = await postRaw(server, path, {
        contentType: "application/json",
        body: json as string,
        key: keys.secret,
      });
      t.is(response.status, 400, `${path} ${json}`);
      const body = JSON.parse(response.text);
      t.is(body.code, "invalid_argument");
      t.is(body.message, message, path);
    }
  }
  await assertUnchanged(t, countBefore);
});

test("keys that are names of Object.prototype round-trip, and values that look like the engine's tags are refused at the door", async (t) => {
  const properties = {
    constructor: { prototype: { polluted: true } },
    toString: "x",
    hasOwnProperty: 1,
    valueOf: [1, 2],
    iso: "2026-01-01T00:00:00.000Z",
    nested: { list: ["1970-01-01T00:00:00.000Z", { deep: "S" }, null] },
  };
  // The embedded engine tags dates with U+0001, a control character no text may hold.
  const tagLike = [
    [{ "\u0001D": "x" }, /^customProperties has the key .* must not contain control characters/],
    [
      { tagged: "\u0001D2026-01-01T00:00:00.000Z" },
      /^customProperties\.tagged must not contain control characters other than tab and newline \(it has U\+0001\)/,
    ],
    [
      { nested: { list: [{ deep: "\u0001S" }] } },
      /^customProperties\.nested\.list\[0\]\.deep must not contain control characters/,
    ],
  ] as const;
  for (const engine of engineNames) {
    const first = await startServer({ engine });
    let identifiedId = "";
    try {
      for (const [customProperties, message] of tagLike) {
        const refused = await rest(first, "POST", "/customers/identify", {
          key: keys.secret,
          body: { externalUserId: "tag-like", name: "Tags", customProperties },
        });
        t.is(refused.status, 400, `${engine} ${JSON.stringify(customProperties)}`);
        t.regex(refused.body.message, message);
      }
      const identified = await rest(first, "POST", "/customers/identify", {
        key: keys.secret,
        body: { externalUserId: "tags", name: "Tags", customProperties: properties },
      });
      t.is(identified.status, 201, engine);
      t.deepEqual(identified.body.customProperties, properties, `${engine}: as identified`);
      t.is(({} as Json).polluted, undefined);
      identifiedId = identified.body.id;
      if (engine === "mongodb") {
        const read = await rest(first, "GET", `/customers/${identifiedId}`, { key: keys.secret });
        t.deepEqual(read.body.customProperties, properties, "mongodb: read back");
      }
    } finally {
      await first.stop({ keepData: engine === "embedded" });
    }
    if (engine === "mongodb") continue;
    const second = await startServer({ dataDir: first.dataDir });
    try {
      const read = await rest(second, "GET", `/customers/${identifiedId}`, { key: keys.secret });
      t.deepEqual(read.body.customProperties, properties, "embedded: after a restart");
    } finally {
      await second.stop();
    }
  }
});

test.serial(
  "an undecodable Connect binary body is INVALID_ARGUMENT, and without a key UNAUTHENTICATED as on REST and gRPC",
  async (t) => {
    const countBefore = await customerCount();
    // Field 1 (a string) announcing 5 bytes and carrying one.
    const truncated = new Uint8Array([0x0a, 0x05, 0x61]);
    for (const [key, status, code, message] of [
      [keys.secret, 400, "invalid_argument", "the request is not a valid protobuf message"],
      [undefined, 401, "unauthenticated", "missing API key: send it in the Authorization header"],
    ] as const) {
      const response = await postRaw(server, identifyPath, {
        contentType: "application/proto",
        body: truncated,
        key,
      });
      t.is(response.status, status, response.text);
      const body = JSON.parse(response.text);
      t.is(body.code, code);
      t.is(body.message, message);
      t.notRegex(response.text, internalText);
    }
    for (const [encoding, bytes] of [
      ["gzip", new Uint8Array([1, 2, 3, 4])],
      ["gzip", new Uint8Array([0x1f, 0x8b, 8, 0, 0, 0])],
      ["br", new Uint8Array([0xff, 0xff, 0xff])],
    ] as const) {
      const response = await postRaw(server, identifyPath, {
        contentType: "application/proto",
        headers: { "content-encoding": encoding },
        body: bytes,
        key: keys.secret,
      });
      t.is(response.status, 400, `${encoding}: ${response.text}`);
      t.is(JSON.parse(response.text).message, `the body is not valid ${encoding} data`);
    }
    const json = await postRaw(server, identifyPath, {
      contentType: "application/json",
      headers: { "content-encoding": "gzip" },
      body: new Uint8Array([0x1f, 0x8b, 8]),
      key: keys.secret,
    });
    t.is(json.status, 400, json.text);
    await assertUnchanged(t, countBefore);
  },
);

test.serial("a compressed Connect or gRPC-Web body that is valid still works", async (t) => {
  const message = create(identify.input, { externalUserId: "gzipped", name: "Zip" });
  for (const [contentType, body] of [
    ["application/proto", toBinary(identify.input, message)],
    ["application/json", Buffer.from('{"externalUserId":"gzipped","name":"Zip"}')],
  ] as const) {
    const response = await postRaw(server, identifyPath, {
      contentType,
      headers: { "content-encoding": "gzip" },
      body: gzipSync(body),
      key: keys.secret,
    });
    t.is(response.status, 200, response.text);
  }
  const web = await postRaw(server, identifyPath, {
    contentType: "application/grpc-web+proto",
    headers: { "grpc-encoding": "gzip" },
    body: grpcWebFrame(gzipSync(toBinary(identify.input, message)), 0x01),
    key: keys.secret,
  });
  t.is(grpcWebStatus(web).code, 0 as Code, "gRPC-Web, a compressed envelope");
  const found = await rest(server, "GET", "/customers?externalUserId=gzipped", {
    key: keys.secret,
  });
  t.is(found.body.total, 1, "every call identified the one customer");
});

test.serial(
  "a Connect or gRPC-Web body that decompresses past the limit is refused in our words",
  async (t) => {
    const bomb = gzipSync(Buffer.alloc(2 * 1024 * 1024));
    const message = "message size is larger than the 1048576 bytes allowed once decompressed";
    const connect = await postRaw(server, identifyPath, {
      contentType: "application/proto",
      headers: { "content-encoding": "gzip" },
      body: bomb,
      key: keys.secret,
    });
    t.is(connect.status, 429, connect.text);
    t.deepEqual(JSON.parse(connect.text), { code: "resource_exhausted", message });
    const web = await postRaw(server, identifyPath, {
      contentType: "application/grpc-web+proto",
      headers: { "grpc-encoding": "gzip" },
      body: grpcWebFrame(bomb, 0x01),
      key: keys.secret,
    });
    t.deepEqual(grpcWebStatus(web), { code: Code.ResourceExhausted, message });
  },
);

test.serial("gRPC-Web framing that is not one whole message is INVALID_ARGUMENT", async (t) => {
  const countBefore = await customerCount();
  const valid = toBinary(
    identify.input,
    create(identify.input, { externalUserId: "w", name: "W" }),
  );
  const twoMessages = Buffer.concat([grpcWebFrame(valid), grpcWebFrame(valid)]);
  const cases: Array<[string, Uint8Array, string?]> = [
    ["an empty body", new Uint8Array()],
    ["half an envelope header", new Uint8Array([0, 0, 0])],
    ["an envelope cut off", grpcWebFrame(valid).subarray(0, 8)],
    ["two messages", twoMessages],
    ["a trailer frame", grpcWebFrame(valid, 0x80)],
    ["an unknown flag", grpcWebFrame(valid, 0x04)],
    ["a compressed flag without an encoding", grpcWebFrame(valid, 0x01)],
    ["a message that does not decode", grpcWebFrame(new Uint8Array([0x0a, 0x05, 0x61]))],
    ["JSON that does not parse", grpcWebFrame(Buffer.from("{nope")), "application/grpc-web+json"],
    [
      "JSON with an unknown field",
      grpcWebFrame(Buffer.from('{"nickname":"x"}')),
      "application/grpc-web+json",
    ],
  ];
  for (const [name, body, contentType] of cases) {
    const response = await postRaw(server, identifyPath, {
      contentType: contentType ?? "application/grpc-web+proto",
      body,
      key: keys.secret,
    });
    t.is(response.status, 200, name);
    const status = grpcWebStatus(response);
    t.is(status.code, Code.InvalidArgument, `${name}: ${status.message}`);
    t.notRegex(status.message, internalText, name);
  }
  await assertUnchanged(t, countBefore);
});

test.serial(
  "gRPC framing grpc-js refuses before any handler is answered in our words",
  async (t) => {
    const countBefore = await customerCount();
    const valid = toBinary(
      identify.input,
      create(identify.input, { externalUserId: "framed", name: "F" }),
    );
    const garbage = Buffer.from("hello");
    const cases: Array<[string, Uint8Array, Record<string, string>, Code, string]> = [
      ...(["gzip", "deflate"] as const).map(
        (encoding): [string, Uint8Array, Record<string, string>, Code, string] => [
          `${encoding} data that does not decompress`,
          grpcWebFrame(garbage, 0x01),
          { "grpc-encoding": encoding },
          Code.InvalidArgument,
          "the request message does not decompress with its grpc-encoding",
        ],
      ),
      [
        "no message",
        new Uint8Array(),
        {},
        Code.InvalidArgument,
        "the call sent no request message: it takes exactly one",
      ],
      [
        "a message cut off",
        grpcWebFrame(valid).subarray(0, 8),
        {},
        Code.InvalidArgument,
        "the call sent no request message: it takes exactly one",
      ],
      [
        "two messages",
        Buffer.concat([grpcWebFrame(valid), grpcWebFrame(valid)]),
        {},
        Code.InvalidArgument,
        "the call sent a second request message: it takes exactly one",
      ],
      [
        "bytes with no frame",
        Buffer.from("hello world garbage"),
        {},
        Code.ResourceExhausted,
        // The default MAX_BODY_BYTES: its length is read from the first bytes.
        "message size is larger than the 1048576 bytes allowed",
      ],
      [
        "a message that decompresses past the limit",
        grpcWebFrame(gzipSync(Buffer.alloc(2 * 1024 * 1024)), 0x01),
        { "grpc-encoding": "gzip" },
        Code.ResourceExhausted,
        "message size is larger than the 1048576 bytes allowed once decompressed",
      ],
      [
        "a grpc-timeout that is not one",
        grpcWebFrame(valid),
        { "grpc-timeout": "soon" },
        Code.InvalidArgument,
        "the grpc-timeout header is not a valid timeout",
      ],
    ];
    for (const [name, body, headers, code, message] of cases) {
      for (const key of [keys.secret, undefined]) {
        const status = await postGrpcRaw(server, identifyPath, { body, headers, key });
        t.is(status.code, code, `${name}: ${status.message}`);
        t.is(status.message, message, name);
        t.notRegex(status.message, internalText, name);
      }
    }
    await assertUnchanged(t, countBefore);
  },
);

test.serial("router errors answer the REST error body", async (t) => {
  const long = await rest(server, "GET", `/customers/${"x".repeat(150)}`, { key: keys.secret });
  t.is(long.status, 414);
  t.deepEqual(long.body, {
    code: "invalid_argument",
    message: "path has a segment longer than 100 characters",
    details: [],
  });
  const bad = await rest(server, "GET", "/customers/%E0%A4%A", { key: keys.secret });
  t.is(bad.status, 400);
  t.is(bad.body.code, "invalid_argument");
  t.regex(bad.body.message, /^path /);
  t.deepEqual(bad.body.details, []);
});

test.serial("what Node's HTTP parser refuses gets the REST error body", async (t) => {
  const longPath = `/customers/${"a".repeat(20_000)}`;
  for (const [request, status, code] of [
    ["FOO /customers HTTP/1.1\r\nHost: x\r\n\r\n", 400, "invalid_argument"],
    [
      "GET /customers HTTP/1.1\r\nHost: x\r\nIdempotency-Key: a\x7fb\r\n\r\n",
      400,
      "invalid_argument",
    ],
    [`GET ${longPath} HTTP/1.1\r\nHost: x\r\n\r\n`, 431, "resource_exhausted"],
  ] as const) {
    const answer = await rawHttp(server.port, request);
    t.regex(answer, new RegExp(`^HTTP/1\\.1 ${status} `), answer.slice(0, 80));
    const body = JSON.parse(answer.slice(answer.indexOf("\r\n\r\n") + 4));
    t.is(body.code, code);
    t.deepEqual(body.details, []);
    t.notRegex(answer, internalText);
  }
});

test.serial("Connect paths refuse another method or media type with the error body", async (t) => {
  for (const method of ["GET", "PUT", "DELETE"]) {
    const response = await postRaw(server, identifyPath, {
      method,
      contentType: "application/json",
      key: keys.secret,
      ...(method === "GET" ? {} : { body: "{}" }),
    });
    t.is(response.status, 405, method);
    t.is(response.headers.get("allow"), "POST");
    t.is(JSON.parse(response.text).code, "unimplemented");
  }
  for (const contentType of ["application/connect+json", "application/connect+proto"]) {
    const refused = await postRaw(server, identifyPath, {
      contentType,
      body: "{}",
      key: keys.secret,
    });
    t.is(refused.status, 415, contentType);
    t.is(JSON.parse(refused.text).code, "invalid_argument", contentType);
  }
  // A gRPC-Web client reads a status from trailers, sent here as headers (HTTP 200).
  const text = await postRaw(server, identifyPath, {
    contentType: "application/grpc-web-text",
    body: "AAAAAAA=",
    key: keys.secret,
  });
  t.like(grpcWebStatus(text), { code: Code.InvalidArgument });
  const plain = await postRaw(server, identifyPath, {
    contentType: "text/plain",
    body: "hello",
    key: keys.secret,
  });
  t.is(plain.status, 415);
  t.regex(
    JSON.parse(plain.text).message,
    /^Content-Type must be application\/json or application\/proto/,
  );
  const rest415 = await postRaw(server, "/customers/identify", {
    contentType: "text/plain",
    body: "hello",
    key: keys.secret,
  });
  t.is(rest415.status, 415);
  t.is(JSON.parse(rest415.text).message, "Content-Type must be application/json");
});

test.serial("a JSON body on a path with no route is 404, empty or not", async (t) => {
  for (const rawBody of ["", "{", '{"a":1}']) {
    for (const method of ["POST", "PUT", "DELETE"]) {
      const response = await rest(server, method, "/no/such/route", {
        key: keys.secret,
        rawBody,
      });
      t.is(response.status, 404, `${method} ${JSON.stringify(rawBody)}`);
      t.is(response.body.code, "not_found");
    }
  }
  const wrongVerb = await rest(server, "PUT", "/customers/identify", { rawBody: "" });
  t.is(wrongVerb.status, 405);
  const long = await rest(server, "GET", `/${"a".repeat(5_000)}`, { key: keys.secret });
  t.is(long.status, 404);
  t.is(long.body.message, `no route for GET /${"a".repeat(199)}...`, "the path is cut short");
});

/** Writes a request on a new connection as it is, and reads until the server closes it. */
async function rawHttp(port: number, request: string): Promise<string> {
  const { connect } = await import("node:net");
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1", () => socket.end(request));
    const chunks: Buffer[] = [];
    socket.on("data", (chunk) => chunks.push(chunk));
    socket.on("error", reject);
    socket.on("close", () => resolve(Buffer.concat(chunks).toString("utf8")));
    socket.setTimeout(5_000, () => socket.destroy());
  });
}

test.serial("webhook URLs on IPv4-compatible IPv6 addresses are refused", async (t) => {
  const createWebhook: DescMethod = WebhooksService.method.createWebhook;
  for (const url of [
    "http://[::127.0.0.1]/in",
    "http://[::7f00:1]/in",
    "http://[::10.0.0.1]/in",
    "http://[::8.8.8.8]/in",
    "http://localhost./in",
  ]) {
    for (const protocol of wireProtocols) {
      const outcome = await call(
        server,
        protocol,
        createWebhook,
        { url, environment: "test" },
        keys.secret,
      );
      assertRefused(t, outcome, "url");
    }
  }
  const listed = await rest(server, "GET", "/webhooks", { key: keys.secret });
  t.deepEqual(listed.body, [], "nothing stored");
  t.false(isPublicAddress("::127.0.0.1"));
  t.false(isPublicAddress("::1.2.3.4"));
  t.true(isPublicAddress("2001:4860:4860::8888"));
  t.true(isPublicAddress("8.8.8.8"));
  t.is(
    webhookUrlProblem("https://[::127.0.0.1]/", { requireHttps: true, allowPrivate: true }),
    undefined,
    "WEBHOOK_ALLOW_PRIVATE still allows it",
  );
  // At delivery time too (an endpoint stored before this rule, or a DNS answer).
  const sent = await sendWebhook({
    url: `http://[::127.0.0.1]:${server.port}/in`,
    headers: {},
    body: "{}",
    timeoutMs: 2000,
    allowPrivate: false,
  });
  t.is(sent.statusCode, null);
  t.regex(sent.error ?? "", /private, loopback or link-local/);
});
