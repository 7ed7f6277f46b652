import { type CeilingResponses, startCeilings } from "../lib/ceilings.js";
import { type BenchContext, measureWhileAlive, startSeededService } from "../lib/context.js";
import { load } from "../lib/load.js";
import { type LoadResult, medianResult } from "../lib/measure.js";
import { selected } from "../lib/options.js";
import {
  failureNote,
  formatPercent,
  formatRate,
  markdownTable,
  protocolLabel,
  resultCells,
} from "../lib/report.js";
import {
  connectRequest,
  grpcRequest,
  type Protocol,
  readScenarios,
  restRequest,
  rpcPath,
  type Scenario,
} from "../lib/scenarios.js";
import { grpcSender, type HttpRequestSpec } from "../lib/senders.js";

/** One read scenario on one protocol: the service against its bare ceiling. */
export interface ReadRow {
  readonly scenario: string;
  readonly protocol: Protocol;
  readonly service: LoadResult;
  readonly ceiling: LoadResult;
  /** Service req/s over ceiling req/s (medians). */
  readonly ratio: number;
  readonly runs: { readonly service: LoadResult[]; readonly ceiling: LoadResult[] };
}

const protocols: readonly Protocol[] = ["rest", "grpc", "connect"];

/**
 * GetCustomer, ListCampaigns and ListCustomers on REST, gRPC and Connect,
 * each against a bare server answering the same bytes, in the same run.
 * Service and ceiling alternate within every repeat, so drift on a noisy
 * machine falls on both.
 */
export async function runReads(context: BenchContext): Promise<ReadRow[]> {
  const { options, log } = context;
  log(`reads: seeding ${options.baseCustomers} customers and starting the service`);
  const target = await startSeededService(context, { customers: options.baseCustomers });
  try {
    const origin = target.service.origin;
    const scenarios = readScenarios(target.seeded).filter((scenario) =>
      selected(options, scenario.name),
    );
    const responses = await captureResponses(origin, scenarios);
    let ceilings = await startCeilings(responses.ceiling);
    try {
      await checkCeilingsMatch(ceilings.origins, scenarios, responses.connectBodies);
      // Only the service can be lost to a neighbour's kill; it is restarted on the same store.
      const measure = (
        protocol: Protocol,
        scenario: Scenario,
        ceiling: boolean,
        seconds: number,
      ) =>
        ceiling
          ? load(protocol, ceilings.origins[protocol], scenario, { seconds }, options)
          : measureWhileAlive(
              context,
              `reads ${scenario.name}/${protocol}`,
              () => target.service.alive(),
              () => load(protocol, target.service.origin, scenario, { seconds }, options),
              () => target.restart(),
            );
      const runs = new Map<string, { service: LoadResult[]; ceiling: LoadResult[] }>();
      for (let repeat = 0; repeat < options.repeats; repeat++) {
        // New processes for every repeat: on two shared cores a process
        // keeps, for its lifetime, a CPU cost per call up to a third above
        // or below another's running the same code; one pair for all
        // repeats would measure that pair.
        if (repeat > 0) {
          await ceilings.stop();
          await target.restart();
          ceilings = await startCeilings(responses.ceiling);
        }
        if (options.warmupSeconds > 0) {
          log(`reads: warming up every target for ${options.warmupSeconds} s`);
          for (const scenario of scenarios) {
            for (const protocol of protocols) {
              for (const ceiling of [false, true]) {
                await measure(protocol, scenario, ceiling, options.warmupSeconds);
              }
            }
          }
        }
        for (const scenario of scenarios) {
          for (const protocol of protocols) {
            const key = `${scenario.name}/${protocol}`;
            const entry = runs.get(key) ?? { service: [], ceiling: [] };
            runs.set(key, entry);
            const order = repeat % 2 === 0 ? [false, true] : [true, false];
            for (const ceiling of order) {
              const result = await measure(protocol, scenario, ceiling, options.seconds);
              (ceiling ? entry.ceiling : entry.service).push(result);
              log(
                `reads ${repeat + 1}/${options.repeats} ${key} ${ceiling ? "ceiling" : "service"}: ` +
                  `${formatRate(result.rps)} req/s${failureNote(result)}`,
              );
            }
          }
        }
      }
      return scenarios.flatMap((scenario) =>
        protocols.map((protocol) => {
          const entry = runs.get(`${scenario.name}/${protocol}`) ?? { service: [], ceiling: [] };
          const service = medianResult(entry.service);
          const ceiling = medianResult(entry.ceiling);
          return {
            scenario: scenario.name,
            protocol,
            service,
            ceiling,
            ratio: service.rps / ceiling.rps,
            runs: entry,
          };
        }),
      );
    } finally {
      await ceilings.stop();
    }
  } finally {
    await target.dispose();
  }
}

