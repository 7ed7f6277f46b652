import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { isIP } from "node:net";
import { join, resolve } from "node:path";
import { generateApiKey } from "./domain/api-keys.js";
import { embeddedDatabaseFile } from "./store/embedded-file.js";

/**
 * The development start (`npm run dev`, src/dev.ts): its data lives in its
 * own directory (`./data-dev` unless DATA_DIR names one), beside which it
 * keeps the development keys and admin token it made at its first start
 * (`development.json`, owner-only), so every start prints the same ones and
 * `npm run admin` beside it needs no token. `npm start` never writes it.
 */

/** The development start's data, unless DATA_DIR names another directory. */
export const developmentDataDir = "./data-dev";

/** The file in the data directory holding the development secrets. */
export const developmentFile = "development.json";

/** The development keys of the demo application, and the admin token. */
export interface DevelopmentSecrets {
  readonly secretKey: string;
  readonly publicKey: string;
  readonly adminToken: string;
}

/**
 * The variables the development start runs the service with; a variable
 * already set is kept (a developer's own ADMIN_TOKEN, a quieter LOG_FORMAT).
 * The service listens on this machine only unless HOST says otherwise: its
 * admin API is on and its webhooks may reach private addresses.
 */
export function developmentEnvironment(env: NodeJS.ProcessEnv): Record<string, string> {
  const dataDir = resolve(env.DATA_DIR || developmentDataDir);
  const secrets = developmentSecrets(dataDir);
  return {
    DATA_DIR: dataDir,
    DEVELOPMENT: "true",
    HOST: env.HOST || "127.0.0.1",
    ADMIN_TOKEN: env.ADMIN_TOKEN || secrets.adminToken,
    BOOTSTRAP_SECRET_KEY: secrets.secretKey,
    BOOTSTRAP_PUBLIC_KEY: secrets.publicKey,
    WEBHOOK_ALLOW_PRIVATE: env.WEBHOOK_ALLOW_PRIVATE || "true",
    LOG_FORMAT: env.LOG_FORMAT || "pretty",
  };
}

/**
 * The development keys and admin token: read from `development.json`, or
 * made now for a directory without data. A directory whose store another
 * start provisioned has other keys, which only that start printed: the
 * development start refuses it rather than print keys that do not work.
 * Each refusal is one line naming what to do.
 */
function developmentSecrets(directory: string): DevelopmentSecrets {
  const file = join(directory, developmentFile);
  if (existsSync(file)) {
    const secrets = readSecrets(file);
    if (secrets) return secrets;
    return refuse(
      `${file} is not the development keys \`npm run dev\` wrote: remove the directory ` +
        `${directory} to start afresh (its data goes with it), or set DATA_DIR to a new directory`,
    );
  }
  if (existsSync(join(directory, embeddedDatabaseFile))) {
    return refuse(
      `${directory} holds data from \`npm start\`, whose keys were printed then; ` +
        `\`npm run dev\` keeps its own data in ${developmentDataDir} (or set DATA_DIR to a new directory)`,
    );
  }
  const secrets: DevelopmentSecrets = {
    secretKey: generateApiKey("secret"),
    publicKey: generateApiKey("public"),
    adminToken: `adm_${randomBytes(32).toString("base64url")}`,
  };
  mkdirSync(directory, { recursive: true, mode: 0o700 });
  // Whole or not at all: a start cut short leaves no half-written file.
  const written = `${file}.${process.pid}.tmp`;
  writeFileSync(written, `${JSON.stringify(secrets, null, 2)}\n`, { mode: 0o600 });
  renameSync(written, file);
  return secrets;
}

function refuse(message: string): never {
  process.stderr.write(`referral-service: ${message}\n`);
  process.exit(1);
}

/** The file's secrets when it holds the three, each of its kind; undefined otherwise. */
function readSecrets(file: string): DevelopmentSecrets | undefined {
  let read: unknown;
  try {
    read = JSON.parse(readFileSync(file, "utf8"));
  } catch {
    return undefined;
  }
  const { secretKey, publicKey, adminToken } = (read ?? {}) as Record<string, unknown>;
  const shaped = (value: unknown, prefix: string) =>
    typeof value === "string" && value.startsWith(prefix) && value.length > prefix.length + 20;
  if (!shaped(secretKey, "sk_") || !shaped(publicKey, "pk_") || !shaped(adminToken, "adm_")) {
    return undefined;
  }
  return { secretKey, publicKey, adminToken } as DevelopmentSecrets;
}

/**
 * The development start's keys and token, for `npm run admin` (and
 * `listen`) run beside it without ADMIN_TOKEN or SK: only for a service on
 * this machine, never sent elsewhere. Undefined without a development
 * start in DATA_DIR (or `./data-dev`).
 */
export function savedDevelopmentSecrets(
  serviceUrl: string,
  env: NodeJS.ProcessEnv = process.env,
): DevelopmentSecrets | undefined {
  if (!isLoopbackUrl(serviceUrl)) return undefined;
  return developmentSecretsIn(env.DATA_DIR || developmentDataDir);
}

/** The development secrets kept in `dataDir`, if a development start wrote them. */
export function developmentSecretsIn(dataDir: string): DevelopmentSecrets | undefined {
  const file = join(resolve(dataDir), developmentFile);
  return existsSync(file) ? readSecrets(file) : undefined;
}

function isLoopbackUrl(url: string): boolean {
  let host: string;
  try {
    host = new URL(url).hostname.replace(/^\[(.*)\]$/, "$1");
  } catch {
    return false;
  }
  if (host === "localhost") return true;
  if (isIP(host) === 4) return host.startsWith("127.");
  return host === "::1";
}
