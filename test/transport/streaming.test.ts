import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, type ServerResponse } from "node:http";
import { constants as http2Constants } from "node:http2";
import { type AddressInfo, connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { create, type Message } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type HandlerContext } from "@connectrpc/connect";
import { encodeEnvelope } from "@connectrpc/connect/protocol";
import test, { type ExecutionContext } from "ava";
import {
  InsightsService,
  WatchCampaignStatsResponseSchema,
} from "../../gen/referral/v1/insights_pb.js";
import { buildApp } from "../../src/app.js";
import { loadConfig } from "../../src/config.js";
import { register } from "../../src/transport/pipeline.js";
import { writeEvents } from "../../src/transport/rest/streams.js";
import { grpcWebTransport, type WireProtocol, wireProtocols } from "../helpers/callers.js";
import {
  closeGrpcClient,
  connectClient,
  type HttpVersion,
  http2SessionOf,
  type Json,
  keys,
  selfSignedCertificate,
  type TestServer,
} from "../helpers/server.js";
import {
  callStream,
  eventsOf,
  grpcStream,
  restPathOf,
  type StreamOutcome,
} from "../helpers/streams.js";
import { eventually } from "../helpers/wait.js";

/**
 * Server-streaming RPCs on every protocol and HTTP version, written once in
 * the pipeline: the messages and their end, an error before the first
 * message (the call's error) and after it (the stream's end), credentials
 * checked before anything is sent, a client that goes away (the
 * implementation is stopped and its `finally` runs), and the drain, which
 * ends open streams at once. InsightsService is served by a fake whose
 * request id (or campaign id) picks its behaviour.
 */

const run = promisify(execFile);
const watch = InsightsService.method.watchCampaignStats;
const exportReferrals = InsightsService.method.exportReferrals;
const metricsToken = "metrics-token-for-streaming";

/** What a test sees of a stream that only ends when stopped. */
interface Probe {
  /** Whether the implementation saw its signal abort. */
  aborted: boolean;
  /** Whether its `finally` ran. */
  done: boolean;
  /** Resolves once the implementation's `finally` ran. */
  readonly finished: Promise<void>;
  finish(): void;
}

const probes = new Map<string, Probe>();

function probeOf(id: string): Probe {
  let probe = probes.get(id);
  if (!probe) {
    let resolve = () => {};
    const finished = new Promise<void>((resolved) => {
      resolve = resolved;
    });
    const created: Probe = {
      aborted: false,
      done: false,
      finished,
      finish() {
        created.done = true;
        resolve();
      },
    };
    probe = created;
    probes.set(id, probe);
  }
  return probe;
}

function totals(count: number) {
  return {
    from: "2026-01-01T00:00:00Z",
    to: "2026-02-01T00:00:00Z",
    totals: { referralsCreated: BigInt(count) },
  };
}

function aborted(context: HandlerContext): Promise<void> {
  return new Promise((resolve) => {
    if (context.signal.aborted) resolve();
    else context.signal.addEventListener("abort", () => resolve(), { once: true });
  });
}

const csv = (text: string) => new TextEncoder().encode(text);
const unimplemented = async (): Promise<never> => {
  throw new ConnectError("not served by this test", Code.Unimplemented);
};

/**
 * The fake InsightsService. WatchCampaignStats by id: `missing` fails
 * before its first message; `fails-after-two` and `crashes-after-one` fail
 * after theirs (a ConnectError, then driver text that must not leak);
 * `empty` sends nothing;
 * `endless-*` sends one message and waits for its signal; `ticking-*`
 * sends a message every few milliseconds and never looks at its signal;
 * anything else sends three. ExportReferrals sends a CSV in three chunks,
 * with a Content-Disposition; campaign `missing` fails before, `fails`
 * after two chunks.
 */
