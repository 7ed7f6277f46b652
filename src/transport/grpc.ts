import { create, type DescFile, fromBinary, type Message, toBinary } from "@bufbuild/protobuf";
import { anyPack, FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import type { ConnectError } from "@connectrpc/connect";
import * as grpc from "@grpc/grpc-js";
import { ReflectionService } from "@grpc/reflection";
import { HealthImplementation } from "grpc-health-check";
import { StatusSchema } from "../../gen/google/rpc/status_pb.js";
import type { Authenticator } from "./auth.js";
import { callContext } from "./call-context.js";
import { type ErrorLogger, toConnectError } from "./errors.js";
import type { Rpc, ServiceRegistration } from "./routes.js";
import { rpcsOf } from "./routes.js";

/** The grpc-js server with every service, reflection (v1, v1alpha) and health. */
export function createGrpcServer(deps: {
  registrations: readonly ServiceRegistration[];
  authenticator: Authenticator;
  log: ErrorLogger;
  maxMessageBytes: number;
}): { server: grpc.Server; health: HealthImplementation } {
  const server = new grpc.Server({
    "grpc.max_receive_message_length": deps.maxMessageBytes,
  });
  const rpcs = rpcsOf(deps.registrations);
  for (const { service } of deps.registrations) {
    const definition: Record<string, grpc.MethodDefinition<unknown, unknown>> = {};
    const handlers: Record<string, grpc.handleUnaryCall<unknown, unknown>> = {};
    for (const rpc of rpcs.filter((r) => r.service === service)) {
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
  const health = new HealthImplementation({
    "": "SERVING",
    ...Object.fromEntries(
      deps.registrations.map(({ service }) => [service.typeName, "SERVING" as const]),
    ),
  });
  health.addToServer(server);
  return { server, health };
}

function methodDefinition(rpc: Rpc): grpc.MethodDefinition<unknown, unknown> {
  const { method } = rpc;
  return {
    path: `/${rpc.service.typeName}/${method.name}`,
    requestStream: false,
    responseStream: false,
    requestSerialize: (value) => Buffer.from(toBinary(method.input, value as never)),
    requestDeserialize: (bytes) => fromBinary(method.input, bytes),
    responseSerialize: (value) => Buffer.from(toBinary(method.output, value as never)),
    responseDeserialize: (bytes) => fromBinary(method.output, bytes),
  };
}

function unaryHandler(
  rpc: Rpc,
  deps: { authenticator: Authenticator; log: ErrorLogger },
): grpc.handleUnaryCall<unknown, unknown> {
  const path = `/${rpc.service.typeName}/${rpc.method.name}`;
  return (call, callback) => {
    const controller = new AbortController();
    call.on("cancelled", () => controller.abort());
    const authorization = call.metadata.get("authorization")[0];
    deps.authenticator
      .authenticate(rpc.method, typeof authorization === "string" ? authorization : undefined)
      .then((tenant) =>
        rpc.handler(
          call.request as Message,
          callContext({
            service: rpc.service,
            method: rpc.method,
            protocolName: "grpc",
            requestMethod: "POST",
            url: path,
            tenant,
            signal: controller.signal,
          }),
        ),
      )
      .then(
        (response) => callback(null, response),
        (error: unknown) => callback(grpcError(toConnectError(error, path, deps.log))),
      );
  };
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
