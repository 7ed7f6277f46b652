import { randomUUID } from "node:crypto";
import type { Logger } from "pino";
import { callerKey } from "../services/context.js";
import type { CallObserver } from "./pipeline.js";

// A request id a client sends is kept if it is short and plain, so it can
// be logged and echoed safely; anything else is replaced by a fresh one.
const acceptableRequestId = /^[\w.:-]{1,128}$/;

/**
 * One structured line per call on every protocol: the request id (the
 * client's `x-request-id`, or a new one, returned in the response), the
 * protocol, the RPC, the API key's id (never the key), the client's
 * address (see `ClientAddressOf`), the code and the duration.
 */
export function logCalls(logger: Logger): CallObserver {
  return {
    enter(call) {
      const offered = call.header(requestIdHeader);
      const requestId = offered && acceptableRequestId.test(offered) ? offered : randomUUID();
      call.responseHeaders.set(requestIdHeader, requestId);
    },
    leave(call, code, elapsedMs) {
      if (!logger.isLevelEnabled("info")) return;
      logger.info(
        {
          requestId: call.responseHeaders.get(requestIdHeader),
          protocol: call.protocol,
          rpc: call.rpc.name,
          keyId: call.context.values.get(callerKey)?.keyId,
          client: call.clientAddress,
          code,
          durationMs: Math.round(elapsedMs * 100) / 100,
        },
        "call",
      );
    },
  };
}

const requestIdHeader = "x-request-id";
