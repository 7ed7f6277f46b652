import { create, type DescFile, fromBinary, type Message, toBinary } from "@bufbuild/protobuf";
import { anyPack } from "@bufbuild/protobuf/wkt";
import type { ConnectError } from "@connectrpc/connect";
import * as grpc from "@grpc/grpc-js";
import { HealthImplementation } from "grpc-health-check";
import { StatusSchema } from "../../gen/google/rpc/status_pb.js";
import { file_health_v1_health } from "../../gen/health/v1/health_pb.js";
import type { ConnectionConfig } from "../config.js";
import { decodeBinaryRequest } from "../contract/decode-request.js";
import { encodeOnce } from "../contract/shared-messages.js";
import type { ClientAddressOf } from "./client-address.js";
import { type ErrorLogger, toConnectError } from "./errors.js";
import { addReflection } from "./grpc-reflection.js";
import { type Pipeline, type Rpc, type ServiceRegistration, TransportCall } from "./pipeline.js";

/** The gRPC side: the grpc-js server, and the switch of its health service. */
export interface GrpcTransport {
  readonly server: grpc.Server;
  /**
   * Reports SERVING or NOT_SERVING for the server (`""`) and for every
   * service: not serving while it drains, or while the store refuses writes.
   */
  setServing(serving: boolean): void;
}

/**
 * The grpc-js server with every service, reflection (v1, v1alpha) and
 * `grpc.health.v1` (the server as `""` and each service by name), under the
 * HTTP/2 limits of `limits`.
 */
export function createGrpcServer(deps: {
  registrations: readonly ServiceRegistration[];
  pipeline: Pipeline;
  log: ErrorLogger;
  maxMessageBytes: number;
  limits: ConnectionConfig;
  clientAddressOf: ClientAddressOf;
}): GrpcTransport {
  const { limits } = deps;
  const server = new grpc.Server({
    "grpc.max_receive_message_length": deps.maxMessageBytes,
    "grpc.max_concurrent_streams": limits.maxConcurrentStreams,
    "grpc.max_connection_idle_ms": limits.http2IdleTimeoutMs,
    "grpc.keepalive_time_ms": limits.keepaliveTimeMs,
    "grpc.keepalive_timeout_ms": limits.keepaliveTimeoutMs,
    interceptors: [framingRefusalsInOurWords(deps.maxMessageBytes)],
    // No channelz service is served, so nothing reads what it tracks: a
    // timestamp per message and an object of closures per call.
    "grpc.enable_channelz": 0,
  });
  for (const { rpcs } of deps.registrations) {
    const definition: Record<string, grpc.MethodDefinition<unknown, unknown>> = {};
    const handlers: Record<string, grpc.UntypedHandleCall> = {};
    for (const rpc of rpcs) {
      definition[rpc.method.name] = methodDefinition(rpc);
      handlers[rpc.method.name] =
        rpc.method.methodKind === "server_streaming"
          ? serverStreamingHandler(rpc, deps)
          : unaryHandler(rpc, deps);
    }
    server.addService(definition as grpc.ServiceDefinition, handlers);
  }
  // The health service is described too, so reflection clients (buf curl,
  // grpcurl) list and call it like the others.
  addReflection(server, [...filesOf(deps.registrations), file_health_v1_health]);
  const served = ["", ...deps.registrations.map(({ service }) => service.typeName)];
  const health = new HealthImplementation(
    Object.fromEntries(served.map((name) => [name, "SERVING" as const])),
  );
  health.addToServer(server);
  return {
    server,
    setServing(serving) {
      for (const name of served) health.setStatus(name, serving ? "SERVING" : "NOT_SERVING");
    },
  };
}

/** The protobuf binary encoding, as a key of a shared message's encodings. */
const protobufBinary = { format: "protobuf-binary" };

// Requests stay bytes until the pipeline decodes them, after authentication,
// so a malformed body is INVALID_ARGUMENT like on every other protocol.
function methodDefinition(rpc: Rpc): grpc.MethodDefinition<unknown, unknown> {
  const { method } = rpc;
  return {
    path: `/${rpc.name}`,
    requestStream: false,
    responseStream: method.methodKind === "server_streaming",
    requestSerialize: (value) => value as Buffer,
    requestDeserialize: (bytes) => bytes,
    // A shared response (a cached view) is encoded once, not on every call.
    responseSerialize: (value) =>
      encodeOnce(value as Message, protobufBinary, () =>
        Buffer.from(toBinary(method.output, value as never)),
      ),
    responseDeserialize: (bytes) => fromBinary(method.output, bytes),
  };
}

