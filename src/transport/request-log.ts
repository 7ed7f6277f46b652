import { randomUUID } from "node:crypto";
import type { Logger } from "pino";
import { callerKey } from "../services/context.js";
import type { Call, CallObserver } from "./pipeline.js";

// A request id a client sends is kept if it is short and plain, so it can
// be logged and echoed safely; anything else is replaced by a fresh one.
const acceptableRequestId = /^[\w.:-]{1,128}$/;

/**
 * One structured line per call on every protocol: the request id (the
 * client's `x-request-id`, or a new one, returned in the response), the
 * protocol, the RPC, the API key's id (never the key), the client's
 * address (see `ClientAddressOf`), the code and the duration. A
 * server-streaming call's line tells its opening (the duration is the time
 * to its first message); a second line, `stream ended`, tells how and when
 * its stream ended and how many messages it sent.
 */
export function logCalls(logger: Logger): CallObserver {
  return {
    enter(call) {
      const offered = call.header(requestIdHeader);
      const requestId = offered && acceptableRequestId.test(offered) ? offered : randomUUID();
      call.responseHeaders.set(requestIdHeader, requestId);
      // Read now, while the connection is open: the line is written after
      // the response, and a connection the client closes has no peer by then.
      if (logger.isLevelEnabled("info")) void call.clientAddress;
    },
    leave(call, code, elapsedMs) {
      if (!logger.isLevelEnabled("info")) return;
      logger.info(fieldsOf(call, code, elapsedMs), "call");
    },
    streamEnded(call, code, elapsedMs, messages) {
      if (!logger.isLevelEnabled("info")) return;
      logger.info({ ...fieldsOf(call, code, elapsedMs), messages }, "stream ended");
    },
  };
}

function fieldsOf(call: Call, code: string, elapsedMs: number) {
  return {
    requestId: call.responseHeaders.get(requestIdHeader),
    protocol: call.protocol,
    rpc: call.rpc.name,
    keyId: call.context.values.get(callerKey)?.keyId,
    client: call.clientAddress,
    code,
    durationMs: Math.round(elapsedMs * 100) / 100,
  };
}

const requestIdHeader = "x-request-id";
