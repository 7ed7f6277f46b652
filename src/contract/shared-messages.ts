import type { DescMessage, Message, MessageInitShape, MessageShape } from "@bufbuild/protobuf";
import { create } from "@bufbuild/protobuf";

/**
 * Messages that many calls are answered with: the views the store keeps in
 * memory (customers, campaigns) and the responses built from them. A shared
 * message is frozen, so no call can change what the next one is given, and
 * each wire format encodes it once: its bytes cannot change either.
 *
 * Freshness is the cache's business, not this module's: a cache drops a
 * view when what it was built from is written, and the next call shares a
 * new message.
 */
const encodings = new WeakMap<Message, Map<EncodingFormat, unknown>>();

/** A wire format's key in the memo of a shared message (one object per format). */
export type EncodingFormat = object;

/** Freezes a message and everything in it, and gives it a memo of its encodings. */
export function share<M extends Message>(message: M): M {
  deepFreeze(message);
  encodings.set(message, new Map());
  return message;
}

/** Whether the message was {@link share}d. */
export function isShared(message: Message): boolean {
  return encodings.has(message);
}

/**
 * The message in `format`: encoded once and remembered when the message is
 * shared, encoded every time otherwise.
 */
export function encodeOnce<T>(message: Message, format: EncodingFormat, encode: () => T): T {
  const memo = encodings.get(message);
  if (memo === undefined) return encode();
  let encoded = memo.get(format) as T | undefined;
  if (encoded === undefined) {
    encoded = encode();
    memo.set(format, encoded);
  }
  return encoded;
}

const responses = new WeakMap<object, Map<DescMessage, Message>>();

/**
 * A shared message built from a shared source (a view, or a frozen list of
 * them), the same one for as long as the source lives: a cached customer
 * answers every GetCustomer with one response message, whose bytes are then
 * encoded once per protocol.
 */
export function sharedFrom<Desc extends DescMessage>(
  source: object,
  schema: Desc,
  init: () => MessageInitShape<Desc>,
): MessageShape<Desc> {
  let built = responses.get(source);
  if (built === undefined) {
    built = new Map();
    responses.set(source, built);
  }
  let message = built.get(schema) as MessageShape<Desc> | undefined;
  if (message === undefined) {
    message = share(create(schema, init()));
    built.set(schema, message);
  }
  return message;
}

function deepFreeze(value: unknown): void {
  if (typeof value !== "object" || value === null || Object.isFrozen(value)) return;
  // Bytes fields are typed arrays, which cannot be frozen: left as they are.
  if (ArrayBuffer.isView(value)) return;
  Object.freeze(value);
  for (const key of Object.keys(value)) deepFreeze((value as Record<string, unknown>)[key]);
}
