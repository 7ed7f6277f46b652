import { resolve } from "node:path";
import { defaultFraudPolicy, type FraudPolicy } from "./domain/fraud-rules.js";
import { defaultRetrySchedule } from "./domain/webhook-delivery.js";
import { parseSecretKey } from "./store/secret-box.js";
import type { StoreConfig } from "./store/store.js";

/** The service's settings, read once from the environment. */
export interface Config {
  readonly port: number;
  readonly host: string;
  readonly store: StoreConfig;
  readonly adminToken: string | undefined;
  readonly bootstrapSecretKey: string | undefined;
  readonly bootstrapPublicKey: string | undefined;
  readonly logLevel: string;
  readonly maxBodyBytes: number;
  /** The fraud rules' thresholds. */
  readonly fraudPolicy: FraudPolicy;
  /** Webhook delivery settings. */
  readonly webhooks: WebhookConfig;
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
    store: mongodbUri
      ? { mongodbUri, mongodbDb: nonEmpty(env.MONGODB_DB) ?? "referrals" }
      : {
          dataDir: resolve(nonEmpty(env.DATA_DIR) ?? "./data"),
          synchronous: oneOf(env, "SQLITE_SYNCHRONOUS", ["normal", "full"], "normal"),
        },
    adminToken: nonEmpty(env.ADMIN_TOKEN),
    bootstrapSecretKey: nonEmpty(env.BOOTSTRAP_SECRET_KEY),
    bootstrapPublicKey: nonEmpty(env.BOOTSTRAP_PUBLIC_KEY),
    logLevel: nonEmpty(env.LOG_LEVEL) ?? "info",
    maxBodyBytes: integer(env, "MAX_BODY_BYTES", 1024 * 1024, 1024, 64 * 1024 * 1024),
    webhooks: {
      secretKey: secretKey === undefined ? undefined : parseSecretKey(secretKey),
      allowPrivate: boolean(env, "WEBHOOK_ALLOW_PRIVATE", false),
      retrySchedule: durationList(env, "WEBHOOK_RETRY_SCHEDULE", defaultRetrySchedule),
      timeoutMs: duration(env, "WEBHOOK_TIMEOUT", 10_000),
      disableAfterMs: duration(env, "WEBHOOK_DISABLE_AFTER", 5 * 86_400_000),
      concurrency: integer(env, "WEBHOOK_CONCURRENCY", 32, 1, 256),
    },
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
  };
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === "" ? undefined : value.trim();
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
