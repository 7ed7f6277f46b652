import type { DescService, Message } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createContextKey,
  createContextValues,
  type HandlerContext,
  type ServiceImpl,
} from "@connectrpc/connect";
import { type Compression, encodeEnvelope } from "@connectrpc/connect/protocol";
import {
  contentTypeStreamJson,
  contentTypeStreamProto,
  endStreamFlag,
  endStreamToJson,
  errorToJson,
  parseContentType as parseConnectContentType,
} from "@connectrpc/connect/protocol-connect";
import {
  parseContentType as parseGrpcWebContentType,
  setTrailerStatus,
} from "@connectrpc/connect/protocol-grpc-web";
import { fastifyConnectPlugin } from "@connectrpc/connect-fastify";
import { compressionBrotli, compressionGzip } from "@connectrpc/connect-node";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { decodeBinaryRequest, decodeJsonRequest } from "../contract/decode-request.js";
import { type ErrorLogger, httpError, httpStatusOf, toConnectError } from "./errors.js";
import type { Call, Pipeline, Rpc, ServiceRegistration } from "./pipeline.js";
import { holdOpenWhileStreaming } from "./server.js";

/**
 * Serves the Connect protocol (JSON and binary) and gRPC-Web over HTTP/1.1 and HTTP/2
 * on the Fastify instance. connect-es decodes and encodes; every call goes
 * through the pipeline.
 */
export async function registerConnect(
  app: FastifyInstance,
  deps: {
    registrations: readonly ServiceRegistration[];
    pipeline: Pipeline;
    log: ErrorLogger;
    maxBodyBytes: number;
  },
): Promise<void> {
  const rpcByPath = new Map<string, Rpc>();
  for (const { rpcs } of deps.registrations) {
    for (const rpc of rpcs) rpcByPath.set(`/${rpc.name}`, rpc);
  }
  await app.register(async (scope) => {
    // Only what fails before connect-es answers lands here: the body checks below.
    scope.setErrorHandler((error, request, reply) => {
      const connectError = toConnectError(error, request.url, deps.log);
      const contentType = request.headers["content-type"] ?? null;
      const webType = parseGrpcWebContentType(contentType);
      if (webType) {
        // gRPC-Web answers HTTP 200 and puts the status in trailers, here
        // sent as headers (a "trailers-only" response).
        const trailers = new Headers();
        setTrailerStatus(trailers, connectError);
        for (const [name, value] of trailers) reply.header(name, value);
        return reply
          .code(200)
          .type(webType.binary ? grpcWebProto : grpcWebJson)
          .send();
      }
      // A Connect stream's error is its end-stream message, in a 200, as connect-es writes it.
      const streamType = streamingCalls.has(request) && parseConnectContentType(contentType);
      if (streamType) {
        return reply
          .code(200)
          .type(streamType.binary ? contentTypeStreamProto : contentTypeStreamJson)
          .send(Buffer.from(endStreamOf(connectError)));
      }
      return reply
        .code(httpStatusOf(connectError, error))
        .type("application/json")
        .send(errorToJson(connectError, undefined));
    });
    // What connect-es would refuse with an empty body (a method other than
    // POST, a media type it does not take) is refused here, with the body
    // of every other error.
    scope.addHook("onRequest", async (request, reply) => {
      const path = request.url.split("?")[0] ?? "";
      const rpc = rpcByPath.get(path);
      if (!rpc) return;
      if (request.method !== "POST") {
        reply.header("allow", "POST");
        throw httpError(405, `${request.method} is not allowed on ${path}; use POST`);
      }
      // Connect's media type says the kind of call (its streaming types
      // are for streaming RPCs only); gRPC-Web's serve both, but not its
      // base64 text: connect-es would refuse that too.
      const streaming = rpc.method.methodKind === "server_streaming";
      const contentType = request.headers["content-type"] ?? null;
      const connectType = parseConnectContentType(contentType);
      const webType = parseGrpcWebContentType(contentType);
      const accepted = connectType ? connectType.stream === streaming : webType && !webType.text;
      if (!accepted) {
        // Over HTTP/2 grpc-js takes gRPC calls: a gRPC client's frame here came over HTTP/1.1, from a
        // client or proxy that downgraded the call.
        if (contentType && grpcContentType.test(contentType)) throw httpError(415, grpcOverHttp1);
        throw httpError(415, streaming ? connectStreamMediaTypes : connectMediaTypes);
      }
      if (streaming) {
        streamingCalls.add(request);
        holdOpenWhileStreaming(request.raw, reply.raw);
      }
    });
    // connect-es decodes before any handler, and answers a body it cannot
    // decode with INTERNAL and the parser's words ("parse binary: premature
    // EOF"). So request bodies (a unary call's message, or a stream's one
    // enveloped message) are read here and kept encoded; the pipeline
    // decodes them after authentication, as on REST and gRPC, and refuses
    // what does not decode as INVALID_ARGUMENT. connect-es is handed the
    // empty message in their place (connect-fastify passes on a body set
    // here as it is), so each request is decoded once.
    scope.addHook("preHandler", async (request) => {
      if (request.method !== "POST") return;
      if (!rpcByPath.has(request.url.split("?")[0] ?? "")) return;
      const contentType = request.headers["content-type"] ?? null;
      const connectType = parseConnectContentType(contentType);
      if (connectType && !connectType.stream) {
        const compression = compressionOf(request.headers["content-encoding"]);
        if (compression === undefined) return; // connect-es names the encodings it takes
        const bytes = await decompressed(
          await readBody(request, deps.maxBodyBytes),
          compression,
          deps.maxBodyBytes,
        );
        encodedRequests.set(request, { binary: connectType.binary, bytes });
        request.body = connectType.binary ? emptyMessage : {};
        return;
      }
      // A Connect stream's request and every gRPC-Web one: one message in an envelope.
      const webType = parseGrpcWebContentType(contentType);
      const enveloped = connectType
        ? { ...connectType, protocol: "Connect", encoding: "connect-content-encoding" }
        : webType && !webType.text
          ? { ...webType, protocol: "gRPC-Web", encoding: "grpc-encoding" }
          : undefined;
      if (enveloped) {
        const compression = compressionOf(request.headers[enveloped.encoding]);
        if (compression === undefined) return;
        const framed = await readBody(request, deps.maxBodyBytes + envelopeHeaderBytes);
        const bytes = await unframed(framed, compression, deps.maxBodyBytes, enveloped);
        encodedRequests.set(request, { binary: enveloped.binary, bytes });
        // The request iterates a stream of envelopes: one, uncompressed.
        request.body = bytesOnce(enveloped.binary ? emptyBinaryEnvelope : emptyJsonEnvelope);
      }
    });
    await scope.register(fastifyConnectPlugin, {
      routes(router) {
        for (const registration of deps.registrations) {
          router.service(registration.service, connectImplementation(registration, deps.pipeline));
        }
      },
      contextValues: (request) =>
        createContextValues()
          .set(clientAddressKey, request.clientAddress)
          .set(encodedRequestKey, encodedRequests.get(request)),
      grpc: false,
      grpcWeb: true,
      connect: true,
      readMaxBytes: deps.maxBodyBytes,
      // A field or enum word the contract lacks is refused, as on REST.
      jsonOptions: { ignoreUnknownFields: false },
    });
  });
}