const fakeInsights = register(InsightsService, {
  getCampaignStats: unimplemented,
  getApplicationStats: unimplemented,
  listTopReferrers: unimplemented,
  getPublicLeaderboard: unimplemented,
  async *watchCampaignStats(request, context) {
    if (request.id === "missing") {
      throw new ConnectError("campaign missing does not exist", Code.NotFound);
    }
    if (request.id === "empty") return;
    if (request.id.startsWith("endless-")) {
      const probe = probeOf(request.id);
      try {
        yield totals(1);
        await aborted(context);
        probe.aborted = true;
      } finally {
        probe.finish();
      }
      return;
    }
    if (request.id.startsWith("ticking-")) {
      const probe = probeOf(request.id);
      try {
        for (let count = 1; ; count++) {
          yield totals(count);
          await new Promise((resolve) => setTimeout(resolve, 5));
        }
      } finally {
        probe.aborted = context.signal.aborted;
        probe.finish();
      }
    }
    for (let count = 1; count <= 3; count++) {
      yield totals(count);
      if (count === 2 && request.id === "fails-after-two") {
        throw new ConnectError("the campaign was deleted while watched", Code.FailedPrecondition);
      }
      if (count === 1 && request.id === "crashes-after-one") {
        throw new Error("driver says: connection pool exploded");
      }
    }
  },
  async *exportReferrals(request, context) {
    if (request.campaignId === "missing") {
      throw new ConnectError("campaign missing does not exist", Code.NotFound);
    }
    context.responseHeader.set("content-disposition", 'attachment; filename="referrals.csv"');
    yield { contentType: "text/csv", data: csv("id,status\r\n") };
    yield { contentType: "text/csv", data: csv("ref_1,pending\r\n") };
    if (request.campaignId === "fails") {
      throw new ConnectError("the store is out of reach", Code.Unavailable);
    }
    yield { contentType: "text/csv", data: csv("ref_2,accepted\r\n") };
  },
});

/** A service on a loopback port, as `startServer` starts one, with the fake InsightsService. */
async function startStreamingServer(
  env: Record<string, string> = {},
  options: { tls?: boolean } = {},
): Promise<TestServer & { readonly lines: string[] }> {
  const dataDir = mkdtempSync(join(tmpdir(), "referrals-streaming-"));
  const certificate = options.tls ? selfSignedCertificate(dataDir) : undefined;
  const config = loadConfig({
    DATA_DIR: dataDir,
    ADMIN_TOKEN: keys.admin,
    BOOTSTRAP_SECRET_KEY: keys.secret,
    BOOTSTRAP_PUBLIC_KEY: keys.public,
    LOG_LEVEL: "info",
    METRICS_TOKEN: metricsToken,
    RATE_LIMIT_PUBLIC: "1000000/1s",
    RATE_LIMIT_SECRET: "1000000/1s",
    RATE_LIMIT_UNAUTHENTICATED: "1000000/1s",
    ...(certificate
      ? { TLS_CERT_FILE: certificate.certFile, TLS_KEY_FILE: certificate.keyFile }
      : {}),
    ...env,
  });
  const lines: string[] = [];
  const app = await buildApp(config, {
    logTo: { write: (line: string) => void lines.push(line) },
    registrations: (standard) => [
      ...standard.filter(({ service }) => service.typeName !== InsightsService.typeName),
      fakeInsights,
    ],
  });
  const port = await app.listen(0, "127.0.0.1");
  const server: TestServer & { lines: string[] } = {
    app,
    port,
    // The certificate names localhost, as a client must call it.
    baseUrl: certificate ? `https://localhost:${port}` : `http://127.0.0.1:${port}`,
    ...(certificate ? { ca: readFileSync(certificate.certFile) } : {}),
    dataDir,
    lines,
    async stop() {
      closeGrpcClient(server);
      await app.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
  return server;
}

let shared: (TestServer & { readonly lines: string[] }) | undefined;
const server = (): TestServer & { readonly lines: string[] } => {
  if (!shared) throw new Error("the server is not started");
  return shared;
};
test.before(async () => {
  shared = await startStreamingServer();
});
test.after.always(async () => {
  await shared?.stop();
});

/** Settles with `promise`, or fails after `ms`: a stream that never ends fails its test, not the run. */
function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

/** Sends `request` on a new connection and resolves with every byte received until the server ended it. */
function http1Exchange(port: number, request: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1");
    const received: Buffer[] = [];
    socket.on("data", (data: Buffer) => received.push(data));
    socket.on("error", reject);
    socket.on("end", () => resolve(Buffer.concat(received).toString("latin1")));
    socket.write(request);
  });
}

