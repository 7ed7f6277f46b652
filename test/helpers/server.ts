import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { request as httpsRequest } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import {
  create,
  type DescMessage,
  type DescMethod,
  type DescService,
  fromBinary,
  type MessageInitShape,
  type MessageShape,
  toBinary,
} from "@bufbuild/protobuf";
import { type Client, type Code, createClient } from "@connectrpc/connect";
import { createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";
import * as grpc from "@grpc/grpc-js";
import test from "ava";
import { type App, buildApp } from "../../src/app.js";
import { loadConfig } from "../../src/config.js";
import type { Clock, Ticker } from "../../src/domain/tenancy.js";
import { withoutOperations } from "../../src/transport/interceptors.js";
import type { ServiceRegistration } from "../../src/transport/pipeline.js";
import { type SpawnedService, spawnService } from "./cluster.js";
import { dropDatabase, type EngineName, freshDatabaseName, mongodbUri } from "./engines.js";
import { checkRestResponse } from "./openapi.js";

/** The bootstrap keys and admin token every test server uses. */
export const keys = {
  secret: "sk_test_secret_key_for_tests_000000000000",
  public: "pk_test_public_key_for_tests_000000000000",
  admin: "admin-token-for-tests",
};

/** A running service on a loopback port with a temporary embedded store. */
export interface TestServer {
  readonly app: App;
  readonly port: number;
  readonly baseUrl: string;
  readonly dataDir: string;
  /** With `tls`, the self-signed certificate clients must trust (PEM). */
  readonly ca?: Buffer;
  /** With `workers` above 1, its processes: to kill the primary or a worker as a crash would. */
  readonly cluster?: SpawnedService;
  /** Stops the service; `keepData` leaves the directory for a restart. */
  stop(options?: { keepData?: boolean }): Promise<void>;
}

/** Whether any file of the server's data directory holds `text`, as UTF-8 bytes. */
export function dataDirHolds(server: TestServer, text: string): boolean {
  const needle = Buffer.from(text);
  return readdirSync(server.dataDir).some((file) =>
    readFileSync(join(server.dataDir, file)).includes(needle),
  );
}

/** How a test server is started. */
export interface ServerOptions {
  /** The embedded store's directory; a new temporary one when unset. */
  readonly dataDir?: string;
  /** The store engine; "mongodb" uses MONGODB_URI with a fresh database. */
  readonly engine?: EngineName;
  /** More configuration variables. */
  readonly env?: Record<string, string>;
  /** The service's clock; the real time when unset. */
  readonly clock?: Clock;
  /** When open streams poll (see `manualTicker`); every STREAM_POLL_INTERVAL when unset. */
  readonly streamTicks?: Ticker;
  /** Replaces the services every transport serves, given the standard ones (see `buildApp`). */
  readonly registrations?: (standard: ServiceRegistration[]) => ServiceRegistration[];
  /** Receives every log line (set LOG_LEVEL in `env` too: tests default to silent). */
  readonly logTo?: { write(line: string): void };
  /** False builds the bench's variant without the operations steps (see `buildApp`). */
  readonly operations?: boolean;
  /** Serves TLS with a throwaway certificate for localhost (see `selfSignedCertificate`). */
  readonly tls?: boolean;
  /**
   * Above 1, the service runs as `npm start` runs it with WORKERS set, in
   * child processes (a primary and its workers): `app` is not available,
   * and `clock`, `streamTicks`, `registrations`, `logTo` and `operations`
   * do not apply. `"auto"` is the default configuration, as a user runs
   * it: WORKERS unset, one worker per core (see {@link asUsersRunIt}).
   */
  readonly workers?: number | "auto";
}

/**
 * The end-to-end suites (the docs' examples, the browser, the CLI) run the
 * service as a user does, on its default configuration: a primary and a
 * worker per core, not one process.
 */
export const asUsersRunIt = { workers: "auto" } as const satisfies ServerOptions;

/**
 * A throwaway self-signed certificate for `localhost` and 127.0.0.1, made
 * with openssl in `dir`: the files for TLS_CERT_FILE and TLS_KEY_FILE.
 */
export function selfSignedCertificate(dir: string): { certFile: string; keyFile: string } {
  const certFile = join(dir, "cert.pem");
  const keyFile = join(dir, "key.pem");
  execFileSync(
    "openssl",
    [
      "req",
      "-x509",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:prime256v1",
      "-nodes",
      "-days",
      "1",
      "-subj",
      "/CN=localhost",
      "-addext",
      "subjectAltName=DNS:localhost,IP:127.0.0.1",
      "-keyout",
      keyFile,
      "-out",
      certFile,
    ],
    { stdio: "ignore" },
  );
  return { certFile, keyFile };
}

/** Starts the service as `npm start` would, on port 0, with the test keys. */
export async function startServer(options: ServerOptions = {}): Promise<TestServer> {
  const dataDir = options.dataDir ?? mkdtempSync(join(tmpdir(), "referrals-test-"));
  const certificate = options.tls
    ? selfSignedCertificate(mkdtempSync(join(tmpdir(), "referrals-tls-")))
    : undefined;
  const mongodbDb = options.engine === "mongodb" ? freshDatabaseName("server") : undefined;
  const env = {
    DATA_DIR: dataDir,
    ...(mongodbDb
      ? {
          MONGODB_URI: mongodbUri(),
          MONGODB_DB: mongodbDb,
          WEBHOOK_SECRET_KEY: Buffer.alloc(32, 7).toString("base64"),
        }
      : {}),
    ADMIN_TOKEN: keys.admin,
    BOOTSTRAP_SECRET_KEY: keys.secret,
    BOOTSTRAP_PUBLIC_KEY: keys.public,
    LOG_LEVEL: "silent",
    // Suites send thousands of calls from one address, many with one key:
    // limits that count every call but never refuse one.
    // test/transport/rate-limit.test.ts sets small ones.
    RATE_LIMIT_PUBLIC: "1000000/1s",
    RATE_LIMIT_SECRET: "1000000/1s",
    RATE_LIMIT_ADMIN: "1000000/1s",
    RATE_LIMIT_UNAUTHENTICATED: "1000000/1s",
    RATE_LIMIT_CODE_LOOKUPS: "1000000/1s",
    ...(certificate
      ? { TLS_CERT_FILE: certificate.certFile, TLS_KEY_FILE: certificate.keyFile }
      : {}),
    ...options.env,
  };
  const { workers = 1 } = options;
  if (workers === "auto" || workers > 1) {
    // Unset, WORKERS is `auto`: the service's default.
    const service = await spawnService(
      workers === "auto" ? env : { ...env, WORKERS: String(workers) },
    );
    return {
      get app(): App {
        throw new Error("a test server with workers runs in other processes: it has no app here");
      },
      port: service.port,
      baseUrl: certificate
        ? `https://localhost:${service.port}`
        : `http://127.0.0.1:${service.port}`,
      dataDir,
      ...(certificate ? { ca: readFileSync(certificate.certFile) } : {}),
      cluster: service,
      async stop({ keepData = false } = {}) {
        await service.stop();
        if (keepData) return;
        rmSync(dataDir, { recursive: true, force: true });
        if (mongodbDb) await dropDatabase(mongodbDb);
      },
    };
  }
  const config = loadConfig(env);
  const app = await buildApp(config, {
    clock: options.clock,
    streamTicks: options.streamTicks,
    registrations: options.registrations,
    logTo: options.logTo,
    ...(options.operations === false ? { steps: withoutOperations } : {}),
  });
  const port = await app.listen(0, "127.0.0.1");
  return {
    app,
    port,
    // The certificate names localhost, as a client must call it.
    baseUrl: certificate ? `https://localhost:${port}` : `http://127.0.0.1:${port}`,
    dataDir,
    ...(certificate ? { ca: readFileSync(certificate.certFile) } : {}),
    async stop({ keepData = false } = {}) {
      await app.close();
      if (keepData) return;
      rmSync(dataDir, { recursive: true, force: true });
      if (mongodbDb) await dropDatabase(mongodbDb);
    },
  };
}

/** Longer than any stop takes: its drain's grace (10 s) and the store's close. */
const stopWithinMs = 60_000;

/**
 * Stops a file's server, or ends the file's process when the stop does not
 * end: ava waits for the process without a timeout once every test has
 * reported, and a stop that never ended held a clean-clone run until it
 * was killed. What is still open is printed first, to say where it hung.
 */
async function stopWithin(server: TestServer, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const stopped = await Promise.race([
    server.stop().then(() => true),
    new Promise<false>((resolve) => {
      timer = setTimeout(() => resolve(false), ms);
    }),
  ]);
  clearTimeout(timer);
  if (stopped) return;
  const open = new Map<string, number>();
  for (const kind of process.getActiveResourcesInfo()) open.set(kind, (open.get(kind) ?? 0) + 1);
  const listed = [...open].map(([kind, count]) => `${kind} ×${count}`).join(", ");
  console.error(`the test server's stop did not end within ${ms} ms; open: ${listed}`);
  process.exit(1);
}

/**
 * Starts one server for the test file (in a serial `before` hook, ahead of
 * the file's own serial hooks) and stops it afterwards. The handle forwards
 * to that server, so it can be passed around before the server exists.
 */
export function useServer(options: ServerOptions = {}): TestServer {
  let started: TestServer | undefined;
  // Serial, so it runs (in declaration order) before the file's own setup.
  test.serial.before(async () => {
    started = await startServer(options);
  });
  test.after.always(async () => {
    if (!started) return;
    closeGrpcClient(started);
    await stopWithin(started, stopWithinMs);
  });
  const current = (): TestServer => {
    if (!started) throw new Error("the test server is not started yet");
    return started;
  };
  return {
    get app() {
      return current().app;
    },
    get port() {
      return current().port;
    },
    get baseUrl() {
      return current().baseUrl;
    },
    get dataDir() {
      return current().dataDir;
    },
    get ca() {
      return current().ca;
    },
    stop: (stopOptions) => current().stop(stopOptions),
  };
}

/** Response JSON as the tests read it: any shape, asserted field by field. */
// biome-ignore lint/suspicious/noExplicitAny: assertions read arbitrary response JSON.
export type Json = any;

/** A REST call with fetch; the parsed JSON body (or text) and status. */
export async function rest(
  server: TestServer,
  method: string,
  path: string,
  options: {
    key?: string;
    body?: unknown;
    rawBody?: string;
    contentType?: string;
    headers?: Record<string, string>;
    /** "2" sends the request over cleartext HTTP/2 (prior knowledge), on the server's shared session. */
    httpVersion?: HttpVersion;
  } = {},
): Promise<{ status: number; body: Json; headers: Headers }> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.key !== undefined) headers.authorization = options.key;
  let body: string | undefined;
  if (options.rawBody !== undefined || options.body !== undefined) {
    headers["content-type"] = options.contentType ?? "application/json";
    body = options.rawBody ?? JSON.stringify(options.body);
  }
  const response = await httpFetch(
    server,
    options.httpVersion ?? "1.1",
    method,
    path,
    headers,
    body,
  );
  const text = await response.text();
  // A response the OpenAPI document does not describe fails the calling test.
  checkRestResponse({
    method,
    path,
    status: response.status,
    contentType: response.headers.get("content-type"),
    body: text,
  });
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {}
  return { status: response.status, body: parsed, headers: response.headers };
}

