import { createRequire } from "node:module";
import { type DescFile, toBinary } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import type * as grpc from "@grpc/grpc-js";

const require = createRequire(import.meta.url);

/** The versions of the reflection service, each one streaming method. */
const reflectionPaths = [
  "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
  "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
] as const;

/** One method as `@grpc/reflection` adds it to a server. */
interface ReflectionMethod {
  readonly definition: grpc.MethodDefinition<unknown, unknown>;
  readonly handler: grpc.handleBidiStreamingCall<unknown, unknown>;
}

/**
 * Serves gRPC reflection (v1 and v1alpha) for `files` through
 * `@grpc/reflection`, which is built on the first reflection call instead
 * of at start: building it (every file's descriptor encoded, and the
 * package parsing the reflection service's own .proto files) took about
 * 110 ms of each process's start, for tools (buf curl, grpcurl) that most
 * processes never meet. The server knows both methods from the start, so
 * no call finds them missing; the first one waits for the build.
 */
export function addReflection(server: grpc.Server, files: readonly DescFile[]): void {
  let built: ReadonlyMap<string, ReflectionMethod> | undefined;
  const methodAt = (path: string): ReflectionMethod => {
    built ??= buildReflection(files);
    const method = built.get(path);
    if (!method) throw new Error(`@grpc/reflection serves no ${path}`);
    return method;
  };
  for (const path of reflectionPaths) {
    let resolved: ReflectionMethod | undefined;
    const method = () => {
      resolved ??= methodAt(path);
      return resolved;
    };
    const definition: grpc.MethodDefinition<unknown, unknown> = {
      path,
      requestStream: true,
      responseStream: true,
      requestSerialize: (value) => method().definition.requestSerialize(value),
      requestDeserialize: (bytes) => method().definition.requestDeserialize(bytes),
      responseSerialize: (value) => method().definition.responseSerialize(value),
      responseDeserialize: (bytes) => method().definition.responseDeserialize(bytes),
    };
    server.addService(
      { ServerReflectionInfo: definition },
      {
        ServerReflectionInfo: (call: grpc.ServerDuplexStream<unknown, unknown>) =>
          method().handler(call),
      },
    );
  }
}

/** `@grpc/reflection`'s methods for `files`, as it would add them to a server. */
function buildReflection(files: readonly DescFile[]): ReadonlyMap<string, ReflectionMethod> {
  const { ReflectionService } = require("@grpc/reflection") as typeof import("@grpc/reflection");
  const packageDefinition = {
    "referral.v1": {
      fileDescriptorProtos: files.map((file) =>
        Buffer.from(toBinary(FileDescriptorProtoSchema, file.proto)),
      ),
    },
  };
  const methods = new Map<string, ReflectionMethod>();
  // It adds its services to a server: this one only records them.
  const recorder = {
    addService(service: grpc.ServiceDefinition, implementation: grpc.UntypedServiceImplementation) {
      for (const [name, definition] of Object.entries(service)) {
        methods.set(definition.path, {
          definition: definition as grpc.MethodDefinition<unknown, unknown>,
          handler: implementation[name] as grpc.handleBidiStreamingCall<unknown, unknown>,
        });
      }
    },
  };
  new ReflectionService(packageDefinition as never).addToServer(recorder as unknown as grpc.Server);
  return methods;
}