/** The reads table in Markdown. */
export function readsTable(rows: readonly ReadRow[]): string {
  return markdownTable(
    [
      "scenario",
      "protocol",
      "req/s",
      "p50 ms",
      "p99 ms",
      "ceiling req/s",
      "ceiling p50 ms",
      "ceiling p99 ms",
      "of ceiling",
    ],
    rows.map((row) => [
      row.scenario,
      protocolLabel[row.protocol],
      ...resultCells(row.service),
      ...resultCells(row.ceiling),
      formatPercent(row.ratio),
    ]),
  );
}

/**
 * Calls every scenario once on the service: the REST bodies and gRPC
 * messages the ceilings will serve, and the Connect JSON to check the
 * Connect ceiling against. Any failure stops the bench: a benchmark of
 * errors measures nothing.
 */
async function captureResponses(
  origin: string,
  scenarios: readonly Scenario[],
): Promise<{ ceiling: CeilingResponses; connectBodies: Map<string, string> }> {
  const rest: CeilingResponses["rest"][number][] = [];
  const rpc: CeilingResponses["rpc"][number][] = [];
  const connectBodies = new Map<string, string>();
  for (const scenario of scenarios) {
    const restReply = await fetchOnce(origin, restRequest(scenario), `REST ${scenario.name}`);
    rest.push({
      path: scenario.rest.path(0).split("?")[0] as string,
      contentType: restReply.contentType,
      bodyBase64: restReply.body.toString("base64"),
    });
    const message = await grpcOnce(origin, scenario);
    rpc.push({ path: rpcPath(scenario.method), messageBase64: message.toString("base64") });
    const connectReply = await fetchOnce(
      origin,
      connectRequest(scenario),
      `Connect ${scenario.name}`,
    );
    connectBodies.set(scenario.name, connectReply.body.toString("utf8"));
  }
  return { ceiling: { rest, rpc }, connectBodies };
}

/** Checks that each ceiling answers exactly what the service answered. */
async function checkCeilingsMatch(
  origins: Record<Protocol, string>,
  scenarios: readonly Scenario[],
  connectBodies: Map<string, string>,
): Promise<void> {
  for (const scenario of scenarios) {
    const connect = await fetchOnce(origins.connect, connectRequest(scenario), "Connect ceiling");
    if (connect.body.toString("utf8") !== connectBodies.get(scenario.name)) {
      throw new Error(
        `the Connect ceiling of ${scenario.name} answers other bytes than the service`,
      );
    }
    await grpcOnce(origins.grpc, scenario);
  }
}

async function fetchOnce(
  origin: string,
  spec: HttpRequestSpec,
  what: string,
): Promise<{ body: Buffer; contentType: string }> {
  const response = await fetch(`${origin}${spec.path(0)}`, {
    method: spec.method,
    headers: spec.headers,
    body: spec.body?.(0),
  });
  const body = Buffer.from(await response.arrayBuffer());
  if (response.status !== 200) {
    throw new Error(`${what} answered ${response.status}: ${body.toString("utf8").slice(0, 300)}`);
  }
  return { body, contentType: response.headers.get("content-type") ?? "application/json" };
}

async function grpcOnce(origin: string, scenario: Scenario): Promise<Buffer> {
  const sender = await grpcSender(origin, grpcRequest(scenario), 1);
  try {
    const reply = await sender.call(0);
    if (reply.status !== 0) {
      throw new Error(`gRPC ${scenario.name} at ${origin} ended with grpc-status ${reply.status}`);
    }
    return reply.message;
  } finally {
    sender.close();
  }
}