/** The HTTP versions the port serves every protocol on. */
export type HttpVersion = "1.1" | "2";

const http2Sessions = new Map<number, Http2SessionManager>();

/** The cleartext HTTP/2 session manager the test's HTTP/2 clients of a server share. */
export function http2SessionOf(server: TestServer): Http2SessionManager {
  let manager = http2Sessions.get(server.port);
  if (!manager) {
    manager = new Http2SessionManager(server.baseUrl, {}, server.ca ? { ca: server.ca } : {});
    http2Sessions.set(server.port, manager);
  }
  return manager;
}

/**
 * A request on the server's port over an HTTP version, cleartext or (for a
 * server with `ca`) TLS, answered as fetch answers.
 */
export function httpFetch(
  server: TestServer,
  httpVersion: HttpVersion,
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: string | Uint8Array,
): Promise<Response> {
  if (httpVersion === "2") return http2Fetch(server, method, path, headers, body);
  if (!server.ca) return fetch(`${server.baseUrl}${path}`, { method, headers, body });
  return httpsFetch(server, method, path, headers, body);
}

/** HTTPS over HTTP/1.1 trusting the server's certificate, which Node's fetch cannot be told. */
function httpsFetch(
  server: TestServer,
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: string | Uint8Array,
): Promise<Response> {
  return new Promise((resolve, reject) => {
    const request = httpsRequest(
      `${server.baseUrl}${path}`,
      { method, headers, ca: server.ca },
      (response) =>
        resolve(responseOf(method, response.statusCode ?? 0, response.headers, response)),
    );
    request.on("error", reject);
    request.end(body === undefined ? undefined : Buffer.from(body));
  });
}

