import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { generateApiKey } from "./domain/api-keys.js";
import { embeddedDatabaseFile } from "./store/embedded-file.js";

/**
 * The development start (`npm run dev`, src/dev.ts): its data lives in its
 * own directory (`./data-dev` unless DATA_DIR names one), beside which it
 * keeps the development keys and admin token it made at its first start
 * (`development.json`, owner-only), so every start prints the same ones and
 * `npm run admin` beside it needs no token. `npm start` never writes or
 * reads any of it.
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
 */
export function developmentEnvironment(env: NodeJS.ProcessEnv): Record<string, string> {
  const dataDir = resolve(env.DATA_DIR || developmentDataDir);
  const secrets = developmentSecrets(dataDir);
  return {
    DATA_DIR: dataDir,
    DEVELOPMENT: "true",
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
 */
function developmentSecrets(directory: string): DevelopmentSecrets {
  const file = join(directory, developmentFile);
  if (existsSync(file)) return JSON.parse(readFileSync(file, "utf8")) as DevelopmentSecrets;
  if (existsSync(join(directory, embeddedDatabaseFile))) {
    process.stderr.write(
      `referral-service: ${directory} holds data from \`npm start\`, whose keys were printed ` +
        `then; \`npm run dev\` keeps its own data in ${developmentDataDir} (or set DATA_DIR to ` +
        "a new directory)\n",
    );
    process.exit(1);
  }
  const secrets: DevelopmentSecrets = {
    secretKey: generateApiKey("secret"),
    publicKey: generateApiKey("public"),
    adminToken: `adm_${randomBytes(32).toString("base64url")}`,
  };
  mkdirSync(directory, { recursive: true, mode: 0o700 });
  writeFileSync(file, `${JSON.stringify(secrets, null, 2)}\n`, { mode: 0o600 });
  return secrets;
}

/**
 * The development start's keys and token, for `npm run admin` (and
 * `listen`) run beside it without ADMIN_TOKEN or SK; undefined without a
 * development start there.
 */
export function savedDevelopmentSecrets(
  env: NodeJS.ProcessEnv = process.env,
): DevelopmentSecrets | undefined {
  const file = join(resolve(env.DATA_DIR || developmentDataDir), developmentFile);
  if (!existsSync(file)) return undefined;
  try {
    return JSON.parse(readFileSync(file, "utf8")) as DevelopmentSecrets;
  } catch {
    return undefined;
  }
}