/** A chunked HTTP/1.1 response's status line, its body, and whether its last (empty) chunk came. */
function chunkedResponseOf(response: string): { status: string; body: string; complete: boolean } {
  const headersEnd = response.indexOf("\r\n\r\n");
  const status = response.slice(0, response.indexOf("\r\n"));
  let body = "";
  let at = headersEnd + 4;
  while (headersEnd >= 0 && at < response.length) {
    const sizeEnd = response.indexOf("\r\n", at);
    const size = Number.parseInt(response.slice(at, sizeEnd), 16);
    if (sizeEnd < 0 || Number.isNaN(size)) break;
    if (size === 0) return { status, body, complete: true };
    body += response.slice(sizeEnd + 2, sizeEnd + 2 + size);
    at = sizeEnd + 2 + size + 2;
  }
  return { status, body, complete: false };
}

/** Asserts every protocol got the same outcome as the first, and returns it. */
function same(
  t: ExecutionContext,
  outcomes: Partial<Record<WireProtocol, StreamOutcome>>,
): StreamOutcome {
  const [reference] = Object.values(outcomes) as StreamOutcome[];
  for (const [protocol, outcome] of Object.entries(outcomes)) {
    t.deepEqual(outcome, reference, protocol);
  }
  return reference;
}

async function everyProtocol(
  method: typeof watch | typeof exportReferrals,
  request: Record<string, unknown>,
  key: string | undefined,
  protocols: readonly WireProtocol[] = wireProtocols,
): Promise<Partial<Record<WireProtocol, StreamOutcome>>> {
  const outcomes: Partial<Record<WireProtocol, StreamOutcome>> = {};
  await Promise.all(
    protocols.map(async (protocol) => {
      outcomes[protocol] = await callStream(server(), protocol, method, request, key);
    }),
  );
  return outcomes;
}

test.serial(
  "a stream's messages, then its end, alike on every protocol and HTTP version",
  async (t) => {
    const watched = same(t, await everyProtocol(watch, { id: "three" }, keys.secret));
    t.is(watched.error, undefined);
    t.deepEqual(
      watched.messages.map((message) => Number(message.totals.referralsCreated)),
      [1, 2, 3],
    );
    t.is(watched.messages[0].from, "2026-01-01T00:00:00Z");

    t.deepEqual(same(t, await everyProtocol(watch, { id: "empty" }, keys.secret)), {
      messages: [],
    });

    const exported = same(t, await everyProtocol(exportReferrals, {}, keys.secret));
    t.deepEqual(exported, {
      messages: [
        { contentType: "text/csv", text: "id,status\r\nref_1,pending\r\nref_2,accepted\r\n" },
      ],
    });
  },
);

test.serial("over TLS too: HTTP/2 by ALPN and HTTP/1.1, on every protocol", async (t) => {
  const secure = await startStreamingServer({}, { tls: true });
  try {
    const outcomes: Partial<Record<WireProtocol, StreamOutcome>> = {};
    for (const protocol of wireProtocols) {
      outcomes[protocol] = await callStream(
        secure,
        protocol,
        watch,
        { id: "fails-after-two" },
        keys.secret,
      );
    }
    t.like(same(t, outcomes), { error: { code: "failed_precondition" } });
    t.is(outcomes.rest?.messages.length, 2);
  } finally {
    await secure.stop();
  }
});

test.serial(
  "an error before the first message is the call's error, REST's a JSON 4xx",
  async (t) => {
    const watched = same(t, await everyProtocol(watch, { id: "missing" }, keys.secret));
    t.deepEqual(watched, {
      messages: [],
      error: { code: "not_found", message: "campaign missing does not exist" },
    });
    const exported = same(
      t,
      await everyProtocol(exportReferrals, { campaignId: "missing" }, keys.secret),
    );
    t.deepEqual(exported.error, { code: "not_found", message: "campaign missing does not exist" });

    const response = await fetch(`${server().baseUrl}/campaigns/missing/stats/stream`, {
      headers: { authorization: keys.secret },
    });
    t.is(response.status, 404);
    t.regex(response.headers.get("content-type") ?? "", /^application\/json/);
    t.like(await response.json(), { code: "not_found", details: [] });
  },
);

