import { Code, ConnectError } from "@connectrpc/connect";
import {
  codeFromHttpStatus,
  codeToHttpStatus,
  codeToString,
} from "@connectrpc/connect/protocol-connect";
import { type BadRequest, BadRequestSchema } from "../../gen/google/rpc/error_details_pb.js";
import { FieldError } from "../contract/plain-codec.js";
import { fromFieldError } from "../services/errors.js";
import { storeUnavailableReason } from "../store/errors.js";

/** A field violation as REST shows it. */
export interface RestErrorDetail {
  readonly field: string;
  readonly description: string;
}

/** The REST error body: `{ code, message, details }`. */
export interface RestErrorBody {
  readonly code: string;
  readonly message: string;
  readonly details: RestErrorDetail[];
}

/**
 * The HTTP status of an error: Connect's own table, so REST and Connect
 * agree; an HTTP server's own 4xx (415 has no code) keeps its status.
 */
export function httpStatusOf(error: ConnectError, original?: unknown): number {
  const status = httpClientErrorStatus(original);
  return status ?? codeToHttpStatus(error.code);
}

function httpClientErrorStatus(error: unknown): number | undefined {
  if (error instanceof ConnectError) return undefined;
  const status = (error as { statusCode?: unknown } | null)?.statusCode;
  return typeof status === "number" && status >= 400 && status < 500 ? status : undefined;
}

/** The REST body of a ConnectError: its code's name, message and field violations. */
export function restErrorBody(error: ConnectError): RestErrorBody {
  const details = error
    .findDetails(BadRequestSchema)
    .flatMap((detail: BadRequest) => detail.fieldViolations)
    .map(({ field, description }) => ({ field, description }));
  return { code: codeToString(error.code), message: error.rawMessage, details };
}

/**
 * The REST error body as JSON text, for refusals written outside Fastify
 * (before it has a request: the HTTP/1.1 parser's, an HTTP/2 stream's deadline).
 */
export function restErrorText(message: string, code: Code): string {
  return JSON.stringify(restErrorBody(new ConnectError(message, code)));
}

/** The REST error body of an error as JSON text: a Server-Sent Events stream's `error` event. */
export function restErrorJson(error: ConnectError): string {
  return JSON.stringify(restErrorBody(error));
}

/** The code word of a call's outcome (`invalid_argument`), for logs and metrics. */
export function codeOf(error: unknown): string {
  return error instanceof ConnectError ? codeToString(error.code) : "internal";
}

/** Logs what must not reach a caller. */
export type ErrorLogger = (error: unknown, where: string) => void;

/**
 * The one place any error becomes what a caller sees: a ConnectError
 * passes; a codec FieldError is INVALID_ARGUMENT naming the field; an HTTP
 * server's own 4xx (body too large, bad JSON, unsupported media type) keeps
 * its meaning; anything else is logged and becomes INTERNAL with a generic
 * message, so no driver text or stack reaches a caller.
 */
export function toConnectError(error: unknown, where: string, log: ErrorLogger): ConnectError {
  if (error instanceof ConnectError) return error;
  if (error instanceof FieldError) return fromFieldError(error);
  const status = httpClientErrorStatus(error);
  if (status !== undefined) {
    return new ConnectError(httpErrorMessage(status, error as Error), httpErrorCode(status));
  }
  log(error, where);
  const unavailable = storeUnavailableReason(error);
  if (unavailable !== undefined) return storeUnavailableError(unavailable);
  return new ConnectError("internal error", Code.Internal);
}

/** Seconds a client is told to wait before sending a write the store could not take. */
export const storeRetryAfterSeconds = 5;

/**
 * A write the store cannot take now (a full disk, a lock held too long,
 * MongoDB out of reach): `unavailable`, REST 503 with `Retry-After`, so a
 * client or load balancer sends it again later or elsewhere.
 */
export function storeUnavailableError(reason: string): ConnectError {
  return new ConnectError(
    `the service cannot store writes now (${reason}): nothing was changed; retry in ${storeRetryAfterSeconds} s`,
    Code.Unavailable,
    { "retry-after": String(storeRetryAfterSeconds) },
  );
}

/** Seconds a client is told to wait before sending again a write the full queue refused. */
export const writeQueueRetryAfterSeconds = 1;

/**
 * The store's writer has WRITE_QUEUE_LIMIT writes waiting for a commit:
 * `unavailable`, REST 503 with `Retry-After`, nothing changed.
 */
export function writeQueueFullError(limit: number): ConnectError {
  return new ConnectError(
    `the service has ${limit} writes waiting to be stored: nothing was changed; retry in ${writeQueueRetryAfterSeconds} s`,
    Code.Unavailable,
    { "retry-after": String(writeQueueRetryAfterSeconds) },
  );
}

/**
 * The service drains: a request that would run now, or a stream still
 * open, is refused or ended with UNAVAILABLE, so a client sends it again
 * to another instance.
 */
export function shuttingDownError(): ConnectError {
  return new ConnectError("the service is shutting down: send the request again", Code.Unavailable);
}

/**
 * The service listens but is not ready yet (its demo keys or, in a
 * cluster's worker, the writer's word that they are committed, are still
 * to come): `unavailable`, REST 503 with `Retry-After`, never a 401 for a
 * key that is about to exist.
 */
export function startingError(): ConnectError {
  return new ConnectError(
    "the service is starting: nothing was changed; retry in 1 s",
    Code.Unavailable,
    { "retry-after": "1" },
  );
}

/** An HTTP-level refusal (a route or a verb that does not exist), as the HTTP server reports its own. */
export function httpError(status: number, message: string): Error {
  return Object.assign(new Error(message), { statusCode: status });
}

function httpErrorCode(status: number): Code {
  if (status === 404) return Code.NotFound;
  if (status === 405) return Code.Unimplemented;
  if (status === 413) return Code.ResourceExhausted;
  if (status === 401 || status === 403 || status === 429) return codeFromHttpStatus(status);
  return Code.InvalidArgument;
}

// Fastify's own 415 names the type it got; REST's routes take JSON only.
function httpErrorMessage(status: number, error: Error): string {
  return status === 415 && (error as { code?: unknown }).code === "FST_ERR_CTP_INVALID_MEDIA_TYPE"
    ? "Content-Type must be application/json"
    : error.message;
}
