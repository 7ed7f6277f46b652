import { resolve } from "node:path";
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
