import type { DescMessage, DescService } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import { codeToHttpStatus, errorToJson } from "@connectrpc/connect/protocol-connect";
import { fastifyConnectPlugin } from "@connectrpc/connect-fastify";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { checkProtoJson } from "../contract/proto-json.js";
import { type ErrorLogger, toConnectError } from "./errors.js";
import type { Pipeline, Rpc, ServiceRegistration } from "./pipeline.js";

/**
 * Serves the Connect protocol (JSON and binary) and gRPC-Web over HTTP/1.1
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
  const inputByPath = new Map<string, DescMessage>();
  for (const { rpcs } of deps.registrations) {
    for (const rpc of rpcs) inputByPath.set(`/${rpc.name}`, rpc.method.input);
  }
  await app.register(async (scope) => {
    // Only what fails before connect-es answers lands here: the JSON check below.
    scope.setErrorHandler((error, request, reply) => {
      const connectError = toConnectError(error, request.url, deps.log);
      return reply
        .code(codeToHttpStatus(connectError.code))
        .type("application/json")
        .send(errorToJson(connectError, undefined));
    });
    scope.addHook("preHandler", async (request) => {
      const input = inputByPath.get(request.url.split("?")[0] ?? "");
      if (input && isUncompressedUnaryJson(request)) {
        const json = await readJson(request, deps.maxBodyBytes);
        checkProtoJson(input, json);
        // connect-fastify hands a parsed body to connect-es as it is.
        request.body = json;
      }
    });
    await scope.register(fastifyConnectPlugin, {
      routes(router) {
        for (const registration of deps.registrations) {
          router.service(registration.service, connectImplementation(registration, deps.pipeline));
        }
      },
      grpc: false,
      grpcWeb: true,
      connect: true,
      readMaxBytes: deps.maxBodyBytes,
      // A field or enum word the contract lacks is refused, as on REST.
      jsonOptions: { ignoreUnknownFields: false },
    });
  });
}

/** The service as connect-es calls it: each method enters the pipeline. */
function connectImplementation(registration: ServiceRegistration, pipeline: Pipeline) {
  const entry = (rpc: Rpc) => (request: never, context: HandlerContext) =>
    pipeline({
      rpc,
      protocol: context.protocolName === "grpc-web" ? "grpc-web" : "connect",
      header: (name) => context.requestHeader.get(name) ?? undefined,
      request,
      context,
    });
  return Object.fromEntries(
    registration.rpcs.map((rpc) => [rpc.method.localName, entry(rpc)]),
  ) as ServiceImpl<DescService>;
}

function isUncompressedUnaryJson(request: FastifyRequest): boolean {
  if (request.method !== "POST") return false;
  const type = request.headers["content-type"]?.split(";")[0]?.trim().toLowerCase();
  const encoding = request.headers["content-encoding"];
  return type === "application/json" && (!encoding || encoding === "identity");
}

/** The body as JSON, refused past the size limit or when it does not parse. */
async function readJson(request: FastifyRequest, maxBytes: number): Promise<unknown> {
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
  const text = Buffer.concat(chunks).toString("utf8");
  try {
    return JSON.parse(text === "" ? "{}" : text);
  } catch {
    throw new ConnectError("the body is not valid JSON", Code.InvalidArgument);
  }
}
