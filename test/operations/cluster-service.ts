import { once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import { request as httpRequest, type IncomingHttpHeaders } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import type { ExecutionContext } from "ava";
import { type SpawnedService, spawnService } from "../helpers/cluster.js";
import { checkRestResponse } from "../helpers/openapi.js";
import { closeGrpcClient, type Json, keys, type TestServer } from "../helpers/server.js";
import { eventually } from "../helpers/wait.js";

/**
 * The service with WORKERS=2, as `npm start` runs it, for the cluster tests
 * (cluster*.test.ts): started on a fresh data directory and called over
 * connections of their own, which the primary hands to the workers in
 * turn, so the calls of a test land on both. The request log (each line
 * names its worker) tells which worker served which call.
 */

/** The METRICS_TOKEN of every cluster started here. */
export const metricsToken = "metrics-token-for-cluster-tests";

/** A service with two workers, its data directory, and what its processes logged. */
export interface Cluster {
  readonly service: SpawnedService;
  readonly port: number;
  readonly dataDir: string;
}

/**
 * Starts the service with WORKERS=2 on a fresh data directory (or
 * `dataDir`), with the test keys, limits that refuse nothing (unless `env`
 * sets its own), the metrics token and the request log on. `stop` stops it
 * and removes the directory.
 */
export async function launchCluster(
  env: Record<string, string> = {},
  dataDir = mkdtempSync(join(tmpdir(), "referrals-cluster-")),
): Promise<Cluster & { stop(): Promise<void> }> {
  const service = await spawnService({
    DATA_DIR: dataDir,
    WORKERS: "2",
    ADMIN_TOKEN: keys.admin,
    BOOTSTRAP_SECRET_KEY: keys.secret,
    BOOTSTRAP_PUBLIC_KEY: keys.public,
    METRICS_TOKEN: metricsToken,
    LOG_LEVEL: "info",
    RATE_LIMIT_PUBLIC: "1000000/1s",
    RATE_LIMIT_SECRET: "1000000/1s",
    RATE_LIMIT_ADMIN: "1000000/1s",
    RATE_LIMIT_UNAUTHENTICATED: "1000000/1s",
    ...env,
  }).catch((error: unknown) => {
    rmSync(dataDir, { recursive: true, force: true });
    throw error;
  });
  return {
    service,
    port: service.port,
    dataDir,
    async stop() {
      await service.stop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** {@link launchCluster} for one test: stopped and removed when the test ends. */
export async function startCluster(
  t: ExecutionContext,
  env: Record<string, string> = {},
  dataDir?: string,
): Promise<Cluster> {
  const cluster = await launchCluster(env, dataDir);
  t.teardown(() => cluster.stop());
  t.is(cluster.service.workerPids().length, 2, "two workers serve the port");
  return cluster;
}

/** What a REST call answered. */
export interface Answer {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: Json;
}

let requests = 0;

/**
 * A REST call on a connection of its own, closed after the answer, so that
 * the primary hands each call to either worker. Sends an `x-request-id` of
 * its own (see `servedBy`). Rejects when the connection fails or no
 * answer comes within `timeoutMs`.
 */
export function send(
  port: number,
  method: string,
  path: string,
  options: {
    key?: string;
    body?: unknown;
    headers?: Record<string, string>;
    timeoutMs?: number;
  } = {},
): Promise<Answer & { requestId: string }> {
  const requestId = `cluster-${process.pid}-${++requests}`;
  const headers: Record<string, string> = { "x-request-id": requestId, ...options.headers };
  if (options.key !== undefined) headers.authorization = options.key;
  const body = options.body === undefined ? undefined : JSON.stringify(options.body);
  if (body !== undefined) headers["content-type"] = "application/json";
  return new Promise((resolve, reject) => {
    const request = httpRequest(
      {
        host: "127.0.0.1",
        port,
        method,
        path,
        headers,
        // A new connection, closed after its one call.
        agent: false,
        signal: AbortSignal.timeout(options.timeoutMs ?? 20_000),
      },
      (response) => {
        let text = "";
        response.setEncoding("utf8");
        response.on("data", (chunk: string) => {
          text += chunk;
        });
        response.on("error", reject);
        response.on("end", () => {
          const status = response.statusCode ?? 0;
          try {
            checkRestResponse({
              method,
              path,
              status,
              contentType: response.headers["content-type"],
              body: text,
            });
          } catch (error) {
            return reject(error);
          }
          let parsed: unknown = text;
          try {
            parsed = JSON.parse(text);
          } catch {}
          resolve({ status, headers: response.headers, body: parsed, requestId });
        });
      },
    );
    request.on("error", reject);
    request.end(body);
  });
}

/** POST /customers/identify of a new (or known) user with the public key. */
export function identify(
  port: number,
  externalUserId: string,
  options: { environment?: string; timeoutMs?: number } = {},
) {
  return send(port, "POST", "/customers/identify", {
    key: keys.public,
    body: { externalUserId, name: "Clustered", environment: options.environment ?? "production" },
    timeoutMs: options.timeoutMs,
  });
}

/** GET /metrics with the token: the whole service's, whichever worker answers. */
export async function scrape(port: number): Promise<string> {
  const answer = await send(port, "GET", "/metrics", {
    headers: { authorization: `Bearer ${metricsToken}` },
  });
  if (answer.status !== 200) throw new Error(`GET /metrics answered ${answer.status}`);
  return answer.body as string;
}

/** The value of one series (`name{labels}`, exactly as the text writes it); undefined when absent. */
export function seriesValue(metrics: string, series: string): number | undefined {
  for (const line of metrics.split("\n")) {
    if (line.startsWith(`${series} `)) return Number(line.slice(series.length + 1));
  }
  return undefined;
}

/** Which worker (its `worker` log field) served each call, by the call's request id. */
export function servedBy(service: SpawnedService): Map<string, string> {
  const workers = new Map<string, string>();
  for (const line of service.output().split("\n")) {
    if (!line.startsWith("{")) continue;
    try {
      const entry = JSON.parse(line) as Json;
      if (entry.msg === "call" && typeof entry.requestId === "string") {
        workers.set(entry.requestId, String(entry.worker));
      }
    } catch {
      // A line cut by the end of the output so far.
    }
  }
  return workers;
}

/** The workers that served the calls of `requestIds`, once each call's line is written. */
export async function workersOf(service: SpawnedService, requestIds: readonly string[]) {
  const served = await eventually(
    `the request log's lines of ${requestIds.length} calls`,
    () => {
      const all = servedBy(service);
      return requestIds.every((id) => all.has(id)) && all;
    },
    { timeoutMs: 10_000 },
  );
  return new Set(requestIds.map((id) => served.get(id)));
}

/** Runs `work` over `items`, at most `concurrency` at a time. */
export async function inPool<T, R>(
  items: readonly T[],
  concurrency: number,
  work: (item: T) => Promise<R>,
): Promise<R[]> {
  const results: R[] = new Array(items.length);
  let next = 0;
  const runner = async () => {
    while (next < items.length) {
      const index = next++;
      results[index] = await work(items[index] as T);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, runner));
  return results;
}

/**
 * Identify calls of new users from `clients` concurrent clients, each call
 * on a connection of its own, until stopped: the users acknowledged (201),
 * and when (performance.now()) each answer or failure came.
 */
export function writeLoad(
  port: number,
  prefix: string,
  clients: number,
  options: { timeoutMs?: number } = {},
) {
  const acknowledged: { externalUserId: string; requestId: string; at: number }[] = [];
  const failures: { reason: string; at: number }[] = [];
  /** How long each call took to be answered or to fail, in milliseconds. */
  const durations: number[] = [];
  let stopped = false;
  const client = async (index: number) => {
    for (let i = 0; !stopped; i++) {
      const externalUserId = `${prefix}_${index}_${i}`;
      const sent = performance.now();
      try {
        const answer = await identify(port, externalUserId, {
          timeoutMs: options.timeoutMs ?? 4_000,
        }).finally(() => durations.push(performance.now() - sent));
        const at = performance.now();
        if (answer.status === 201) {
          acknowledged.push({ externalUserId, requestId: answer.requestId, at });
        } else failures.push({ reason: `${answer.status} ${JSON.stringify(answer.body)}`, at });
      } catch (error) {
        failures.push({ reason: (error as Error).message, at: performance.now() });
        // The connection failed (a worker died, the port closed): a moment before the next.
        await sleep(20);
      }
    }
  };
  const running = Array.from({ length: clients }, (_, index) => client(index));
  return {
    acknowledged,
    failures,
    durations,
    async stop() {
      stopped = true;
      await Promise.all(running);
    },
  };
}

/** The customers of `externalUserIds` the service does not find (production environment). */
export async function missingThroughService(port: number, externalUserIds: readonly string[]) {
  const found = await inPool(externalUserIds, 8, async (externalUserId) => {
    const answer = await send(
      port,
      "GET",
      `/customers?externalUserId=${encodeURIComponent(externalUserId)}&environment=production`,
      { key: keys.secret },
    );
    return answer.status === 200 && answer.body.total === 1;
  });
  return externalUserIds.filter((_, index) => !found[index]);
}

/**
 * An identify whose headers are sent with `Expect: 100-continue` and whose
 * body waits: once the service answers 100 Continue, a worker has the call
 * in flight; `finish` sends the body and resolves with the answer.
 */
export function slowIdentify(port: number, externalUserId: string) {
  const body = JSON.stringify({ externalUserId, name: "Slow" });
  const request = httpRequest({
    host: "127.0.0.1",
    port,
    method: "POST",
    path: "/customers/identify",
    agent: false,
    headers: {
      authorization: keys.public,
      "content-type": "application/json",
      "content-length": String(Buffer.byteLength(body)),
      expect: "100-continue",
    },
  });
  const answered = new Promise<Answer>((resolve, reject) => {
    request.on("error", reject);
    request.on("response", (response) => {
      let text = "";
      response.setEncoding("utf8");
      response.on("data", (chunk: string) => {
        text += chunk;
      });
      response.on("end", () =>
        resolve({
          status: response.statusCode ?? 0,
          headers: response.headers,
          body: JSON.parse(text),
        }),
      );
    });
  });
  // Keeps an early failure from being unhandled before `finish` is awaited.
  answered.catch(() => {});
  const continued = once(request, "continue");
  request.flushHeaders();
  return {
    externalUserId,
    continued,
    finish(): Promise<Answer> {
      request.end(body);
      return answered;
    },
  };
}

/** A cluster as the helpers' clients call it (`rest`, `grpcCall`): no app in this process. */
export function asTestServer(t: ExecutionContext, cluster: Cluster): TestServer {
  const server: TestServer = {
    get app(): never {
      throw new Error("the service runs in other processes");
    },
    port: cluster.port,
    baseUrl: `http://127.0.0.1:${cluster.port}`,
    dataDir: cluster.dataDir,
    stop: async () => {
      await cluster.service.stop();
    },
  };
  t.teardown(() => closeGrpcClient(server));
  return server;
}
