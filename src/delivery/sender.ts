import { lookup as dnsLookup, type LookupAddress } from "node:dns";
import { isIP, type LookupFunction } from "node:net";
import type { Agent } from "undici";
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

// One pool of kept-alive connections per origin, through undici: on
// loopback, a request and its answer (client and server in one process)
// cost 40 µs of CPU against node:http's 68, and deliveries share the loop
// that answers calls. Redirects are not followed (undici's default).
// Loaded with the first attempt: a cluster's workers never send, and
// loading undici took about 90 ms of each process's start.
interface Undici {
  readonly request: typeof import("undici").request;
  readonly publicOnly: Agent;
  readonly anyAddress: Agent;
}
let undici: Undici | undefined;
let loadingUndici: Promise<Undici> | undefined;
const loadUndici = () => {
  loadingUndici ??= import("undici").then(({ Agent, request }) => {
    undici = {
      request,
      publicOnly: new Agent({ connect: { lookup: publicOnlyLookup } }),
      anyAddress: new Agent(),
    };
    return undici;
  });
  return loadingUndici;
};

/**
 * POSTs the body: no redirects followed, the response body read and
 * dropped, the whole attempt bounded by the timeout.
 */
export const sendWebhook: WebhookSender = async (input) => {
  const started = performance.now();
  const elapsed = () => Math.round(performance.now() - started);
  const url = new URL(input.url);
  const host = hostOf(url);
  if (!input.allowPrivate && isIP(host) !== 0 && !isPublicAddress(host)) {
    return { statusCode: null, durationMs: elapsed(), error: refusedAddress };
  }
  const attempt = new AbortController();
  const timer = setTimeout(
    () => attempt.abort(new Error(`timed out after ${input.timeoutMs} ms`)),
    input.timeoutMs,
  );
  const stop = input.signal;
  const onStop = () => attempt.abort(stop?.reason);
  if (stop?.aborted) onStop();
  else stop?.addEventListener("abort", onStop, { once: true });
  try {
    // Once loaded, taken as it is: no turn of the loop per attempt.
    const { request, anyAddress, publicOnly } = undici ?? (await loadUndici());
    const { statusCode, body } = await request(url, {
      method: "POST",
      headers: input.headers,
      body: input.body,
      dispatcher: input.allowPrivate ? anyAddress : publicOnly,
      signal: attempt.signal,
    });
    try {
      for await (const _chunk of body) {
        // Read and dropped: only the status says how the attempt went.
      }
    } catch (error) {
      if (attempt.signal.aborted) throw error;
      return {
        statusCode: null,
        durationMs: elapsed(),
        error: "the connection closed before the response ended",
      };
    }
    return { statusCode, durationMs: elapsed(), error: statusErrorOf(statusCode) };
  } catch (error) {
    const reason = attempt.signal.aborted ? attempt.signal.reason : error;
    return {
      statusCode: null,
      durationMs: elapsed(),
      error: describeAttemptFailure(causeOf(reason)),
    };
  } finally {
    clearTimeout(timer);
    stop?.removeEventListener("abort", onStop);
  }
};

/** The network error behind one of undici's, which wraps some in `cause`. */
function causeOf(error: unknown): NodeJS.ErrnoException {
  const failure = (error ?? new Error("the request failed")) as NodeJS.ErrnoException & {
    cause?: unknown;
  };
  if (!failure.code && failure.cause instanceof Error) return failure.cause;
  return failure;
}

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

function statusErrorOf(status: number): string | null {
  return status >= 200 && status < 300 ? null : `HTTP ${status}`;
}