/** gRPC's media types (`application/grpc`, `+proto`, `+json`), not gRPC-Web's. */
const grpcContentType = /^application\/grpc(?:\+[a-z]+)?\s*(?:;|$)/i;

const grpcOverHttp1 =
  "gRPC needs HTTP/2 and this call came over HTTP/1.1: call with an HTTP/2 client, or use Connect or gRPC-Web, which work over HTTP/1.1";

const connectMediaTypes =
  "Content-Type must be application/json or application/proto (Connect), or application/grpc-web+proto or application/grpc-web+json (gRPC-Web)";

const connectStreamMediaTypes =
  "Content-Type must be application/connect+json or application/connect+proto (Connect, for this streaming RPC), or application/grpc-web+proto or application/grpc-web+json (gRPC-Web)";

/** The requests accepted as calls of streaming RPCs: their errors are answered as streams. */
const streamingCalls = new WeakSet<FastifyRequest>();

/** A Connect end-stream message (an envelope flagged 0x02) carrying an error and its metadata. */
function endStreamOf(error: ConnectError): Uint8Array {
  const json = JSON.stringify(endStreamToJson(new Headers(), error, undefined));
  return encodeEnvelope(endStreamFlag, new TextEncoder().encode(json));
}

/** The client's address, which connect-es does not give handlers. */
const clientAddressKey = createContextKey("", { description: "the client's IP address" });

/** A request body read before connect-es, still encoded. */
interface EncodedRequest {
  readonly binary: boolean;
  readonly bytes: Uint8Array;
}

/** The bodies the body hook read, until connect-es hands the call on. */
const encodedRequests = new WeakMap<FastifyRequest, EncodedRequest>();

const encodedRequestKey = createContextKey<EncodedRequest | undefined>(undefined, {
  description: "the request body, read and still encoded",
});

/**
 * The service as connect-es calls it: each method enters the pipeline. A
 * streaming method hands connect-es the stream the pipeline opened:
 * connect-es writes its messages, then the end-stream message (gRPC-Web:
 * the trailers) with OK or the error that ended it, and returns it when the
 * client goes away.
 */
function connectImplementation(registration: ServiceRegistration, pipeline: Pipeline) {
  const unary = (rpc: Rpc) => async (request: Message, context: HandlerContext) => {
    const call = callOf(rpc, request, context);
    const response = await pipeline(call);
    for (const [name, value] of call.responseHeaders) context.responseHeader.set(name, value);
    return response;
  };
  const serverStreaming = (rpc: Rpc) =>
    async function* (request: Message, context: HandlerContext) {
      const call = callOf(rpc, request, context);
      await pipeline(call);
      // Before the first message: connect-es sends the headers with it.
      for (const [name, value] of call.responseHeaders) context.responseHeader.set(name, value);
      if (!call.responseStream) throw new Error(`${rpc.name}: the pipeline opened no stream`);
      yield* call.responseStream;
    };
  return Object.fromEntries(
    registration.rpcs.map((rpc) => [
      rpc.method.localName,
      rpc.method.methodKind === "server_streaming" ? serverStreaming(rpc) : unary(rpc),
    ]),
  ) as ServiceImpl<DescService>;
}