/**
 * A request over HTTP/2 (cleartext with prior knowledge, or TLS), answered as
 * fetch answers: Node's fetch speaks HTTP/1.1 only.
 */
export async function http2Fetch(
  server: TestServer,
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: string | Uint8Array,
): Promise<Response> {
  const stream = await http2SessionOf(server).request(method, path, headers, {});
  return new Promise((resolve, reject) => {
    stream.on("response", (received: Record<string, unknown>) =>
      resolve(responseOf(method, Number(received[":status"]), received, stream)),
    );
    stream.on("error", reject);
    stream.end(body === undefined ? undefined : Buffer.from(body));
  });
}

/**
 * What node:https or node:http2 received, as fetch's Response (HTTP/2's
 * pseudo-headers left out), its body streamed as it arrives (a stream's
 * events can be read before it ends; cancelling the body resets the request).
 */
function responseOf(
  method: string,
  status: number,
  headers: Record<string, unknown>,
  body: Readable,
): Response {
  const answered = new Headers();
  for (const [name, value] of Object.entries(headers)) {
    if (name.startsWith(":") || value === undefined) continue;
    for (const item of Array.isArray(value) ? value : [value]) answered.append(name, String(item));
  }
  const nullBody = status === 204 || status === 304 || method === "HEAD";
  if (nullBody) body.resume();
  return new Response(nullBody ? null : (Readable.toWeb(body) as ReadableStream), {
    status,
    headers: answered,
  });
}

