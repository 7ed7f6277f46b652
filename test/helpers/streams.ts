import { create, type DescMethod, fromBinary, type Message, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import * as grpc from "@grpc/grpc-js";
import type { HttpBody } from "../../gen/google/api/httpbody_pb.js";
import { fromPlain, toPlain } from "../../src/contract/plain-codec.js";
import { httpRouteOf } from "../../src/transport/rest/http-rules.js";
import { grpcWebTransport, type WireProtocol, wireOf } from "./callers.js";
import {
  connectClient,
  type HttpVersion,
  httpFetch,
  type Json,
  type TestServer,
} from "./server.js";

/**
 * What a server-streaming call returned, the same way on every protocol:
 * the REST JSON of each message it received (for an RPC returning
 * `google.api.HttpBody`, one `{ contentType, text }` of all its chunks
 * together), then, when the stream ended with an error, its code as REST
 * spells it and its message. An error before the first message has no
 * messages.
 */
export interface StreamOutcome {
  readonly messages: Json[];
  readonly error?: { code: string; message: string };
}

/**
 * Calls a server-streaming RPC over a protocol with a request written as
 * REST JSON, and reads its stream to the end: the parity harness's
 * `call`, for streams. REST reads Server-Sent Events, or the body of an
 * HttpBody stream.
 */
export async function callStream(
  server: TestServer,
  protocol: WireProtocol,
  method: DescMethod,
  request: Record<string, unknown>,
  key?: string,
  /** Stop (cancel the call) after this many messages: a stream that never ends by itself. */
  first = Number.POSITIVE_INFINITY,
): Promise<StreamOutcome> {
  const { base, httpVersion } = wireOf(protocol);
  if (base === "rest") return restStream(server, httpVersion, method, request, key, first);
  const message = fromPlain(method.input, request) as Message;
  const received: Message[] = [];
  let error: ConnectError | undefined;
  try {
    if (base === "grpc") {
      const call = grpcStream(server, method, message, key, (response) => {
        received.push(response);
        if (received.length === first) call.cancel();
      });
      await call.catch((caught: unknown) => {
        // Cancelled by us once we had what we came for.
        if (received.length < first) throw caught;
      });
    } else {
      const transport =
        base === "grpc-web" ? grpcWebTransport(server, key, httpVersion) : undefined;
      const client = (transport
        ? createClient(method.parent, transport)
        : connectClient(server, method.parent, {
            key,
            binary: base === "connect-binary",
            httpVersion,
          })) as unknown as Record<string, (input: unknown) => AsyncIterable<Message>>;
      const call = client[method.localName] as (input: unknown) => AsyncIterable<Message>;
      for await (const response of call(message)) {
        received.push(response);
        if (received.length === first) break;
      }
    }
  } catch (caught) {
    error = ConnectError.from(caught);
  }
  return {
    messages:
      method.output.typeName === "google.api.HttpBody"
        ? bodyOf(received as HttpBody[])
        : received.map((response) => toPlain(method.output, response)),
    ...(error ? { error: { code: codeWord(error.code), message: error.rawMessage } } : {}),
  };
}

/** An HttpBody stream's chunks as one body, as REST sends it; none for no chunk. */
function bodyOf(chunks: readonly HttpBody[]): Json[] {
  if (chunks.length === 0) return [];
  const text = Buffer.concat(chunks.map((chunk) => chunk.data)).toString();
  return [{ contentType: chunks[0]?.contentType, text }];
}

/** A server-streaming call with a plain @grpc/grpc-js client; `onMessage` gets each message. */
export function grpcStream(
  server: TestServer,
  method: DescMethod,
  request: Message,
  key: string | undefined,
  onMessage: (message: Message) => void,
  options: { metadata?: (metadata: grpc.Metadata) => void } = {},
): Promise<grpc.Metadata> & { cancel(): void } {
  const client = server.ca
    ? new grpc.Client(`localhost:${server.port}`, grpc.credentials.createSsl(server.ca))
    : new grpc.Client(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure());
  const metadata = new grpc.Metadata();
  if (key !== undefined) metadata.set("authorization", key);
  const stream = client.makeServerStreamRequest(
    `/${method.parent.typeName}/${method.name}`,
    (value: Message) => Buffer.from(toBinary(method.input, value)),
    (bytes: Buffer) => fromBinary(method.output, bytes),
    create(method.input, request),
    metadata,
  );
  if (options.metadata) stream.on("metadata", options.metadata);
  stream.on("data", onMessage);
  // The status says the same, with the trailers.
  stream.on("error", () => {});
  const ended = new Promise<grpc.Metadata>((resolve, reject) => {
    stream.on("status", (status: grpc.StatusObject) => {
      client.close();
      if (status.code === grpc.status.OK) resolve(status.metadata);
      else reject(new ConnectError(status.details, status.code as number as Code, status.metadata));
    });
  });
  return Object.assign(ended, { cancel: () => stream.cancel() });
}

/** The REST path and query of a GET route's request: path variables, then the rest as query parameters. */
export function restPathOf(method: DescMethod, request: Record<string, unknown>): string {
  const route = httpRouteOf(method);
  if (!route) throw new Error(`${method.name} has no REST route`);
  const query = new URLSearchParams();
  const inPath = new Set<string>();
  const path = route.template.replace(/\{([^}=]+)\}/g, (_match, name: string) => {
    const field = route.pathFields.find((f) => f.name === name);
    const jsonName = field?.jsonName ?? name;
    inPath.add(jsonName);
    return encodeURIComponent(String(request[jsonName]));
  });
  for (const [name, value] of Object.entries(request)) {
    if (!inPath.has(name)) query.append(name, String(value));
  }
  return query.size > 0 ? `${path}?${query}` : path;
}

