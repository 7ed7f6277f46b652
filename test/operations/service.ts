import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as grpc from "@grpc/grpc-js";
import { buildApp } from "../../src/app.js";
import { type Config, loadConfig } from "../../src/config.js";
import type { WebhookSender } from "../../src/delivery/sender.js";
import type { Interceptor } from "../../src/transport/pipeline.js";
import { builtService, serviceEntry } from "../helpers/cluster.js";
import { keys, type TestServer } from "../helpers/server.js";

/** The repository, where a spawned service runs. */
export const repoRoot = new URL("../../", import.meta.url).pathname;

/** A test server that also exposes its configuration. */
export interface OperationsServer extends TestServer {
  readonly config: Config;
}

/**
 * Starts the service in this process like `startServer`, with what the
 * operations tests need on top: test-only interceptors (to hold calls in
 * flight) and a fake webhook sender. `stop` may follow a direct `app.close()`.
 */
export async function startService(
  options: {
    env?: Record<string, string>;
    extraSteps?: Interceptor[];
    sendWebhook?: WebhookSender;
    /** A data directory an earlier service left (`stop({ keepData: true })`): a restart. */
    dataDir?: string;
  } = {},
): Promise<OperationsServer> {
  const dataDir = options.dataDir ?? mkdtempSync(join(tmpdir(), "referrals-ops-"));
  const config = loadConfig({
    DATA_DIR: dataDir,
    ADMIN_TOKEN: keys.admin,
    BOOTSTRAP_SECRET_KEY: keys.secret,
    BOOTSTRAP_PUBLIC_KEY: keys.public,
    LOG_LEVEL: "silent",
    ...options.env,
  });
  const app = await buildApp(config, {
    steps: (standard) => [
      ...standard,
      ...(options.extraSteps ?? []).map((run, index) => ({ name: `test-${index}`, run })),
    ],
    sendWebhook: options.sendWebhook,
  });
  const port = await app.listen(0, "127.0.0.1");
  return {
    app,
    port,
    baseUrl: `http://127.0.0.1:${port}`,
    dataDir,
    config,
    async stop({ keepData = false } = {}) {
      await app.close();
      if (!keepData) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/**
 * The environment of a spawned service: this one without what would point it
 * at another store or port, plus `env`.
 */
export function serviceEnv(env: Record<string, string>): NodeJS.ProcessEnv {
  const inherited = { ...process.env };
  for (const name of ["MONGODB_URI", "MONGODB_DB", "PORT", "HOST", "DATA_DIR", "LOG_LEVEL"]) {
    delete inherited[name];
  }
  return { ...inherited, LOG_LEVEL: "warn", ...env };
}

/** What a spawned process printed, and how it ended. */
export interface Exited {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `npm start`'s entry point (see `serviceEntry`) to its end. */
export async function runService(
  env: Record<string, string>,
  options: { uid?: number; gid?: number } = {},
): Promise<Exited> {
  await builtService();
  const child = spawn(process.execPath, [serviceEntry], {
    cwd: repoRoot,
    env: serviceEnv(env),
    ...options,
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => {
    stdout += chunk;
  });
  child.stderr.on("data", (chunk: Buffer) => {
    stderr += chunk;
  });
  // A service that did start is stopped once it has printed its banner.
  child.stdout.on("data", () => {
    if (/listening on/.test(stdout)) child.kill("SIGTERM");
  });
  return new Promise((resolve, reject) => {
    child.once("error", reject);
    child.once("close", (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
}

/** A TCP connection to the service's port. */
export function openSocket(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1", () => {
      // A reset by the server is what some tests wait for; `close` reports it.
      socket.off("error", reject).on("error", () => {});
      resolve(socket);
    });
    socket.once("error", reject);
  });
}

/** Milliseconds until `socket` closes, or undefined when it is still open after `limitMs`. */
export function closesWithin(socket: Socket, limitMs: number): Promise<number | undefined> {
  const started = performance.now();
  return new Promise((resolve) => {
    if (socket.destroyed) return resolve(0);
    // A paused socket with unread data never sees the server's FIN.
    socket.resume();
    const timer = setTimeout(() => resolve(undefined), limitMs);
    socket.once("close", () => {
      clearTimeout(timer);
      resolve(performance.now() - started);
    });
  });
}

/** Whether a new connection to `port` is refused. */
export function isRefused(port: number): Promise<boolean> {
  return openSocket(port).then(
    (socket) => {
      socket.destroy();
      return false;
    },
    (error: NodeJS.ErrnoException) => error.code === "ECONNREFUSED",
  );
}

const servingStatuses = ["UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"] as const;

/** A grpc.health.v1 status, by its name. */
export type ServingStatus = (typeof servingStatuses)[number];

/** grpc.health.v1.HealthCheckRequest: field 1, the service name. */
function healthRequest(service: string): Buffer {
  const name = Buffer.from(service);
  return Buffer.concat([Buffer.from([0x0a, name.length]), name]);
}

/** grpc.health.v1.HealthCheckResponse: field 1, the status (absent when UNKNOWN). */
function healthStatusOf(bytes: Buffer): ServingStatus {
  return servingStatuses[bytes.length === 0 ? 0 : (bytes[1] ?? 0)] ?? "UNKNOWN";
}

/** `grpc.health.v1.Health/Check` of one service; the gRPC status code when it fails. */
export function healthCheck(port: number, service: string): Promise<ServingStatus | number> {
  const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  return new Promise((resolve) => {
    client.makeUnaryRequest(
      "/grpc.health.v1.Health/Check",
      (value: Buffer) => value,
      (bytes: Buffer) => bytes,
      healthRequest(service),
      (error, response) => {
        client.close();
        resolve(error ? error.code : healthStatusOf(response as Buffer));
      },
    );
  });
}

/** A `grpc.health.v1.Health/Watch` stream: the statuses so far, and a way to end it. */
export function watchHealth(port: number, service: string) {
  const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const statuses: ServingStatus[] = [];
  const stream = client.makeServerStreamRequest(
    "/grpc.health.v1.Health/Watch",
    (value: Buffer) => value,
    (bytes: Buffer) => bytes,
    healthRequest(service),
  );
  stream.on("data", (bytes: Buffer) => statuses.push(healthStatusOf(bytes)));
  stream.on("error", () => {});
  return {
    statuses,
    /** Resolves once `status` has been reported; rejects after 5 s. */
    until: (status: ServingStatus) =>
      waitUntil(() => statuses.includes(status), `health ${status} for "${service}"`),
    end(): void {
      stream.cancel();
      client.close();
    },
  };
}

/** Resolves once `condition` holds (polled every 10 ms); rejects after `timeoutMs`, naming `what`. */
export async function waitUntil(
  condition: () => boolean,
  what: string,
  timeoutMs = 5000,
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!condition()) {
    if (performance.now() > deadline) throw new Error(`waited ${timeoutMs} ms for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