function unaryHandler(
  rpc: Rpc,
  deps: { pipeline: Pipeline; log: ErrorLogger; clientAddressOf: ClientAddressOf },
): grpc.handleUnaryCall<unknown, unknown> {
  return (raw, callback) => {
    const call = new GrpcCall(rpc, raw, deps.clientAddressOf);
    raw.on("cancelled", () => call.context.abort());
    deps.pipeline(call).then(
      (response) => {
        if (call.responseHeaders.size > 0) raw.sendMetadata(metadataOf(call.responseHeaders));
        callback(null, response);
      },
      // The pipeline gives ConnectErrors; this only guards the encoding.
      (error: unknown) => callback(grpcError(toConnectError(error, rpc.name, deps.log))),
    );
  };
}

/**
 * A server-streaming call: the pipeline opens the stream (an error before
 * the first message is the call's status, as on a unary call), then each
 * message is written as the client takes them, and the call ends with OK,
 * or with the status of the error that ended the stream: the
 * implementation's, or UNAVAILABLE when the service drains. A client that
 * cancels ends the stream.
 */
function serverStreamingHandler(
  rpc: Rpc,
  deps: { pipeline: Pipeline; log: ErrorLogger; clientAddressOf: ClientAddressOf },
): grpc.handleServerStreamingCall<unknown, unknown> {
  return (raw) => {
    const call = new GrpcCall(rpc, raw, deps.clientAddressOf);
    raw.on("cancelled", () => call.context.abort());
    deps
      .pipeline(call)
      .then(() => writeStream(raw, call))
      // The pipeline and the stream give ConnectErrors; this only guards the encoding.
      .catch((error: unknown) =>
        raw.emit("error", grpcError(toConnectError(error, rpc.name, deps.log))),
      );
  };
}

/** Writes an opened stream's messages, then OK; throws the error that ends it early. */
async function writeStream(
  raw: grpc.ServerWritableStream<unknown, unknown>,
  call: GrpcCall,
): Promise<void> {
  const stream = call.responseStream;
  if (!stream) throw new Error(`${call.rpc.name}: the pipeline opened no stream`);
  if (call.responseHeaders.size > 0) raw.sendMetadata(metadataOf(call.responseHeaders));
  for await (const message of stream) {
    if (!raw.write(message)) await writable(raw);
  }
  raw.end();
}

/** Resolves once `raw` takes writes again, or can take none (the client went away). */
function writable(raw: grpc.ServerWritableStream<unknown, unknown>): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      raw.off("drain", done);
      raw.off("cancelled", done);
      raw.off("close", done);
      resolve();
    };
    raw.on("drain", done);
    raw.on("cancelled", done);
    raw.on("close", done);
  });
}

/** A gRPC call as the pipeline sees it. */
class GrpcCall extends TransportCall {
  constructor(
    rpc: Rpc,
    private readonly raw:
      | grpc.ServerUnaryCall<unknown, unknown>
      | grpc.ServerWritableStream<unknown, unknown>,
    private readonly clientAddressOf: ClientAddressOf,
  ) {
    super(rpc, "grpc", "POST", `/${rpc.name}`, () => {
      const headers = new Headers();
      for (const [name, value] of Object.entries(raw.metadata.getMap())) {
        if (typeof value === "string") headers.set(name, value);
      }
      return headers;
    });
  }

  get clientAddress(): string {
    return this.clientAddressOf(addressOfPeer(this.raw.getPeer()), (name) => this.header(name));
  }

  header(name: string): string | undefined {
    const value = this.raw.metadata.get(name)[0];
    return typeof value === "string" ? value : undefined;
  }

  decode(): Message {
    return decodeBinaryRequest(this.rpc.method.input, this.raw.request as Buffer);
  }
}