test.serial(
  "an error after the first messages ends the stream with it; driver text never leaks",
  async (t) => {
    const failed = same(t, await everyProtocol(watch, { id: "fails-after-two" }, keys.secret));
    t.is(failed.messages.length, 2);
    t.deepEqual(failed.error, {
      code: "failed_precondition",
      message: "the campaign was deleted while watched",
    });
    const crashed = same(t, await everyProtocol(watch, { id: "crashes-after-one" }, keys.secret));
    t.is(crashed.messages.length, 1);
    t.deepEqual(crashed.error, { code: "internal", message: "internal error" });
    t.true(
      server().lines.some((line) => line.includes("connection pool exploded")),
      "the cause is logged",
    );

    // A body has no place for an error: gRPC and Connect end with it, REST cuts the body short.
    const notRest = wireProtocols.filter((protocol) => !protocol.startsWith("rest"));
    const exported = same(
      t,
      await everyProtocol(exportReferrals, { campaignId: "fails" }, keys.secret, notRest),
    );
    t.deepEqual(exported, {
      messages: [{ contentType: "text/csv", text: "id,status\r\nref_1,pending\r\n" }],
      error: { code: "unavailable", message: "the store is out of reach" },
    });
    // The headers and the rows written reach the client, then the connection
    // ends without the last chunk (a plain socket reads every byte, as a
    // reset never comes for a request read whole).
    const received = chunkedResponseOf(
      await http1Exchange(
        server().port,
        `GET /referrals/export?campaignId=fails HTTP/1.1\r\nhost: localhost\r\nauthorization: ${keys.secret}\r\n\r\n`,
      ),
    );
    t.deepEqual(received, {
      status: "HTTP/1.1 200 OK",
      body: "id,status\r\nref_1,pending\r\n",
      complete: false,
    });
    // Whichever way the cut reaches an HTTP client (before it read the
    // headers or after), it never takes the body for complete.
    const http1 = await fetch(`${server().baseUrl}/referrals/export?campaignId=fails`, {
      headers: { authorization: keys.secret },
    }).then(
      (response) =>
        response.text().then(
          (text) => `complete: ${response.status} ${text}`,
          () => `cut after the headers: ${response.status}`,
        ),
      () => "cut before the headers",
    );
    t.regex(http1, /^cut /, "HTTP/1.1: the chunked body never ends");
    const http2 = await run("curl", curlArgs("2", "/referrals/export?campaign_id=fails")).then(
      () => "complete",
      (error: { code: number }) => error.code,
    );
    t.is(http2, 92, "HTTP/2: the stream is reset (curl: stream not closed cleanly)");
  },
);

test.serial("credentials are checked before anything is sent", async (t) => {
  const anonymous = same(t, await everyProtocol(watch, { id: "three" }, undefined));
  t.like(anonymous, { messages: [], error: { code: "unauthenticated" } });
  const publicKey = same(t, await everyProtocol(exportReferrals, {}, keys.public));
  t.like(publicKey, { messages: [], error: { code: "permission_denied" } });
  const response = await fetch(`${server().baseUrl}/campaigns/three/stats/stream`);
  t.is(response.status, 401);
  t.like(await response.json(), { code: "unauthenticated" });
});

test.serial(
  "REST: Server-Sent Events and a CSV body, with their headers, on HTTP/1.1 and HTTP/2",
  async (t) => {
    const events = await fetch(`${server().baseUrl}/campaigns/three/stats/stream`, {
      headers: {
        authorization: keys.secret,
        "x-request-id": "sse-1",
        origin: "https://dashboard.example",
      },
    });
    t.is(events.status, 200);
    t.is(events.headers.get("access-control-allow-origin"), "*", "CORS, as on every response");
    t.is(events.headers.get("content-type"), "text/event-stream");
    t.is(events.headers.get("cache-control"), "no-cache");
    t.is(events.headers.get("x-request-id"), "sse-1");
    const text = await events.text();
    t.regex(text, /^data: \{[^\n]*\}\n\ndata: /, "one line of JSON per event");
    t.is(eventsOf(text).messages.length, 3);

    const body = await fetch(`${server().baseUrl}/referrals/export`, {
      headers: { authorization: keys.secret },
    });
    t.is(body.status, 200);
    t.is(body.headers.get("content-type"), "text/csv");
    t.is(body.headers.get("content-disposition"), 'attachment; filename="referrals.csv"');
    t.is(body.headers.get("transfer-encoding"), "chunked");
    t.is(await body.text(), "id,status\r\nref_1,pending\r\nref_2,accepted\r\n");

    // HEAD answers the headers, and stops the implementation at once.
    const head = await fetch(`${server().baseUrl}/campaigns/endless-head/stats/stream`, {
      method: "HEAD",
      headers: { authorization: keys.secret },
    });
    t.is(head.status, 200);
    t.is(head.headers.get("content-type"), "text/event-stream");
    await within(probeOf("endless-head").finished, 5000, "HEAD: the implementation's finally");

    for (const version of ["1.1", "2"] as const) {
      const sse = await run("curl", curlArgs(version, "/campaigns/three/stats/stream"));
      t.regex(
        sse.stdout,
        new RegExp(`\\n${version === "2" ? "2" : "1\\.1"} 200 text/event-stream$`),
      );
      t.is(eventsOf(sse.stdout.slice(0, sse.stdout.lastIndexOf("\n"))).messages.length, 3);
      const exported = await run("curl", curlArgs(version, "/referrals/export"));
      t.is(
        exported.stdout,
        `id,status\r\nref_1,pending\r\nref_2,accepted\r\n\n${version === "2" ? "2" : "1.1"} 200 text/csv`,
      );
    }
  },
);

