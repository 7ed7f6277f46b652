import { Code, ConnectError } from "@connectrpc/connect";
import { type BadRequest, BadRequestSchema } from "../../gen/google/rpc/error_details_pb.js";
import { FieldError } from "../contract/plain-codec.js";
import { fromFieldError } from "../services/errors.js";

/**
 * HTTP status per Connect code: the Connect protocol's mapping, kept here
 * because Connect's own helper is not public API.
 */
export const httpStatusByCode: Readonly<Record<Code, number>> = {
  [Code.Canceled]: 499,
  [Code.Unknown]: 500,
  [Code.InvalidArgument]: 400,
  [Code.DeadlineExceeded]: 504,
  [Code.NotFound]: 404,
  [Code.AlreadyExists]: 409,
  [Code.PermissionDenied]: 403,
  [Code.ResourceExhausted]: 429,
  [Code.FailedPrecondition]: 400,
  [Code.Aborted]: 409,
  [Code.OutOfRange]: 400,
  [Code.Unimplemented]: 501,
  [Code.Internal]: 500,
  [Code.Unavailable]: 503,
  [Code.DataLoss]: 500,
  [Code.Unauthenticated]: 401,
};

/** The snake_case name of a code, as Connect writes it: `invalid_argument`. */
export function codeName(code: Code): string {
  return Code[code].replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase();
}

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

/** The REST body of a ConnectError: its code's name, message and field violations. */
export function restErrorBody(error: ConnectError): RestErrorBody {
  const details = error
    .findDetails(BadRequestSchema)
    .flatMap((detail: BadRequest) => detail.fieldViolations)
    .map(({ field, description }) => ({ field, description }));
  return { code: codeName(error.code), message: error.rawMessage, details };
}

/** Logs what must not reach a caller. */
export type ErrorLogger = (error: unknown, rpc: string) => void;

/**
 * The one place unexpected errors are caught: a ConnectError passes, a codec
 * FieldError becomes INVALID_ARGUMENT, anything else is logged and becomes
 * INTERNAL with a generic message, so no driver text or stack reaches a caller.
 */
export function toConnectError(error: unknown, rpc: string, log: ErrorLogger): ConnectError {
  if (error instanceof ConnectError) return error;
  if (error instanceof FieldError) return fromFieldError(error);
  log(error, rpc);
  return new ConnectError("internal error", Code.Internal);
}
