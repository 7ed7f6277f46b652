import type { AddressInfo } from "node:net";
import { type DescMethod, type DescService, fromBinary } from "@bufbuild/protobuf";
import { fastifyConnectPlugin } from "@connectrpc/connect-fastify";
import * as grpc from "@grpc/grpc-js";
import Fastify from "fastify";
import { CampaignsService } from "../../gen/referral/v1/campaigns_pb.js";
import { CustomersService } from "../../gen/referral/v1/customers_pb.js";
import { ReferralsService } from "../../gen/referral/v1/referrals_pb.js";
import { firstMessage, forkBenchProcess, stopChild } from "./processes.js";

/**
 * The response bytes the ceilings serve, captured from the service in the
 * same run: a REST body per path, and a gRPC response message per method
 * (Connect encodes that same message).
 */
export interface CeilingResponses {
  readonly rest: readonly { path: string; contentType: string; bodyBase64: string }[];
  readonly rpc: readonly { path: string; messageBase64: string }[];
}

/** Where the bare servers listen. */
export interface CeilingOrigins {
  readonly rest: string;
  readonly grpc: string;
  readonly connect: string;
}

const services: readonly DescService[] = [CustomersService, CampaignsService, ReferralsService];

/** The RPC whose gRPC path (`/package.Service/Method`) this is. */
export function methodOfPath(path: string): DescMethod {
  for (const service of services) {
    for (const method of service.methods) {
      if (`/${service.typeName}/${method.name}` === path) return method;
    }
  }
  throw new Error(`no RPC at ${path}`);
}

/**
 * Starts the three bare servers in this process: a Fastify route per REST
 * path sending the captured bytes; a grpc-js handler per method whose
 * serializers pass bytes through; and connect-fastify (Connect and gRPC-Web,
 * as the service enables) returning the decoded message. Each does nothing
 * else, which is what makes it a ceiling.
 */
export async function listenCeilings(responses: CeilingResponses): Promise<CeilingOrigins> {
  const rest = Fastify({ logger: false });
  for (const { path, contentType, bodyBase64 } of responses.rest) {
    const body = Buffer.from(bodyBase64, "base64");
    rest.get(path, (_request, reply) => reply.type(contentType).send(body));
  }
  await rest.listen({ port: 0, host: "127.0.0.1" });

  const grpcServer = new grpc.Server();
  const identity = (bytes: Buffer) => bytes;
  for (const { path, messageBase64 } of responses.rpc) {
    const message = Buffer.from(messageBase64, "base64");
    const name = path.split("/").at(-1) as string;
    grpcServer.addService(
      {
        [name]: {
          path,
          requestStream: false,
          responseStream: false,
          requestSerialize: identity,
          requestDeserialize: identity,
          responseSerialize: identity,
          responseDeserialize: identity,
        },
      },
      {
        [name]: (_call: unknown, callback: grpc.sendUnaryData<Buffer>) => callback(null, message),
      },
    );
  }
  const grpcPort = await new Promise<number>((resolve, reject) =>
    grpcServer.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (error, port) =>
      error ? reject(error) : resolve(port),
    ),
  );

  const connect = Fastify({ logger: false });
  await connect.register(fastifyConnectPlugin, {
    routes(router) {
      for (const { path, messageBase64 } of responses.rpc) {
        const method = methodOfPath(path);
        const message = fromBinary(method.output, Buffer.from(messageBase64, "base64"));
        router.rpc(method as DescMethod & { methodKind: "unary" }, () => message as never);
      }
    },
    grpc: false,
    grpcWeb: true,
    connect: true,
  });
  await connect.listen({ port: 0, host: "127.0.0.1" });

  const portOf = (server: { address(): AddressInfo | string | null }) =>
    (server.address() as AddressInfo).port;
  return {
    rest: `http://127.0.0.1:${portOf(rest.server)}`,
    grpc: `http://127.0.0.1:${grpcPort}`,
    connect: `http://127.0.0.1:${portOf(connect.server)}`,
  };
}

/** The ceilings, running in a process of their own like the service. */
export interface CeilingProcess {
  readonly origins: CeilingOrigins;
  /** False once the process has exited. */
  alive(): boolean;
  stop(): Promise<void>;
}

/** Forks `bench/ceiling-server.ts` with the captured responses. */
export async function startCeilings(responses: CeilingResponses): Promise<CeilingProcess> {
  const child = forkBenchProcess("bench/ceiling-server.ts");
  const ready = firstMessage<CeilingOrigins>(child);
  child.send(responses);
  const origins = await ready;
  return {
    origins,
    alive: () => child.exitCode === null && child.signalCode === null,
    stop: () => stopChild(child),
  };
}

/** What the share links' ceiling answers: the service's redirect, without the service. */
export interface LinkCeilingShape {
  /** The campaign's `refereeLandingPageUrl`, without a query of its own. */
  readonly landingPage: string;
}

/**
 * Starts the share links' bare ceiling in this process: a Fastify route
 * `/r/:code` answering what the service answers a person, `302` to the
 * landing page with `ref` and `rclk`, `cache-control: no-store` and
 * `referrer-policy: no-referrer`. The click id has the service's length
 * (`clk_`, 9 base-36 digits of time, 16 hex digits) but comes from a
 * counter: the same bytes, without the lookups and the write.
 */
export async function listenLinkCeiling(shape: LinkCeilingShape): Promise<string> {
  const app = Fastify({ logger: false });
  const time = Date.now().toString(36).padStart(9, "0");
  let clicks = 0;
  app.get<{ Params: { code: string } }>("/r/:code", (request, reply) => {
    const clickId = `clk_${time}${(clicks++).toString(16).padStart(16, "0")}`;
    reply.header("cache-control", "no-store");
    reply.header("referrer-policy", "no-referrer");
    return reply.redirect(`${shape.landingPage}?ref=${request.params.code}&rclk=${clickId}`, 302);
  });
  await app.listen({ port: 0, host: "127.0.0.1" });
  return `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
}

/** The share links' ceiling, running in a process of its own like the service. */
export interface LinkCeilingProcess {
  readonly origin: string;
  /** False once the process has exited. */
  alive(): boolean;
  stop(): Promise<void>;
}

/** Forks `bench/link-ceiling-server.ts` with the redirect's shape. */
export async function startLinkCeiling(shape: LinkCeilingShape): Promise<LinkCeilingProcess> {
  const child = forkBenchProcess("bench/link-ceiling-server.ts");
  const ready = firstMessage<string>(child);
  child.send(shape);
  const origin = await ready;
  return {
    origin,
    alive: () => child.exitCode === null && child.signalCode === null,
    stop: () => stopChild(child),
  };
}
