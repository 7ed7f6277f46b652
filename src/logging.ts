import { createRequire } from "node:module";
import { type DestinationStream, type Logger, pino } from "pino";
import type PinoPretty from "pino-pretty";
import type { Config } from "./config.js";

// Loaded only for LOG_FORMAT=pretty: a production start never needs it.
const require = createRequire(import.meta.url);

/**
 * The process's root logger: JSON lines on stdout (what log shippers
 * read), or, with LOG_FORMAT=pretty (`npm run dev`), lines for people.
 * Tests pass a destination of their own.
 */
export function rootLogger(
  config: Pick<Config, "logLevel" | "logFormat">,
  logTo?: DestinationStream,
): Logger {
  const destination =
    logTo ??
    (config.logFormat === "pretty"
      ? (require("pino-pretty") as typeof PinoPretty)({
          colorize: process.stdout.isTTY === true,
          translateTime: "SYS:HH:MM:ss.l",
          ignore: "pid,hostname",
          singleLine: true,
          sync: true,
        })
      : undefined);
  return pino({ level: config.logLevel }, destination);
}