/**
 * A REST stream read to its end: Server-Sent Events (each `data:` event a
 * message, an `error` event the error), or an HttpBody stream's bytes. An
 * error before the first message is a JSON error response.
 */
async function restStream(
  server: TestServer,
  httpVersion: HttpVersion,
  method: DescMethod,
  request: Record<string, unknown>,
  key: string | undefined,
  first: number,
): Promise<StreamOutcome> {
  const headers: Record<string, string> = key === undefined ? {} : { authorization: key };
  const route = httpRouteOf(method);
  // A stream with a body (a backtest's candidate) is a POST of the fields not in its path.
  const posts = route?.verb === "POST";
  const path = restPathOf(method, posts ? pathFieldsOf(method, request) : request);
  if (posts) headers["content-type"] = "application/json";
  const response = await httpFetch(
    server,
    httpVersion,
    posts ? "POST" : "GET",
    path,
    headers,
    posts ? JSON.stringify(request) : undefined,
  );
  const text =
    Number.isFinite(first) && response.status === 200
      ? await firstEvents(response, first)
      : await response.text();
  if (response.status !== 200) {
    const body = JSON.parse(text) as Json;
    return { messages: [], error: { code: body.code, message: body.message } };
  }
  if (method.output.typeName === "google.api.HttpBody") {
    const contentType = response.headers.get("content-type");
    return { messages: text === "" ? [] : [{ contentType, text }] };
  }
  // A chunk may hold more events than were asked for: the others came after.
  const events = eventsOf(text);
  return { ...events, messages: events.messages.slice(0, first) };
}

/** The fields of a request its route's path names. */
function pathFieldsOf(
  method: DescMethod,
  request: Record<string, unknown>,
): Record<string, unknown> {
  const route = httpRouteOf(method);
  const names = new Set(route?.pathFields.map((field) => field.jsonName) ?? []);
  return Object.fromEntries(Object.entries(request).filter(([name]) => names.has(name)));
}

