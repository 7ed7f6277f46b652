import { createHash } from "node:crypto";
import {
  create,
  createRegistry,
  type DescMethod,
  fromBinary,
  type Message,
  toBinary,
} from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { codeFromString, codeToString } from "@connectrpc/connect/protocol-connect";
import { file_google_rpc_error_details } from "../../gen/google/rpc/error_details_pb.js";
import { FieldError } from "../contract/plain-codec.js";
import type { ApiKeyKindName, Clock } from "../domain/tenancy.js";
import { callerKey } from "../services/context.js";
import type { IdempotencyKeyDoc, IdempotentOutcomeDoc } from "../store/documents.js";
import {
  adminTenantId,
  claimIdempotencyKey,
  type IdempotencyTimes,
  removeExpiredIdempotencyKeys,
  removeIdempotencyKey,
  updateIdempotencyOutcome,
} from "../store/idempotency.js";
import type { SecretBox } from "../store/secret-box.js";
import type { Store } from "../store/store.js";
import { type ErrorLogger, toConnectError } from "./errors.js";
import type { Call, Interceptor, Next, Rpc } from "./pipeline.js";
import { httpRouteOf } from "./rest/http-rules.js";

/** The request header (gRPC metadata) that carries the key, on every protocol. */
export const idempotencyKeyHeader = "idempotency-key";

/** The response header (gRPC metadata) set on a replayed outcome. */
export const idempotentReplayedHeader = "idempotent-replayed";

/** A key lives 24 hours; a running call holds it for a minute at most. */
export const defaultIdempotencyTimes: IdempotencyTimes = {
  expiryMs: 24 * 3_600_000,
  // Calls take milliseconds; a minute covers a slow store, and bounds how
  // long a call that died with its instance keeps retries at ABORTED.
  leaseMs: 60_000,
};

/**
 * Outcomes a retry may not meet again (the store was down, a limit was
 * hit, the call was cut short): not kept, so a retry runs the call again.
 */
const transientCodes: ReadonlySet<Code> = new Set([
  Code.Canceled,
  Code.Unknown,
  Code.DeadlineExceeded,
  Code.ResourceExhausted,
  Code.Aborted,
  Code.Internal,
  Code.Unavailable,
]);

const keyPattern = /^[\x20-\x7e]{1,255}$/;

/**
 * Idempotency keys on every write RPC, on every protocol. A write sent with
 * an `Idempotency-Key` runs once per tenant and key: a retry with the same
 * request gets the first outcome again (the response message, or the
 * error), with `idempotent-replayed: true`; another request under the key
 * is INVALID_ARGUMENT; a retry while the first still runs is ABORTED. Keys
 * live in the store, so every instance on it agrees. It runs after
 * authentication and decoding: it needs the caller and the request.
 */
export function idempotencyKeys(deps: {
  store: Store;
  clock: Clock;
  log: ErrorLogger;
  /** Seals stored responses (the webhook secrets' box). */
  secretBox: SecretBox;
  times?: IdempotencyTimes;
}): Interceptor {
  const db = deps.store.system;
  const times = deps.times ?? defaultIdempotencyTimes;
  // MongoDB's TTL index removes expired keys; the embedded engine has none.
  const sweepsExpired = deps.store.engine === "embedded";
  const runOnce = async (call: Call, next: Next, key: string) => {
    if (!keyPattern.test(key)) {
      throw new ConnectError(
        "the Idempotency-Key must be 1 to 255 printable ASCII characters",
        Code.InvalidArgument,
      );
    }
    const caller = call.context.values.get(callerKey);
    const tenantId = caller?.tenant.applicationId ?? adminTenantId;
    const requestHash = requestHashOf(call.rpc, call.request as Message, caller?.keyKind);
    const request = { key, rpc: call.rpc.name, requestHash };
    const now = deps.clock();
    const [claim] = await Promise.all([
      claimIdempotencyKey(db, tenantId, request, now, times),
      // Two per key, so expired keys go at least as fast as new ones come.
      sweepsExpired ? removeExpiredIdempotencyKeys(db, now, 2) : undefined,
    ]);
    switch (claim.kind) {
      case "mismatch":
        throw new ConnectError(
          "this Idempotency-Key was sent with a different request: use a new key for a new request",
          Code.InvalidArgument,
        );
      case "running":
        throw new ConnectError(
          "a request with this Idempotency-Key is still running: retry later",
          Code.Aborted,
        );
      case "replay":
        call.responseHeaders.set(idempotentReplayedHeader, "true");
        return replay(call.rpc.method, claim.outcome, deps.secretBox);
    }
    return runUnderKey(call, next, claim.record, deps);
  };
  return (call, next) => {
    const key = call.header(idempotencyKeyHeader);
    return key === undefined || !isWriteRpc(call.rpc.method)
      ? next(call)
      : runOnce(call, next, key);
  };
}