/**
 * grpc-js refuses some requests before any handler runs: a message that
 * does not decompress (INTERNAL), a unary call with no message or two
 * (UNIMPLEMENTED), a frame longer than the limit (its length read from
 * whatever bytes came). Those are the caller's faults, so they are answered
 * as the other protocols answer the same input: INVALID_ARGUMENT, or
 * RESOURCE_EXHAUSTED for the size, in our words rather than grpc-js's. The
 * call sends those statuses to itself, past any interceptor's responder,
 * so it is its own `sendStatus` that translates; every other status passes
 * as it is.
 */
function framingRefusalsInOurWords(maxMessageBytes: number): grpc.ServerInterceptor {
  const tooLarge = `message size is larger than the ${maxMessageBytes} bytes allowed`;
  const translate = (status: SentStatus): SentStatus => {
    const { code, details = "" } = status;
    if (code === grpc.status.INTERNAL && details === "Failed to decompress message") {
      return reworded(status, grpc.status.INVALID_ARGUMENT, notDecompressed);
    }
    if (code === grpc.status.INTERNAL && details.startsWith("Invalid grpc-timeout value")) {
      return reworded(status, grpc.status.INVALID_ARGUMENT, invalidTimeout);
    }
    if (code === grpc.status.UNIMPLEMENTED && details.startsWith("Received no request message")) {
      return reworded(status, grpc.status.INVALID_ARGUMENT, noMessage);
    }
    if (code === grpc.status.UNIMPLEMENTED && details.startsWith("Received a second request")) {
      return reworded(status, grpc.status.INVALID_ARGUMENT, secondMessage);
    }
    if (code === grpc.status.RESOURCE_EXHAUSTED && details.startsWith("Received message")) {
      const decompressed = details.startsWith("Received message that decompresses");
      return reworded(status, code, decompressed ? `${tooLarge} once decompressed` : tooLarge);
    }
    return status;
  };
  return (_method, call) => {
    const send = call.sendStatus;
    call.sendStatus = (status) => send.call(call, translate(status));
    return call as grpc.ServerInterceptingCall;
  };
}

type SentStatus = Parameters<grpc.ServerInterceptingCall["sendStatus"]>[0];

function reworded(status: SentStatus, code: grpc.status, details: string): SentStatus {
  return { ...status, code, details };
}

const notDecompressed = "the request message does not decompress with its grpc-encoding";
const invalidTimeout = "the grpc-timeout header is not a valid timeout";
const noMessage = "the call sent no request message: it takes exactly one";
const secondMessage = "the call sent a second request message: it takes exactly one";

/**
 * The IP address of a grpc-js peer: grpc-js writes the address and the port
 * as `1.2.3.4:5678` or `::1:5678` (no brackets), so the port is after the
 * last colon.
 */
function addressOfPeer(peer: string): string {
  const portAt = peer.lastIndexOf(":");
  const address = portAt > 0 ? peer.slice(0, portAt) : peer;
  return address[0] === "[" ? address.slice(1, -1) : address;
}

function metadataOf(headers: Iterable<[string, string]>): grpc.Metadata {
  const metadata = new grpc.Metadata();
  for (const [name, value] of headers) metadata.set(name, value);
  return metadata;
}

/**
 * A gRPC status with the error's metadata (rate limits, the request id) and
 * its details in `grpc-status-details-bin`.
 */
function grpcError(error: ConnectError): Partial<grpc.StatusObject> {
  const metadata = metadataOf(error.metadata);
  const details = error.details.flatMap((detail) =>
    "desc" in detail ? [anyPack(detail.desc, create(detail.desc, detail.value))] : [],
  );
  if (details.length > 0) {
    const status = create(StatusSchema, { code: error.code, message: error.rawMessage, details });
    metadata.set("grpc-status-details-bin", Buffer.from(toBinary(StatusSchema, status)));
  }
  return { code: error.code as number as grpc.status, details: error.rawMessage, metadata };
}

/** The files of the services and everything they import, each once. */
function filesOf(registrations: readonly ServiceRegistration[]): DescFile[] {
  const seen = new Map<string, DescFile>();
  const visit = (file: DescFile) => {
    if (seen.has(file.name)) return;
    seen.set(file.name, file);
    for (const dependency of file.dependencies) visit(dependency);
  };
  for (const { service } of registrations) visit(service.file);
  return [...seen.values()];
}
