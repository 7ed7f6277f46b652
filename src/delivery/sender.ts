import { lookup as dnsLookup, type LookupAddress } from "node:dns";
import { request as httpRequest, type IncomingMessage } from "node:http";
import { request as httpsRequest } from "node:https";
import { isIP, type LookupFunction } from "node:net";
import { hostOf, isPublicAddress } from "../domain/webhook-delivery.js";

/** One POST to an endpoint. */
export interface WebhookRequest {
  readonly url: string;
  readonly headers: Record<string, string>;
  readonly body: string;
  readonly timeoutMs: number;
  /** Skips the address check (WEBHOOK_ALLOW_PRIVATE). */
  readonly allowPrivate: boolean;
  /** Aborts the request when the service stops. */
  readonly signal?: AbortSignal;
}

/** What came of it: the status (null when no response came) or the error. */
export interface WebhookResponse {
  readonly statusCode: number | null;
  readonly durationMs: number;
  readonly error: string | null;
}

/** Sends a webhook request; a function type so tests and workers can swap it. */
export type WebhookSender = (request: WebhookRequest) => Promise<WebhookResponse>;

const refusedAddress =
  "refused: the endpoint resolves to a private, loopback or link-local address";

/**
 * Resolves like `dns.lookup`, then refuses private addresses. Used as the
 * socket's lookup, so the address checked is the address connected to: a
 * DNS answer that changes between check and connect cannot slip through.
 */
const publicOnlyLookup: LookupFunction = (hostname, options, callback) => {
  dnsLookup(hostname, { ...options, all: true }, (error, addresses: LookupAddress[]) => {
    if (error) return callback(error, "", 0);
    const allowed = addresses.filter((entry) => isPublicAddress(entry.address));
    const [first] = allowed;
    if (!first || allowed.length !== addresses.length) {
      return callback(Object.assign(new Error(refusedAddress), { code: "EREFUSED" }), "", 0);
    }
    if ((options as { all?: boolean }).all) {
      return (callback as unknown as (e: null, a: LookupAddress[]) => void)(null, allowed);
    }
    callback(null, first.address, first.family);
  });
};

/**
 * POSTs the body with node:http(s): no redirects followed, the response
 * body read and dropped, the whole attempt bounded by the timeout.
 */
export const sendWebhook: WebhookSender = (input) => {
  const started = performance.now();
  const elapsed = () => Math.round(performance.now() - started);
  return new Promise((resolve) => {
    const url = new URL(input.url);
    const host = hostOf(url);
    if (!input.allowPrivate && isIP(host) !== 0 && !isPublicAddress(host)) {
      resolve({ statusCode: null, durationMs: elapsed(), error: refusedAddress });
      return;
    }
    const send = url.protocol === "https:" ? httpsRequest : httpRequest;
    let settled = false;
    const finish = (result: Omit<WebhookResponse, "durationMs">) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve({ ...result, durationMs: elapsed() });
    };
    const request = send(
      url,
      {
        method: "POST",
        headers: { ...input.headers, "content-length": Buffer.byteLength(input.body).toString() },
        lookup: input.allowPrivate ? undefined : publicOnlyLookup,
        signal: input.signal,
      },
      (response: IncomingMessage) => {
        response.resume();
        response.on("end", () =>
          finish({ statusCode: response.statusCode ?? null, error: errorOf(response) }),
        );
        response.on("error", (error) =>
          finish({ statusCode: response.statusCode ?? null, error: error.message }),
        );
        response.on("close", () =>
          finish({ statusCode: null, error: "the connection closed before the response ended" }),
        );
      },
    );
    const timer = setTimeout(() => {
      request.destroy(new Error(`timed out after ${input.timeoutMs} ms`));
    }, input.timeoutMs);
    request.on("error", (error) =>
      finish({ statusCode: null, error: describeAttemptFailure(error) }),
    );
    request.end(input.body);
  });
};

/**
 * Why no response came, in words an endpoint's owner can act on, with the
 * system's code for a search: not the resolver's or the socket's own text
 * ("getaddrinfo ENOTFOUND hooks.example.com").
 */
export function describeAttemptFailure(error: NodeJS.ErrnoException): string {
  const code = error.code ?? "";
  const words = networkFailures[code];
  if (words) return `${words} (${code})`;
  if (error.message === refusedAddress || error.message.startsWith("timed out after")) {
    return error.message;
  }
  if (error.name === "AbortError") return "the attempt was cut short: the service was stopping";
  if (code.startsWith("ERR_TLS") || /CERT|SELF_SIGNED|UNABLE_TO_VERIFY/.test(code)) {
    return `the endpoint's TLS certificate was not accepted (${code})`;
  }
  return code ? `the request failed (${code})` : "the request failed";
}

const networkFailures: Record<string, string> = {
  ENOTFOUND: "the endpoint's host does not resolve",
  EAI_AGAIN: "the endpoint's host could not be resolved for now",
  ECONNREFUSED: "the endpoint refused the connection",
  ECONNRESET: "the endpoint reset the connection",
  EPIPE: "the endpoint closed the connection",
  ETIMEDOUT: "the connection to the endpoint timed out",
  EHOSTUNREACH: "the endpoint's host is unreachable",
  ENETUNREACH: "the endpoint's network is unreachable",
  EPROTO: "the endpoint does not speak TLS as expected",
};

function errorOf(response: IncomingMessage): string | null {
  const status = response.statusCode ?? 0;
  return status >= 200 && status < 300 ? null : `HTTP ${status}`;
}
