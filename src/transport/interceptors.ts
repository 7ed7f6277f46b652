import { rejectUnknownFields } from "../contract/unknown-fields.js";
import type { Authenticator } from "../services/authentication.js";
import { callerKey } from "../services/context.js";
import { type ErrorLogger, toConnectError } from "./errors.js";
import type { Interceptor } from "./pipeline.js";

/**
 * Every step a call takes before its implementation, in order, for every
 * protocol. A cross-cutting concern (limits, metrics, logs) is one more
 * entry here.
 */
export function interceptors(deps: {
  authenticator: Authenticator;
  log: ErrorLogger;
}): Interceptor[] {
  return [normaliseErrors(deps.log), authenticate(deps.authenticator), decodeRequest];
}

/** Whatever goes wrong leaves as a ConnectError (see `toConnectError`). */
function normaliseErrors(log: ErrorLogger): Interceptor {
  return async (call, next) => {
    try {
      return await next();
    } catch (error) {
      throw toConnectError(error, call.rpc.name, log);
    }
  };
}

/**
 * Checks the credential against the RPC's `(referral.v1.access)` before the
 * request is decoded, and gives the implementation its caller.
 */
function authenticate(authenticator: Authenticator): Interceptor {
  return async (call, next) => {
    const caller = await authenticator.authenticate(call.rpc.method, call.header("authorization"));
    if (caller) call.context.values.set(callerKey, caller);
    return next();
  };
}

/** Decodes the request where the transport left it encoded; unknown fields are refused. */
const decodeRequest: Interceptor = (call, next) => {
  const request = call.request ?? call.decode?.();
  if (!request) throw new Error(`${call.rpc.name}: the transport gave no request`);
  rejectUnknownFields(call.rpc.method.input, request);
  call.request = request;
  return next();
};