/** Runs the call that holds the key and keeps its outcome for the retries. */
async function runUnderKey(
  call: Call,
  next: Next,
  record: IdempotencyKeyDoc,
  deps: { store: Store; clock: Clock; log: ErrorLogger; secretBox: SecretBox },
): Promise<Message> {
  const db = deps.store.system;
  const keep = async (outcome: IdempotentOutcomeDoc | undefined) => {
    try {
      if (outcome) await updateIdempotencyOutcome(db, record, outcome, deps.clock());
      else await removeIdempotencyKey(db, record);
    } catch (error) {
      // The call's own outcome stands; a retry meets ABORTED until the lease ends.
      deps.log(error, `${call.rpc.name}: keeping its idempotency key's outcome`);
    }
  };
  let response: Message;
  try {
    response = await next(call);
  } catch (error) {
    // Only the refusals the call itself decided are replayed; anything
    // unexpected is left to normaliseErrors, which logs it once.
    const decided =
      error instanceof ConnectError || error instanceof FieldError
        ? toConnectError(error, call.rpc.name, deps.log)
        : undefined;
    await keep(decided && !transientCodes.has(decided.code) ? errorOutcome(decided) : undefined);
    throw error;
  }
  const bytes = toBinary(call.rpc.method.output, response);
  await keep({ responseSealed: deps.secretBox.seal(base64(bytes)) });
  return response;
}

const writeRpcs = new WeakMap<DescMethod, boolean>();

/**
 * Whether an RPC writes, from the contract: every RPC but those REST serves
 * with GET (which `google.api.http` keeps for reads), the admin API's
 * included. An RPC without a REST route counts as a write.
 */
export function isWriteRpc(method: DescMethod): boolean {
  let write = writeRpcs.get(method);
  if (write === undefined) {
    write = httpRouteOf(method)?.verb !== "GET";
    writeRpcs.set(method, write);
  }
  return write;
}

/**
 * The request's fingerprint: SHA-256 of the RPC and the request message's
 * binary form, so a retry over another protocol matches the same request.
 * A public key's request is marked as such: a secret key's outcome (which
 * may hold what a public key may not read, see docs/trust.md) is never
 * replayed to a public key sending the same request under the same key,
 * nor the other way round. Secret and admin requests keep the plain form.
 */
export function requestHashOf(
  rpc: Pick<Rpc, "name" | "method">,
  request: Message,
  keyKind?: ApiKeyKindName,
): string {
  const hash = createHash("sha256")
    .update(rpc.name)
    .update("\0")
    .update(toBinary(rpc.method.input, request));
  if (keyKind === "public") hash.update("\0public");
  return hash.digest("hex");
}

/** The outcome again: the response message, or the error with its details. */
function replay(method: DescMethod, outcome: IdempotentOutcomeDoc, secretBox: SecretBox): Message {
  if ("responseSealed" in outcome) {
    return fromBinary(method.output, fromBase64(secretBox.open(outcome.responseSealed)));
  }
  const details = outcome.details.flatMap(({ type, value }) => {
    const desc = errorDetailTypes.getMessage(type);
    return desc ? [{ desc, value: fromBinary(desc, fromBase64(value)) }] : [];
  });
  throw new ConnectError(
    outcome.message,
    codeFromString(outcome.code) ?? Code.Unknown,
    undefined,
    details,
  );
}

/** The detail types errors carry (`google.rpc.BadRequest`), to decode replayed ones. */
const errorDetailTypes = createRegistry(file_google_rpc_error_details);

function errorOutcome(error: ConnectError): IdempotentOutcomeDoc {
  return {
    code: codeToString(error.code),
    message: error.rawMessage,
    details: error.details.map((detail) =>
      "desc" in detail
        ? {
            type: detail.desc.typeName,
            value: base64(toBinary(detail.desc, create(detail.desc, detail.value))),
          }
        : { type: detail.type, value: base64(detail.value) },
    ),
  };
}

function base64(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64");
}

function fromBase64(text: string): Uint8Array {
  return new Uint8Array(Buffer.from(text, "base64"));
}