/** The text of a Server-Sent Events body up to its `count`th event; then the body is cancelled. */
async function firstEvents(response: Response, count: number): Promise<string> {
  const reader = (response.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  let text = "";
  while ((text.match(/^data: /gm)?.length ?? 0) < count) {
    const { done, value } = await reader.read();
    if (done) return text;
    text += decoder.decode(value, { stream: true });
  }
  await reader.cancel();
  return text;
}

/** Parses Server-Sent Events: `data:` events are messages, an `error` event the error; comments are skipped. */
export function eventsOf(text: string): StreamOutcome {
  const messages: Json[] = [];
  let error: StreamOutcome["error"];
  for (const block of text.split("\n\n")) {
    const lines = block.split("\n").filter((line) => line !== "" && !line.startsWith(":"));
    if (lines.length === 0) continue;
    const event = lines.find((line) => line.startsWith("event: "))?.slice("event: ".length);
    const data = lines.find((line) => line.startsWith("data: "))?.slice("data: ".length) ?? "";
    if (event === "error") {
      const body = JSON.parse(data) as Json;
      error = { code: body.code, message: body.message };
    } else {
      messages.push(JSON.parse(data));
    }
  }
  return error ? { messages, error } : { messages };
}

/** `Code.FailedPrecondition` as REST spells it: `failed_precondition`. */
function codeWord(code: Code): string {
  return Code[code].replace(/[A-Z]/g, (letter, at) => `${at ? "_" : ""}${letter.toLowerCase()}`);
}

/** A server stream kept open by the test: what it received so far, and how it ended. */
export interface OpenStream {
  /** The REST JSON of each message received so far. */
  readonly messages: Json[];
  /** Resolves with the `count`th message (1 is the first) once it has arrived. */
  received(count: number): Promise<Json>;
  /**
   * Resolves once the stream has ended: undefined when it ended well or the
   * test stopped it, else its error (its code as REST spells it, and its
   * message; REST: of its `error` event or its error response).
   */
  readonly ended: Promise<StreamOutcome["error"]>;
  /** Cancels the call, as a client that stops reading does. */
  stop(): void;
}

/**
 * Opens a server stream over a protocol and keeps it open, reading its
 * messages as they come, until it ends or the test stops it: for streams
 * that never end by themselves (WatchCampaignStats).
 */
export function keepStreamOpen(
  server: TestServer,
  protocol: WireProtocol,
  method: DescMethod,
  request: Record<string, unknown>,
  key: string,
): OpenStream {
  const messages: Json[] = [];
  const waiting: { count: number; resolve: (message: Json) => void }[] = [];
  const arrived = (message: Json) => {
    messages.push(message);
    for (const wait of [...waiting]) {
      if (messages.length < wait.count) continue;
      waiting.splice(waiting.indexOf(wait), 1);
      wait.resolve(messages[wait.count - 1]);
    }
  };
  let stopped = false;
  const errorOf = (error: unknown): StreamOutcome["error"] => {
    if (stopped) return undefined;
    const connectError = ConnectError.from(error);
    return { code: codeWord(connectError.code), message: connectError.rawMessage };
  };
  const { base, httpVersion } = wireOf(protocol);
  let cancel: () => void;
  let ended: Promise<StreamOutcome["error"]>;
  if (base === "rest") {
    const controller = new AbortController();
    cancel = () => controller.abort();
    ended = restEventsOpen(server, httpVersion, restPathOf(method, request), key, arrived, {
      signal: controller.signal,
    }).catch(errorOf);
  } else if (base === "grpc") {
    const call = grpcStream(server, method, fromPlain(method.input, request) as Message, key, (m) =>
      arrived(toPlain(method.output, m)),
    );
    cancel = () => call.cancel();
    ended = call.then(() => undefined, errorOf);
  } else {
    const controller = new AbortController();
    cancel = () => controller.abort();
    const client = (base === "grpc-web"
      ? createClient(method.parent, grpcWebTransport(server, key, httpVersion))
      : connectClient(server, method.parent, {
          key,
          binary: base === "connect-binary",
          httpVersion,
        })) as unknown as Record<
      string,
      (input: unknown, options: { signal: AbortSignal }) => AsyncIterable<Message>
    >;
    const call = client[method.localName] as (
      input: unknown,
      options: { signal: AbortSignal },
    ) => AsyncIterable<Message>;
    ended = (async () => {
      for await (const message of call(fromPlain(method.input, request), {
        signal: controller.signal,
      })) {
        arrived(toPlain(method.output, message));
      }
      return undefined;
    })().catch(errorOf);
  }
  return {
    messages,
    received: (count) =>
      messages.length >= count
        ? Promise.resolve(messages[count - 1])
        : new Promise((resolve) => waiting.push({ count, resolve })),
    ended,
    stop() {
      stopped = true;
      cancel();
    },
  };
}

/**
 * Server-Sent Events read as they come, each `data:` event given to
 * `arrived`; resolves when the body ends (undefined, or throws the error
 * of its `error` event or of its error response).
 */
async function restEventsOpen(
  server: TestServer,
  httpVersion: HttpVersion,
  path: string,
  key: string,
  arrived: (message: Json) => void,
  options: { signal: AbortSignal },
): Promise<undefined> {
  const response = await (httpVersion === "2"
    ? httpFetch(server, "2", "GET", path, { authorization: key })
    : fetch(`${server.baseUrl}${path}`, {
        headers: { authorization: key },
        signal: options.signal,
      }));
  const body = response.body as ReadableStream<Uint8Array>;
  if (response.status !== 200) {
    const error = JSON.parse(await response.text()) as Json;
    throw new ConnectError(error.message, codeOfWord(error.code));
  }
  const reader = body.getReader();
  // Cancelling a body fetch has aborted already rejects: the read in progress says so.
  options.signal.addEventListener("abort", () => reader.cancel().catch(() => {}), {
    once: true,
  });
  const decoder = new TextDecoder();
  let text = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return undefined;
    text += decoder.decode(value, { stream: true });
    for (let end = text.indexOf("\n\n"); end >= 0; end = text.indexOf("\n\n")) {
      const outcome = eventsOf(text.slice(0, end + 2));
      text = text.slice(end + 2);
      for (const message of outcome.messages) arrived(message);
      if (outcome.error) {
        throw new ConnectError(outcome.error.message, codeOfWord(outcome.error.code));
      }
    }
  }
}

/** `failed_precondition` as `Code.FailedPrecondition`. */
function codeOfWord(word: string): Code {
  const name = word.replace(/(^|_)([a-z])/g, (_match, _underscore, letter: string) =>
    letter.toUpperCase(),
  );
  return Code[name as keyof typeof Code];
}
