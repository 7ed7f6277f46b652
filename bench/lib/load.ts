import { autocannonLoad } from "./autocannon-load.js";
import { drive } from "./drive.js";
import { h2loadCanSend, h2loadHttp1Run, h2loadRun, hasH2load } from "./h2load.js";
import type { LoadResult } from "./measure.js";
import type { BenchOptions } from "./options.js";
import {
  connectRequest,
  grpcRequest,
  type Protocol,
  restRequest,
  type Scenario,
} from "./scenarios.js";
import { grpcSender, http1Sender } from "./senders.js";

/** How long and how hard to load. */
export interface LoadShape {
  readonly seconds: number;
  /** Open loop at this many requests per second; closed loop at full speed when unset. */
  readonly rate?: number;
  /** Distinct requests available (a seeded pool); unlimited when unset. */
  readonly limit?: number;
}

let h2loadChecked: boolean | undefined;

/** The generator gRPC runs use: h2load when installed, else the bench's own HTTP/2 client. */
export function grpcGenerator(): "h2load" | "node:http2" {
  h2loadChecked ??= hasH2load();
  return h2loadChecked ? "h2load" : "node:http2";
}

/** The generator closed-loop HTTP/1.1 runs of one repeated request use: h2load when installed. */
export function http1Generator(): "h2load" | "autocannon" {
  return grpcGenerator() === "h2load" ? "h2load" : "autocannon";
}

/**
 * Loads `origin` with `scenario` over `protocol`. Closed-loop runs of one
 * repeated request use h2load when it is installed (HTTP/1.1 and gRPC), the
 * cheapest generator for a machine shared with the service; other closed-loop
 * HTTP/1.1 runs use autocannon. The bench's own generators take the rest:
 * gRPC calls that differ per request (h2load sends one body file), and every
 * rate-limited run
 * (autocannon's rate limit sends each second's quota in a burst, which
 * measures a saturated server, not one at that rate).
 */
export async function load(
  protocol: Protocol,
  origin: string,
  scenario: Scenario,
  shape: LoadShape,
  options: BenchOptions,
): Promise<LoadResult> {
  const { seconds, rate, limit } = shape;
  if (protocol === "grpc") {
    const spec = grpcRequest(scenario);
    if (rate === undefined && scenario.constant && grpcGenerator() === "h2load") {
      return h2loadRun(origin, spec, {
        connections: options.h2Connections,
        streams: Math.max(1, Math.round(options.concurrency / options.h2Connections)),
        seconds,
      });
    }
    const sender = await grpcSender(origin, spec, options.h2Connections);
    try {
      return await drive(sender.send, { seconds, rate, limit, concurrency: options.concurrency });
    } finally {
      sender.close();
    }
  }
  const spec = protocol === "rest" ? restRequest(scenario) : connectRequest(scenario);
  if (rate === undefined) {
    if (scenario.constant && http1Generator() === "h2load" && h2loadCanSend(spec)) {
      return h2loadHttp1Run(origin, spec, { connections: options.concurrency, seconds });
    }
    return autocannonLoad(origin, spec, { connections: options.concurrency, seconds, limit });
  }
  const sender = await http1Sender(origin, spec, options.concurrency);
  try {
    return await drive(sender.send, { seconds, rate, limit });
  } finally {
    sender.close();
  }
}
