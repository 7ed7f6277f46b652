import { Code, ConnectError } from "@connectrpc/connect";
import { BadRequestSchema } from "../../gen/google/rpc/error_details_pb.js";
import type { FieldError } from "../contract/plain-codec.js";

/**
 * INVALID_ARGUMENT naming the field, with a `google.rpc.BadRequest` detail so
 * gRPC and Connect clients can read the field programmatically.
 */
export function invalidArgument(field: string, description: string): ConnectError {
  return new ConnectError(`${field} ${description}`, Code.InvalidArgument, undefined, [
    { desc: BadRequestSchema, value: { fieldViolations: [{ field, description }] } },
  ]);
}

/**
 * PERMISSION_DENIED naming the field: what the caller's key may not send or
 * do, with a `google.rpc.BadRequest` detail naming it.
 */
export function permissionDenied(field: string, description: string): ConnectError {
  return new ConnectError(`${field} ${description}`, Code.PermissionDenied, undefined, [
    { desc: BadRequestSchema, value: { fieldViolations: [{ field, description }] } },
  ]);
}

/** The INVALID_ARGUMENT for a value the plain codec refused. */
export function fromFieldError(error: FieldError): ConnectError {
  return invalidArgument(error.field, error.description);
}

/** NOT_FOUND for a record that does not exist in the caller's application. */
export function notFound(what: string, why?: string): ConnectError {
  return new ConnectError(`${what} not found${why ? `: ${why}` : ""}`, Code.NotFound);
}

/** FAILED_PRECONDITION: the request is valid but the state forbids it. */
export function failedPrecondition(message: string): ConnectError {
  return new ConnectError(message, Code.FailedPrecondition);
}
