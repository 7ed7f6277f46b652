import { resolve } from "node:path";
import { defaultFraudPolicy, type FraudPolicy } from "./domain/fraud-rules.js";
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
}

/** Reads and checks the configuration; throws with the variable's name when one is wrong. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const mongodbUri = nonEmpty(env.MONGODB_URI);
  return {
    port: integer(env, "PORT", 8080, 0, 65535),
    host: nonEmpty(env.HOST) ?? "0.0.0.0",
    store: mongodbUri
      ? { mongodbUri, mongodbDb: nonEmpty(env.MONGODB_DB) ?? "referrals" }
      : { dataDir: resolve(nonEmpty(env.DATA_DIR) ?? "./data") },
    adminToken: nonEmpty(env.ADMIN_TOKEN),
    bootstrapSecretKey: nonEmpty(env.BOOTSTRAP_SECRET_KEY),
    bootstrapPublicKey: nonEmpty(env.BOOTSTRAP_PUBLIC_KEY),
    logLevel: nonEmpty(env.LOG_LEVEL) ?? "info",
    maxBodyBytes: integer(env, "MAX_BODY_BYTES", 1024 * 1024, 1024, 64 * 1024 * 1024),
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

const durationUnits: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** A duration such as "7d", "36h", "90m" or "45s", in milliseconds. */
function duration(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = nonEmpty(env[name]);
  if (raw === undefined) return fallback;
  const match = /^(\d+)\s*([smhd])$/.exec(raw);
  const value = match ? Number(match[1]) * (durationUnits[match[2] as string] as number) : 0;
  if (value <= 0) {
    throw new Error(
      `${name} must be a positive duration such as 7d, 36h, 90m or 45s, got "${raw}"`,
    );
  }
  return value;
}