/** A call as connect-es hands it over. */
function callOf(rpc: Rpc, request: Message, context: HandlerContext): Call {
  const encoded = context.values.get(encodedRequestKey);
  return {
    rpc,
    protocol: context.protocolName === "grpc-web" ? "grpc-web" : "connect",
    clientAddress: context.values.get(clientAddressKey),
    responseHeaders: new Map(),
    header: (name) => context.requestHeader.get(name) ?? undefined,
    // connect-es decoded only what the body hook did not read.
    ...(encoded ? { decode: () => decodeEncoded(rpc, encoded) } : { request }),
    context,
  };
}

/** The envelope of gRPC-Web and Connect streams: a flags byte and a 4-byte big-endian length, then the message. */
const envelopeHeaderBytes = 5;
const compressedFlag = 0b1;
const grpcWebProto = "application/grpc-web+proto";
const grpcWebJson = "application/grpc-web+json";

/** The request compressions connect-fastify accepts, and identity. */
const compressions: ReadonlyMap<string, Compression | null> = new Map([
  ["identity", null],
  [compressionGzip.name, compressionGzip],
  [compressionBrotli.name, compressionBrotli],
]);

/**
 * The compression an encoding header names: null for none, undefined for
 * one connect-es does not take either (it answers those itself).
 */
function compressionOf(header: string | string[] | undefined): Compression | null | undefined {
  const name = (Array.isArray(header) ? header[0] : header)?.trim().toLowerCase();
  return name === undefined || name === "" ? null : compressions.get(name);
}

/** The whole body, refused past `maxBytes`. */
async function readBody(request: FastifyRequest, maxBytes: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of request.raw) {
    size += (chunk as Buffer).length;
    if (size > maxBytes) {
      throw new ConnectError(
        `message size is larger than the ${maxBytes} bytes allowed`,
        Code.ResourceExhausted,
      );
    }
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

/** The bytes as sent, once decompressed; what does not decompress is refused. */
async function decompressed(
  bytes: Uint8Array,
  compression: Compression | null,
  maxBytes: number,
): Promise<Uint8Array> {
  if (compression === null) return bytes;
  try {
    return await compression.decompress(bytes, maxBytes);
  } catch (error) {
    if (error instanceof ConnectError && error.code === Code.ResourceExhausted) {
      // In the words of the same limit on a body sent as it is, not connect-es's option name.
      throw new ConnectError(
        `message size is larger than the ${maxBytes} bytes allowed once decompressed`,
        Code.ResourceExhausted,
      );
    }
    throw new ConnectError(`the body is not valid ${compression.name} data`, Code.InvalidArgument);
  }
}

function decodeEncoded(rpc: Rpc, encoded: EncodedRequest): Message {
  return encoded.binary
    ? decodeBinaryRequest(rpc.method.input, encoded.bytes)
    : decodeJsonRequest(rpc.method.input, encoded.bytes);
}

/**
 * The message of a gRPC-Web request or a Connect streaming one,
 * decompressed: exactly one data envelope, whole. A trailer (an end-stream
 * flag), a second message or a cut-off one is refused.
 */
async function unframed(
  framed: Buffer,
  compression: Compression | null,
  maxBytes: number,
  framing: { protocol: string; encoding: string },
): Promise<Uint8Array> {
  const refuse = (why: string) =>
    new ConnectError(
      `the body is not one ${framing.protocol} message: ${why}`,
      Code.InvalidArgument,
    );
  if (framed.length < envelopeHeaderBytes) throw refuse("it is shorter than an envelope header");
  const flags = framed[0] as number;
  const length = framed.readUInt32BE(1);
  if (framed.length !== envelopeHeaderBytes + length) {
    throw refuse("it is cut off, or more follows");
  }
  if ((flags & ~compressedFlag) !== 0) throw refuse(`the envelope has the flags ${flags}`);
  const message = framed.subarray(envelopeHeaderBytes);
  if ((flags & compressedFlag) === 0) return message;
  if (compression === null) throw refuse(`it is compressed without a ${framing.encoding}`);
  return decompressed(message, compression, maxBytes);
}

/** The empty message in protobuf's binary format, and in envelopes. */
const emptyMessage = new Uint8Array(0);
const emptyBinaryEnvelope = framedMessage(emptyMessage);
const emptyJsonEnvelope = framedMessage(new TextEncoder().encode("{}"));

/** An uncompressed gRPC-Web envelope around a message. */
function framedMessage(message: Uint8Array): Uint8Array {
  const framed = Buffer.alloc(envelopeHeaderBytes + message.byteLength);
  framed.writeUInt32BE(message.byteLength, 1);
  framed.set(message, envelopeHeaderBytes);
  return framed;
}

/** A body connect-es reads as a stream: one chunk. */
async function* bytesOnce(bytes: Uint8Array): AsyncIterable<Uint8Array> {
  yield bytes;
}
