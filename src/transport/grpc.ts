import { create, type DescFile, fromBinary, toBinary } from "@bufbuild/protobuf";
import { anyPack, FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import * as grpc from "@grpc/grpc-js";
import { ReflectionService } from "@grpc/reflection";
import { HealthImplementation } from "grpc-health-check";
import { StatusSchema } from "../../gen/google/rpc/status_pb.js";
import { type ErrorLogger, toConnectError } from "./errors.js";
import { CallContext, type Pipeline, type Rpc, type ServiceRegistration } from "./pipeline.js";

/** The grpc-js server with every service, reflection (v1, v1alpha) and health. */
export function createGrpcServer(deps: {
  registrations: readonly ServiceRegistration[];
  pipeline: Pipeline;
  log: ErrorLogger;
  maxMessageBytes: number;
}): grpc.Server {
  const server = new grpc.Server({
    "grpc.max_receive_message_length": deps.maxMessageBytes,
  });
  for (const { rpcs } of deps.registrations) {
    const definition: Record<string, grpc.MethodDefinition<unknown, unknown>> = {};
    const handlers: Record<string, grpc.handleUnaryCall<unknown, unknown>> = {};
    for (const rpc of rpcs) {
      definition[rpc.method.name] = methodDefinition(rpc);
      handlers[rpc.method.name] = unaryHandler(rpc, deps);
    }
    server.addService(definition as grpc.ServiceDefinition, handlers);
  }
  const packageDefinition = {
    "referral.v1": {
      fileDescriptorProtos: filesOf(deps.registrations).map((file) =>
        Buffer.from(toBinary(FileDescriptorProtoSchema, file.proto)),
      ),
    },
  };
  new ReflectionService(packageDefinition as never).addToServer(server);
  new HealthImplementation({
    "": "SERVING",
    ...Object.fromEntries(
      deps.registrations.map(({ service }) => [service.typeName, "SERVING" as const]),
    ),
  }).addToServer(server);
  return server;
}

// Requests stay bytes until the pipeline decodes them, after authentication,
// so a malformed body is INVALID_ARGUMENT like on every other protocol.
function methodDefinition(rpc: Rpc): grpc.MethodDefinition<unknown, unknown> {
  const { method } = rpc;
  return {
    path: `/${rpc.name}`,
    requestStream: false,
    responseStream: false,
    requestSerialize: (value) => value as Buffer,
    requestDeserialize: (bytes) => bytes,
    responseSerialize: (value) => Buffer.from(toBinary(method.output, value as never)),
    responseDeserialize: (bytes) => fromBinary(method.output, bytes),
  };
}

function unaryHandler(
  rpc: Rpc,
  deps: { pipeline: Pipeline; log: ErrorLogger },
): grpc.handleUnaryCall<unknown, unknown> {
  const path = `/${rpc.name}`;
  return (call, callback) => {
    const header = (name: string) => {
      const value = call.metadata.get(name)[0];
      return typeof value === "string" ? value : undefined;
    };
    const context = new CallContext(rpc.method, "grpc", "POST", path, () => {
      const headers = new Headers();
      for (const [name, value] of Object.entries(call.metadata.getMap())) {
        if (typeof value === "string") headers.set(name, value);
      }
      return headers;
    });
    call.on("cancelled", () => context.abort());
    deps
      .pipeline({
        rpc,
        protocol: "grpc",
        header,
        decode: () => decodeBinary(rpc, call.request as Buffer),
        context,
      })
      .then(
        (response) => callback(null, response),
        // The pipeline gives ConnectErrors; this only guards the encoding.
        (error: unknown) => callback(grpcError(toConnectError(error, rpc.name, deps.log))),
      );
  };
}

function decodeBinary(rpc: Rpc, bytes: Buffer) {
  try {
    return fromBinary(rpc.method.input, bytes);
  } catch {
    throw new ConnectError("the request is not a valid protobuf message", Code.InvalidArgument);
  }
}

/** A gRPC status with the error's details in `grpc-status-details-bin`. */
function grpcError(error: ConnectError): Partial<grpc.StatusObject> {
  const metadata = new grpc.Metadata();
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