test.serial("REST: query parameters decode as on unary GET routes", async (t) => {
  const path = restPathOf(exportReferrals, { status: "accepted", environment: "test" });
  const ok = await fetch(`${server().baseUrl}${path}`, { headers: { authorization: keys.secret } });
  t.is(ok.status, 200);
  await ok.text();
  const unknown = await fetch(`${server().baseUrl}/referrals/export?bogus=1`, {
    headers: { authorization: keys.secret },
  });
  t.is(unknown.status, 400);
  t.like(await unknown.json(), { code: "invalid_argument" });
  const word = await fetch(`${server().baseUrl}/referrals/export?status=staging`, {
    headers: { authorization: keys.secret },
  });
  t.is(word.status, 400);
  t.regex(((await word.json()) as Json).message, /^status must be one of/);
});

test.serial(
  "Connect: a streaming media type for streaming RPCs only; a bad body is INVALID_ARGUMENT after authentication",
  async (t) => {
    const base = server().baseUrl;
    const post = (path: string, contentType: string, body: Uint8Array | string, key?: string) =>
      fetch(`${base}/${path}`, {
        method: "POST",
        headers: { "content-type": contentType, ...(key ? { authorization: key } : {}) },
        body,
      });
    const unaryAsStream = await post(
      "referral.v1.CampaignsService/ListCampaigns",
      "application/connect+json",
      encodeEnvelope(0, csv("{}")),
      keys.secret,
    );
    t.is(unaryAsStream.status, 415);
    t.regex(
      ((await unaryAsStream.json()) as Json).message,
      /^Content-Type must be application\/json/,
    );
    const streamAsUnary = await post(
      "referral.v1.InsightsService/WatchCampaignStats",
      "application/json",
      '{"id":"three"}',
      keys.secret,
    );
    t.is(streamAsUnary.status, 415);
    t.like(await streamAsUnary.json(), { code: "invalid_argument" });

    const endStreamOf = async (response: Response) => {
      t.is(response.status, 200);
      t.is(response.headers.get("content-type"), "application/connect+json");
      const bytes = new Uint8Array(await response.arrayBuffer());
      t.is(bytes[0], 0b10, "one end-stream envelope");
      return JSON.parse(Buffer.from(bytes.subarray(5)).toString()) as Json;
    };
    const malformed = encodeEnvelope(0, csv("{nope"));
    const path = "referral.v1.InsightsService/WatchCampaignStats";
    const anonymous = await endStreamOf(await post(path, "application/connect+json", malformed));
    t.is(anonymous.error.code, "unauthenticated", "authentication comes before decoding");
    const refused = await endStreamOf(
      await post(path, "application/connect+json", malformed, keys.secret),
    );
    t.is(refused.error.code, "invalid_argument");
    const cutOff = await endStreamOf(
      await post(path, "application/connect+json", malformed.subarray(0, 3), keys.secret),
    );
    t.like(cutOff.error, { code: "invalid_argument" });
    t.regex(cutOff.error.message, /^the body is not one Connect message/);
  },
);

/** curl's arguments for a GET with the secret key: the body, then its HTTP version, status and type. */
function curlArgs(version: HttpVersion, path: string): string[] {
  return [
    "-s",
    version === "2" ? "--http2-prior-knowledge" : "--http1.1",
    "-H",
    `authorization: ${keys.secret}`,
    "-o",
    "-",
    "-w",
    "\n%{http_version} %{http_code} %{content_type}",
    `${server().baseUrl}${path}`,
  ];
}

