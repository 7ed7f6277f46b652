import { createPrivateKey, X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { resolve } from "node:path";
import { createSecureContext } from "node:tls";
import proxyaddr from "@fastify/proxy-addr";
import { defaultFraudPolicy, type FraudPolicy } from "./domain/fraud-rules.js";
import { defaultRetrySchedule } from "./domain/webhook-delivery.js";
import { defaultEventRetentionMs } from "./store/retention.js";
import { parseSecretKey } from "./store/secret-box.js";
import type { StoreConfig } from "./store/store.js";

/** The service's settings, read once from the environment. */
export interface Config {
  readonly port: number;
  readonly host: string;
  /**
   * The service's address as friends reach it (PUBLIC_URL): the base of the
   * share links it returns; `http://localhost:{PORT}` when unset.
   */
  readonly publicUrl: string;
  readonly store: StoreConfig;
  readonly adminToken: string | undefined;
  readonly bootstrapSecretKey: string | undefined;
  readonly bootstrapPublicKey: string | undefined;
  readonly logLevel: string;
  /** LOG_FORMAT: JSON lines (`json`, the default), or lines for people (`pretty`). */
  readonly logFormat: "json" | "pretty";
  /**
   * DEVELOPMENT: started by `npm run dev`, whose keys are development keys:
   * the banner prints them, and the admin token, at every start.
   */
  readonly development: boolean;
  /** The bearer token `GET /metrics` requires; unset, the endpoint is off. */
  readonly metricsToken: string | undefined;
  readonly maxBodyBytes: number;
  /** DATA_DIR's free space under which writes are refused (MIN_FREE_DISK); 0 is no floor. */
  readonly minFreeDiskBytes: number;
  /** The fraud rules' thresholds. */
  readonly fraudPolicy: FraudPolicy;
  /**
   * The operator's changes to the disposable-domain list of the fraud
   * evidence (DISPOSABLE_EMAIL_DOMAINS_ADD, DISPOSABLE_EMAIL_DOMAINS_REMOVE).
   */
  readonly disposableEmailDomains: { readonly add: string[]; readonly remove: string[] };
  /** Webhook delivery settings. */
  readonly webhooks: WebhookConfig;
  /** The certificate and key the port serves HTTPS with (TLS_CERT_FILE, TLS_KEY_FILE); cleartext without. */
  readonly tls: TlsConfig | undefined;
  /** The proxies whose Forwarded and X-Forwarded-For headers are believed (TRUSTED_PROXIES). */
  readonly trustedProxies: readonly string[];
  /** The shutdown grace and the limits on connections. */
  readonly connections: ConnectionConfig;
  /** How long events and finished deliveries are kept (EVENT_RETENTION). */
  readonly eventRetentionMs: number;
  /** Calls allowed per window, per API key and per client address. */
  readonly rateLimits: RateLimitConfig;
  /** Server streams (watches, exports) one API key may hold open at once (STREAMS_PER_KEY). */
  readonly streamsPerKey: number;
  /**
   * How often an open stream looks again for what this process is not told
   * of: numbers other instances moved, its key revoked through another
   * instance (STREAM_POLL_INTERVAL).
   */
  readonly streamPollMs: number;
  /** The origins browsers may call from (CORS_ORIGINS). */
  readonly corsOrigins: CorsOrigins;
  /**
   * The embedded store: while this many writes wait for a commit (in a
   * worker: for the primary's answer), calls that would write are refused
   * (WRITE_QUEUE_LIMIT).
   */
  readonly writeQueueLimit: number;
  /** The processes that serve the port (WORKERS); 1 is one process doing everything. */
  readonly workers: number;
  /** How long a worker may leave the primary's heartbeat unanswered before it is replaced (WORKER_STUCK_TIMEOUT). */
  readonly workerStuckTimeoutMs: number;
}

/**
 * The origins whose pages may call the service from a browser: any (`*`,
 * never with credentials), these exact origins, or none (`off`: no CORS
 * headers, preflights refused).
 */
export type CorsOrigins = "*" | "off" | readonly string[];

/** A PEM certificate (chain) and its private key, checked to load and to match. */
export interface TlsConfig {
  readonly cert: Buffer;
  readonly key: Buffer;
}

/** A rate limit: so many calls per window. */
export interface RateLimit {
  readonly calls: number;
  /** Whole seconds, as the `w` of the `RateLimit-Policy` header counts them. */
  readonly windowSeconds: number;
}

/** The rate limits; an undefined one is off. */
export interface RateLimitConfig {
  /** Calls per public API key. */
  readonly public: RateLimit | undefined;
  /** Calls per secret API key. */
  readonly secret: RateLimit | undefined;
  /** Admin calls per client address, counted before the token is checked. */
  readonly admin: RateLimit | undefined;
  /** Failed authentications per client address; past it, the address is refused before its credential is checked. */
  readonly unauthenticated: RateLimit | undefined;
  /**
   * Failed referral-code lookups per API key and, apart, per client
   * address; past either, the key's (or the address's) lookups are refused.
   */
  readonly codeLookups: RateLimit | undefined;
  /** Share links followed (`/r/{code}`) per client address. */
  readonly links: RateLimit | undefined;
}

/** How long a shutdown waits, and how long and how many connections may be held. */
export interface ConnectionConfig {
  /** How long a shutdown waits for calls in flight before closing their connections. */
  readonly shutdownGraceMs: number;
  /** Open connections at most; more are closed as they arrive. */
  readonly maxConnections: number;
  /** A new connection must send its first request line, or the HTTP/2 preface and SETTINGS, within this. */
  readonly prefaceTimeoutMs: number;
  /** HTTP/1.1: a request's headers must arrive within this. */
  readonly headersTimeoutMs: number;
  /** HTTP/1.1: a whole request, headers and body, must arrive within this. */
  readonly requestTimeoutMs: number;
  /** HTTP/1.1: a connection waiting for its next request is closed after this. */
  readonly keepAliveTimeoutMs: number;
  /** HTTP/1.1: a connection with no bytes moving either way is closed after this. */
  readonly idleTimeoutMs: number;
  /** HTTP/2: streams (calls) open at once on one connection. */
  readonly maxConcurrentStreams: number;
  /** HTTP/2: a connection with no open stream is closed (GOAWAY) after this. */
  readonly http2IdleTimeoutMs: number;
  /** HTTP/2: the server pings a connection this long after its last ping. */
  readonly keepaliveTimeMs: number;
  /** HTTP/2: a ping unanswered this long closes the connection. */
  readonly keepaliveTimeoutMs: number;
}

/** How webhooks are delivered. */
export interface WebhookConfig {
  /** The key that encrypts signing secrets at rest (32 bytes); from DATA_DIR when unset. */
  readonly secretKey: Buffer | undefined;
  /** Lets endpoints point at private, loopback and link-local addresses (tests, closed networks). */
  readonly allowPrivate: boolean;
  /** The delay before each attempt; its length is the number of attempts. */
  readonly retrySchedule: readonly number[];
  /** How long an attempt may take. */
  readonly timeoutMs: number;
  /** An endpoint failing continuously this long is disabled. */
  readonly disableAfterMs: number;
  /** Deliveries in flight at once, per instance. */
  readonly concurrency: number;
}

/** Reads and checks the configuration; throws with the variable's name when one is wrong. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const mongodbUri = nonEmpty(env.MONGODB_URI);
  const secretKey = nonEmpty(env.WEBHOOK_SECRET_KEY);
  if (mongodbUri && secretKey === undefined) {
    // Every instance on a shared database must decrypt the same secrets.
    throw new Error("WEBHOOK_SECRET_KEY is required with MONGODB_URI (32 bytes as base64 or hex)");
  }
  return {
    port: integer(env, "PORT", 8080, 0, 65535),
    host: nonEmpty(env.HOST) ?? "0.0.0.0",
    publicUrl: publicUrlOf(env),
    store: mongodbUri
      ? { mongodbUri, mongodbDb: nonEmpty(env.MONGODB_DB) ?? "referrals" }
      : {
          dataDir: resolve(nonEmpty(env.DATA_DIR) ?? "./data"),
          synchronous: oneOf(env, "SQLITE_SYNCHRONOUS", ["normal", "full"], "full"),
        },
    writeQueueLimit: integer(env, "WRITE_QUEUE_LIMIT", 10_000, 1, 1_000_000),
    workers: workerCount(env, mongodbUri === undefined),
    workerStuckTimeoutMs: duration(env, "WORKER_STUCK_TIMEOUT", 10_000),
    adminToken: nonEmpty(env.ADMIN_TOKEN),
    bootstrapSecretKey: prefixed(env, "BOOTSTRAP_SECRET_KEY", "sk_"),
    bootstrapPublicKey: prefixed(env, "BOOTSTRAP_PUBLIC_KEY", "pk_"),
    logLevel: oneOf(
      env,
      "LOG_LEVEL",
      ["fatal", "error", "warn", "info", "debug", "trace", "silent"],
      "info",
    ),
    logFormat: oneOf(env, "LOG_FORMAT", ["json", "pretty"], "json"),
    development: boolean(env, "DEVELOPMENT", false),
    metricsToken: nonEmpty(env.METRICS_TOKEN),
    maxBodyBytes: integer(env, "MAX_BODY_BYTES", 1024 * 1024, 1024, 64 * 1024 * 1024),
    minFreeDiskBytes: byteSize(env, "MIN_FREE_DISK", 256 * 1024 * 1024),
    webhooks: {
      secretKey: secretKey === undefined ? undefined : parseSecretKey(secretKey),
      allowPrivate: boolean(env, "WEBHOOK_ALLOW_PRIVATE", false),
      retrySchedule: durationList(env, "WEBHOOK_RETRY_SCHEDULE", defaultRetrySchedule),
      timeoutMs: duration(env, "WEBHOOK_TIMEOUT", defaultWebhookTimeoutMs),
      disableAfterMs: duration(env, "WEBHOOK_DISABLE_AFTER", 5 * 86_400_000),
      concurrency: integer(env, "WEBHOOK_CONCURRENCY", 128, 1, 256),
    },
    tls: tlsConfig(env),
    trustedProxies: trustedProxies(env),
    connections: connectionConfig(env),
    rateLimits: {
      public: rateLimit(env, "RATE_LIMIT_PUBLIC", "1000/1s"),
      secret: rateLimit(env, "RATE_LIMIT_SECRET", "1000/1s"),
      admin: rateLimit(env, "RATE_LIMIT_ADMIN", "60/1m"),
      unauthenticated: rateLimit(env, "RATE_LIMIT_UNAUTHENTICATED", "30/1m"),
      codeLookups: rateLimit(env, "RATE_LIMIT_CODE_LOOKUPS", "30/1m"),
      links: rateLimit(env, "RATE_LIMIT_LINKS", "120/1m"),
    },
    streamsPerKey: integer(env, "STREAMS_PER_KEY", 20, 1, 1_000_000),
    streamPollMs: streamPollInterval(env),
    eventRetentionMs: eventRetention(env),
    corsOrigins: corsOrigins(env),
    fraudPolicy: {
      maxRefereeAgeMs: duration(
        env,
        "REFERRAL_MAX_REFEREE_AGE",
        defaultFraudPolicy.maxRefereeAgeMs,
      ),
      velocityLimit: integer(
        env,
        "REFERRAL_VELOCITY_LIMIT",
        defaultFraudPolicy.velocityLimit,
        1,
        1_000_000,
      ),
    },
    disposableEmailDomains: {
      add: domainList(env, "DISPOSABLE_EMAIL_DOMAINS_ADD"),
      remove: domainList(env, "DISPOSABLE_EMAIL_DOMAINS_REMOVE"),
    },
  };
}

/** A comma-separated list of email domains (`example.com,mail.example.net`), lowercased; empty when unset. */
function domainList(env: NodeJS.ProcessEnv, name: string): string[] {
  const raw = nonEmpty(env[name]);
  if (raw === undefined) return [];
  const domains = raw.split(",").map((domain) => domain.trim().toLowerCase());
  const wrong = domains.find(
    (domain) => !/^(?=.{1,253}$)([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$/.test(domain),
  );
  if (wrong !== undefined) {
    throw new Error(`${name} must be email domains separated by commas, got "${wrong}"`);
  }
  return domains;
}

/** TLS_CERT_FILE and TLS_KEY_FILE, both or neither; each error names the variable at fault. */
function tlsConfig(env: NodeJS.ProcessEnv): TlsConfig | undefined {
  const certFile = nonEmpty(env.TLS_CERT_FILE);
  const keyFile = nonEmpty(env.TLS_KEY_FILE);
  if (!certFile && !keyFile) return undefined;
  if (!certFile) throw new Error("TLS_CERT_FILE is required with TLS_KEY_FILE (both PEM files)");
  if (!keyFile) throw new Error("TLS_KEY_FILE is required with TLS_CERT_FILE (both PEM files)");
  const cert = readPem("TLS_CERT_FILE", certFile);
  const key = readPem("TLS_KEY_FILE", keyFile);
  try {
    new X509Certificate(cert);
  } catch (error) {
    throw new Error(`TLS_CERT_FILE: ${certFile} holds no PEM certificate (${reasonOf(error)})`);
  }
  try {
    createPrivateKey(key);
  } catch (error) {
    throw new Error(
      `TLS_KEY_FILE: ${keyFile} holds no unencrypted PEM private key (${reasonOf(error)})`,
    );
  }
  try {
    createSecureContext({ cert, key });
  } catch (error) {
    throw new Error(
      `TLS_KEY_FILE: ${keyFile} is not the key of the certificate in TLS_CERT_FILE (${reasonOf(error)})`,
    );
  }
  return { cert, key };
}

function readPem(name: string, file: string): Buffer {
  try {
    return readFileSync(file);
  } catch (error) {
    throw new Error(
      `${name}: cannot read ${file} (${(error as NodeJS.ErrnoException).code ?? reasonOf(error)})`,
    );
  }
}

/** OpenSSL's reason without its `error:0480006C:PEM routines::` prefix. */
function reasonOf(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  return message.replace(/^error:[0-9A-F]+:[^:]*::?/i, "");
}

/** TRUSTED_PROXIES: a comma-separated list; empty, no proxy is trusted. */
function trustedProxies(env: NodeJS.ProcessEnv): readonly string[] {
  const entries = (env.TRUSTED_PROXIES ?? "")
    .split(",")
    .map((entry) => entry.trim())
    .filter((entry) => entry.length > 0);
  // Checked as the resolver (transport/client-address.ts) will compile them.
  for (const entry of entries) {
    try {
      proxyaddr.compile(entry);
    } catch {
      throw new Error(
        `TRUSTED_PROXIES: ${JSON.stringify(entry)} is not an address, a CIDR range, loopback, linklocal or uniquelocal`,
      );
    }
  }
  return entries;
}

function connectionConfig(env: NodeJS.ProcessEnv): ConnectionConfig {
  const headersTimeoutMs = duration(env, "HTTP_HEADERS_TIMEOUT", 10_000);
  const requestTimeoutMs = duration(env, "HTTP_REQUEST_TIMEOUT", 30_000);
  if (requestTimeoutMs < headersTimeoutMs) {
    // Node refuses it too: the headers are part of the request.
    throw new Error("HTTP_REQUEST_TIMEOUT must be at least HTTP_HEADERS_TIMEOUT");
  }
  return {
    shutdownGraceMs: duration(env, "SHUTDOWN_GRACE", 10_000),
    maxConnections: integer(env, "MAX_CONNECTIONS", 4096, 1, 1_000_000),
    prefaceTimeoutMs: duration(env, "PREFACE_TIMEOUT", 10_000),
    headersTimeoutMs,
    requestTimeoutMs,
    keepAliveTimeoutMs: duration(env, "HTTP_KEEP_ALIVE_TIMEOUT", 5_000),
    idleTimeoutMs: duration(env, "HTTP_IDLE_TIMEOUT", 60_000),
    maxConcurrentStreams: integer(env, "HTTP2_MAX_CONCURRENT_STREAMS", 100, 1, 1_000_000),
    http2IdleTimeoutMs: duration(env, "HTTP2_IDLE_TIMEOUT", 300_000),
    keepaliveTimeMs: duration(env, "HTTP2_KEEPALIVE_TIME", 60_000),
    keepaliveTimeoutMs: duration(env, "HTTP2_KEEPALIVE_TIMEOUT", 20_000),
  };
}

/** STREAM_POLL_INTERVAL: up to an hour, so a key revoked elsewhere ends its streams within one. */
function streamPollInterval(env: NodeJS.ProcessEnv): number {
  const value = duration(env, "STREAM_POLL_INTERVAL", 5_000);
  if (value > 3_600_000) {
    throw new Error(`STREAM_POLL_INTERVAL must be at most 1h, got "${env.STREAM_POLL_INTERVAL}"`);
  }
  return value;
}

/** A variable that, when set, must start with `prefix` (an API key of one kind). */
function prefixed(env: NodeJS.ProcessEnv, name: string, prefix: string): string | undefined {
  const value = nonEmpty(env[name]);
  if (value !== undefined && !value.startsWith(prefix)) {
    throw new Error(`${name} must start with ${prefix}`);
  }
  return value;
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === "" ? undefined : value.trim();
}

/**
 * WORKERS: `auto` is one per available core (the default on the embedded
 * store, whose single writer the workers share; MongoDB defaults to 1,
 * scaled by running more instances), or a number of processes.
 */
function workerCount(env: NodeJS.ProcessEnv, embedded: boolean): number {
  const raw = nonEmpty(env.WORKERS) ?? (embedded ? "auto" : "1");
  if (raw === "auto") return availableParallelism();
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 1 || value > 256) {
    throw new Error(`WORKERS must be auto or an integer from 1 to 256, got "${raw}"`);
  }
  return value;
}

function integer(
  env: NodeJS.ProcessEnv,
  name: string,
  fallback: number,
  min: number,
  max: number,
): number {
  const raw = nonEmpty(env[name]);
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new Error(`${name} must be an integer from ${min} to ${max}, got "${raw}"`);
  }
  return value;
}

const byteUnits: Record<string, number> = {
  "": 1,
  b: 1,
  kib: 1024,
  mib: 1024 ** 2,
  gib: 1024 ** 3,
  kb: 1000,
  mb: 1000 ** 2,
  gb: 1000 ** 3,
};

/** "256MiB", "1GiB", "500MB", "0": bytes, binary (KiB) or decimal (KB) units. */
function byteSize(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = nonEmpty(env[name]);
  if (raw === undefined) return fallback;
  const match = /^(\d+(?:\.\d+)?)\s*([a-z]*)$/i.exec(raw);
  const unit = match ? byteUnits[(match[2] ?? "").toLowerCase()] : undefined;
  if (!match || unit === undefined) {
    throw new Error(`${name} must be a size such as 256MiB, 1GiB, 500MB or 0, got "${raw}"`);
  }
  return Math.round(Number(match[1]) * unit);
}

const durationUnits: Record<string, number> = {
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
};

/** "7d", "36h", "90m", "45s" or "250ms" in milliseconds; undefined when malformed. */
function parseDuration(raw: string): number | undefined {
  const match = /^(\d+)\s*(ms|s|m|h|d)$/.exec(raw.trim());
  return match ? Number(match[1]) * (durationUnits[match[2] as string] as number) : undefined;
}

/** A positive duration variable, in milliseconds. */
function duration(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = nonEmpty(env[name]);
  if (raw === undefined) return fallback;
  const value = parseDuration(raw);
  if (value === undefined || value <= 0) {
    throw new Error(
      `${name} must be a positive duration such as 7d, 36h, 90m, 45s or 250ms, got "${raw}"`,
    );
  }
  return value;
}

/** A comma-separated list of durations (zero allowed), such as "0s,5s,5m". */
function durationList(
  env: NodeJS.ProcessEnv,
  name: string,
  fallback: readonly number[],
): readonly number[] {
  const raw = nonEmpty(env[name]);
  if (raw === undefined) return fallback;
  const values = raw.split(",").map(parseDuration);
  if (values.length > 50 || values.some((value) => value === undefined)) {
    throw new Error(
      `${name} must be 1 to 50 comma-separated durations such as "0s,5s,5m", got "${raw}"`,
    );
  }
  return values as number[];
}

/** Calls per window of whole seconds ("100/1s", "60/1m"), or "off". */
function rateLimit(env: NodeJS.ProcessEnv, name: string, fallback: string): RateLimit | undefined {
  const raw = nonEmpty(env[name]) ?? fallback;
  if (raw === "off") return undefined;
  const match = /^(\d+)\s*\/\s*(\S+)$/.exec(raw);
  const calls = Number(match?.[1]);
  const windowMs = match ? parseDuration(match[2] as string) : undefined;
  if (
    !Number.isSafeInteger(calls) ||
    calls < 1 ||
    windowMs === undefined ||
    windowMs < 1000 ||
    windowMs % 1000 !== 0
  ) {
    throw new Error(
      `${name} must be "off" or calls per window of whole seconds, such as 100/1s or 60/1m, got "${raw}"`,
    );
  }
  return { calls, windowSeconds: windowMs / 1000 };
}

/** CORS_ORIGINS: "*", "off", or origins exactly as browsers send them, comma-separated. */
function corsOrigins(env: NodeJS.ProcessEnv): CorsOrigins {
  const raw = nonEmpty(env.CORS_ORIGINS) ?? "*";
  if (raw === "*" || raw === "off") return raw;
  const origins = raw.split(",").map((origin) => origin.trim());
  if (origins.every(isExactOrigin)) return origins;
  throw new Error(
    `CORS_ORIGINS must be "*", "off" or comma-separated origins as browsers send them (scheme://host[:port], no path), such as https://app.example.com,http://localhost:5173, got "${raw}"`,
  );
}

/** Whether the value is an origin as a browser's `Origin` header spells it. */
function isExactOrigin(value: string): boolean {
  try {
    return new URL(value).origin === value;
  } catch {
    return false;
  }
}

const defaultWebhookTimeoutMs = 10_000;

/**
 * EVENT_RETENTION, longer than a delivery's retries can take (every delay
 * at its +10% jitter, every attempt at its timeout): a delivery being
 * retried needs its event, and the event's clock starts first.
 */
function eventRetention(env: NodeJS.ProcessEnv): number {
  const retentionMs = duration(env, "EVENT_RETENTION", defaultEventRetentionMs);
  const given = nonEmpty(env.EVENT_RETENTION) ?? "30d, the default";
  const schedule = durationList(env, "WEBHOOK_RETRY_SCHEDULE", defaultRetrySchedule);
  const timeoutMs = duration(env, "WEBHOOK_TIMEOUT", defaultWebhookTimeoutMs);
  const retriesMs = schedule.reduce((total, delay) => total + delay * 1.1 + timeoutMs, 0);
  if (retentionMs <= retriesMs) {
    throw new Error(
      `EVENT_RETENTION must be longer than a delivery's retries can take (${Math.ceil(retriesMs / 60_000)}m with WEBHOOK_RETRY_SCHEDULE and WEBHOOK_TIMEOUT), got "${given}"`,
    );
  }
  // MongoDB's expireAfterSeconds is a 32-bit integer.
  if (retentionMs / 1000 > 2_147_483_647) {
    throw new Error(`EVENT_RETENTION must be at most 24855d, got "${given}"`);
  }
  return retentionMs;
}

function oneOf<const W extends string>(
  env: NodeJS.ProcessEnv,
  name: string,
  words: readonly W[],
  fallback: W,
): W {
  const raw = nonEmpty(env[name]);
  if (raw === undefined) return fallback;
  if ((words as readonly string[]).includes(raw)) return raw as W;
  throw new Error(`${name} must be one of ${words.join(", ")}, got "${raw}"`);
}

function boolean(env: NodeJS.ProcessEnv, name: string, fallback: boolean): boolean {
  const raw = nonEmpty(env[name]);
  if (raw === undefined) return fallback;
  if (raw === "true" || raw === "false") return raw === "true";
  throw new Error(`${name} must be true or false, got "${raw}"`);
}

/** PUBLIC_URL: an http(s) URL without query or fragment, its trailing slash dropped. */
function publicUrlOf(env: Record<string, string | undefined>): string {
  const raw = nonEmpty(env.PUBLIC_URL);
  if (raw === undefined) return `http://localhost:${env.PORT?.trim() || "8080"}`;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new Error(`PUBLIC_URL must be an http or https URL, got ${JSON.stringify(raw)}`);
  }
  if ((url.protocol !== "http:" && url.protocol !== "https:") || url.search || url.hash) {
    throw new Error(
      `PUBLIC_URL must be an http or https URL without query or fragment, got ${JSON.stringify(raw)}`,
    );
  }
  return url.toString().replace(/\/+$/, "");
}