/** A Connect client, JSON or binary, over HTTP/1.1 or cleartext HTTP/2. */
export function connectClient<S extends DescService>(
  server: TestServer,
  service: S,
  options: { key?: string; binary?: boolean; httpVersion?: HttpVersion } = {},
): Client<S> {
  const transport = createConnectTransport({
    baseUrl: server.baseUrl,
    ...(options.httpVersion === "2"
      ? { httpVersion: "2", sessionManager: http2SessionOf(server) }
      : { httpVersion: "1.1", ...(server.ca ? { nodeOptions: { ca: server.ca } } : {}) }),
    useBinaryFormat: options.binary ?? false,
    interceptors: options.key
      ? [
          (next) => (request) => {
            request.header.set("authorization", options.key as string);
            return next(request);
          },
        ]
      : [],
  });
  return createClient(service, transport);
}

/** The outcome of a gRPC call: the response, or the status code and message. */
export type GrpcOutcome<O extends DescMessage> =
  | { ok: true; message: MessageShape<O> }
  | { ok: false; code: Code; details: string; metadata: grpc.Metadata };

const grpcClients = new Map<number, grpc.Client>();

/** A unary call with a plain @grpc/grpc-js client (HTTP/2) on the same port. */
export function grpcCall<I extends DescMessage, O extends DescMessage>(
  server: TestServer,
  method: DescMethod & { input: I; output: O },
  request: MessageInitShape<I>,
  key?: string,
): Promise<GrpcOutcome<O>> {
  let client = grpcClients.get(server.port);
  if (!client) {
    client = server.ca
      ? new grpc.Client(`localhost:${server.port}`, grpc.credentials.createSsl(server.ca))
      : new grpc.Client(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure());
    grpcClients.set(server.port, client);
  }
  const metadata = new grpc.Metadata();
  if (key !== undefined) metadata.set("authorization", key);
  const path = `/${method.parent.typeName}/${method.name}`;
  return new Promise((resolve) => {
    (client as grpc.Client).makeUnaryRequest(
      path,
      (value: MessageShape<I>) => Buffer.from(toBinary(method.input, value)),
      (bytes: Buffer) => fromBinary(method.output, bytes),
      create(method.input, request),
      metadata,
      (error, message) => {
        if (error) {
          resolve({
            ok: false,
            code: error.code as number as Code,
            details: error.details,
            metadata: error.metadata,
          });
        } else resolve({ ok: true, message: message as MessageShape<O> });
      },
    );
  });
}

/** Closes the cached gRPC client and HTTP/2 session of a server. */
export function closeGrpcClient(server: TestServer): void {
  grpcClients.get(server.port)?.close();
  grpcClients.delete(server.port);
  http2Sessions.get(server.port)?.abort();
  http2Sessions.delete(server.port);
}