/** An open stream of an `endless-*` id: resolves with the first message; `stop` cancels it, `ended` is how it ended. */
interface OpenStream {
  readonly first: Promise<unknown>;
  readonly ended: Promise<string>;
  stop(): void;
}

/**
 * Opens WatchCampaignStats of `id` on one protocol and keeps it open: the
 * end is the code (REST: of its error event) it ended with, or `ok`.
 */
function openStream(target: TestServer, protocol: WireProtocol, id: string): OpenStream {
  let firstArrived = () => {};
  const first = new Promise<unknown>((resolve) => {
    firstArrived = () => resolve(undefined);
  });
  const controller = new AbortController();
  const codeOf = (error: unknown) => Code[ConnectError.from(error).code];
  const request = { id };
  const httpVersion: HttpVersion = protocol.endsWith("-h2") ? "2" : "1.1";
  if (protocol === "grpc") {
    const call = grpcStream(target, watch, create(watch.input, request), keys.secret, firstArrived);
    return {
      first,
      ended: call.then(() => "ok", codeOf),
      stop: () => call.cancel(),
    };
  }
  if (protocol.startsWith("rest")) {
    return restEvents(target, httpVersion, `/campaigns/${id}/stats/stream`, firstArrived, first);
  }
  const client = protocol.startsWith("grpc-web")
    ? createClient(InsightsService, grpcWebTransport(target, keys.secret, httpVersion))
    : connectClient(target, InsightsService, {
        key: keys.secret,
        binary: protocol.startsWith("connect-binary"),
        httpVersion,
      });
  const ended = (async () => {
    try {
      for await (const _message of client.watchCampaignStats(request, {
        signal: controller.signal,
      })) {
        firstArrived();
      }
      return "ok";
    } catch (error) {
      return codeOf(error);
    }
  })();
  return { first, ended, stop: () => controller.abort() };
}

/** An SSE stream read as it comes, over HTTP/1.1 (fetch) or HTTP/2 (a raw stream). */
function restEvents(
  target: TestServer,
  httpVersion: HttpVersion,
  path: string,
  firstArrived: () => void,
  first: Promise<unknown>,
): OpenStream {
  let text = "";
  const received = (chunk: string) => {
    text += chunk;
    if (text.includes("\n\n")) firstArrived();
  };
  const endOf = () => eventsOf(text).error?.code ?? "ok";
  if (httpVersion === "2") {
    let stop = () => {};
    const ended = http2SessionOf(target)
      .request("GET", path, { authorization: keys.secret }, {})
      .then(
        (stream) =>
          new Promise<string>((resolve) => {
            stop = () => stream.close(http2Constants.NGHTTP2_CANCEL);
            stream.setEncoding("utf8");
            stream.on("data", received);
            stream.on("error", () => resolve("cancelled"));
            stream.on("close", () => resolve(stream.rstCode === 0 ? endOf() : "cancelled"));
          }),
      );
    return { first, ended, stop: () => stop() };
  }
  const controller = new AbortController();
  const ended = (async () => {
    try {
      const response = await fetch(`${target.baseUrl}${path}`, {
        headers: { authorization: keys.secret },
        signal: controller.signal,
      });
      const decoder = new TextDecoder();
      for await (const chunk of response.body as AsyncIterable<Uint8Array>) {
        received(decoder.decode(chunk, { stream: true }));
      }
      return endOf();
    } catch {
      return "cancelled";
    }
  })();
  return { first, ended, stop: () => controller.abort() };
}

test.serial(
  "a client that goes away stops the implementation, and its finally blocks run",
  async (t) => {
    for (const protocol of wireProtocols) {
      const id = `endless-cancel-${protocol}`;
      const stream = openStream(server(), protocol, id);
      await within(stream.first, 5000, `${protocol}: the first message`);
      stream.stop();
      await within(probeOf(id).finished, 5000, `${protocol}: the implementation's finally`);
      t.true(probeOf(id).aborted, `${protocol}: the implementation's signal aborted`);
      await within(stream.ended, 5000, `${protocol}: the client's end`);
    }
    // An implementation that never looks at its signal is returned at its next yield.
    const id = "ticking-cancel";
    const call = grpcStream(server(), watch, create(watch.input, { id }), keys.secret, () =>
      call.cancel(),
    );
    await t.throwsAsync(call, { code: Code.Canceled });
    await within(probeOf(id).finished, 5000, "the ticking implementation's finally");
    t.true(probeOf(id).aborted);
  },
);

test.serial(
  "the request log and the metrics count a stream once, and tell how it ended",
  async (t) => {
    const { lines } = server();
    lines.length = 0;
    const watched = await callStream(
      server(),
      "grpc",
      watch,
      { id: "fails-after-two" },
      keys.secret,
    );
    t.is(watched.error?.code, "failed_precondition");
    // The observers are told after the responses of this turn are written:
    // the client may have the stream's end before the log has its line.
    const records = await eventually("the stream's end in the request log", () => {
      const logged = lines
        .map((line) => JSON.parse(line) as Json)
        .filter((r) => r.rpc?.endsWith("/WatchCampaignStats"));
      return logged.some((r) => r.msg === "stream ended") && logged;
    });
    t.deepEqual(
      records.map(({ msg, code, messages }) => ({ msg, code, messages })),
      [
        { msg: "call", code: "ok", messages: undefined },
        { msg: "stream ended", code: "failed_precondition", messages: 2 },
      ],
    );
    t.is(records[0].requestId, records[1].requestId);
    const scrape = await fetch(`${server().baseUrl}/metrics`, {
      headers: { authorization: `Bearer ${metricsToken}` },
    });
    const text = await scrape.text();
    t.regex(
      text,
      /rpc_streams_ended_total\{rpc="referral.v1.InsightsService\/WatchCampaignStats",protocol="grpc",code="failed_precondition"\} \d/,
    );
    t.regex(text, /rpc_streams_ended_total\{[^}]*protocol="connect",code="canceled"\} \d/);
    t.regex(text, /rpc_streams_open 0/);
  },
);

test("REST events: a comment keeps a quiet stream alive; an error ends it as an error event", async (t) => {
  async function* messages(): AsyncGenerator<Message> {
    yield create(WatchCampaignStatsResponseSchema, totals(1));
    await new Promise((resolve) => setTimeout(resolve, 80));
    throw new ConnectError("gone", Code.Unavailable);
  }
  const written = await new Promise<string>((resolve, reject) => {
    const http = createServer((_request, response: ServerResponse) => {
      response.writeHead(200, { "content-type": "text/event-stream" });
      void writeEvents(response, messages(), {
        json: () => '{"n":1}',
        errorJson: (error) => JSON.stringify({ code: ConnectError.from(error).code }),
        keepAliveMs: 20,
      });
    }).listen(0, "127.0.0.1", async () => {
      try {
        const { port } = http.address() as AddressInfo;
        resolve(await (await fetch(`http://127.0.0.1:${port}/`)).text());
      } catch (error) {
        reject(error);
      } finally {
        http.close();
      }
    });
  });
  t.regex(written, /^data: \{"n":1\}\n\n(: keep-alive\n\n)+event: error\ndata: \{"code":14\}\n\n$/);
});

test.serial(
  "quiet streams outlive the idle timeout; the drain ends them at once with UNAVAILABLE, on every protocol",
  async (t) => {
    // A grace far longer than the test: a drain that waited for the streams would show.
    const draining = await startStreamingServer({
      SHUTDOWN_GRACE: "30s",
      HTTP_IDLE_TIMEOUT: "150ms",
    });
    try {
      const streams = wireProtocols.map((protocol) => {
        const id = `endless-drain-${protocol}`;
        return { protocol, id, stream: openStream(draining, protocol, id) };
      });
      await within(
        Promise.all(streams.map(({ stream }) => stream.first)),
        5000,
        "every first message",
      );
      // An HTTP/1.1 connection without a byte for HTTP_IDLE_TIMEOUT is closed; not while it streams.
      await new Promise((resolve) => setTimeout(resolve, 400));
      t.deepEqual(
        streams.filter(({ id }) => probeOf(id).done).map(({ protocol }) => protocol),
        [],
        "every stream is still open",
      );
      const started = performance.now();
      await within(draining.app.close(), 5000, "the drain");
      t.true(performance.now() - started < 5000);
      for (const { protocol, id, stream } of streams) {
        const end = await within(stream.ended, 5000, `${protocol}: its end`);
        t.true(end === "Unavailable" || end === "unavailable", `${protocol}: ${end}`);
        await within(probeOf(id).finished, 5000, `${protocol}: the implementation's finally`);
        t.true(probeOf(id).aborted, protocol);
      }
    } finally {
      await draining.stop();
    }
  },
);
