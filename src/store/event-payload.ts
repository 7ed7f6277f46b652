import { promisify } from "node:util";
import { deflateRaw, inflateRaw } from "node:zlib";
import { eventPayloadDictionaryV1 } from "./event-payload-dictionary-v1.js";

const deflate = promisify(deflateRaw);
const inflate = promisify(inflateRaw);

/** The mark of a payload stored compressed with dictionary version 1. */
const packedV1 = "d1:";
const dictionaryV1 = Buffer.from(eventPayloadDictionaryV1);

/**
 * An event's payload as stored: deflated against a dictionary of every
 * event type's fields, as base64 after `d1:`. A payload is a few hundred
 * bytes of JSON whose keys and nulls repeat from one event to the next, so
 * plain deflate barely shrinks it (608 bytes to 334 on customer events) and
 * the dictionary does (to about 70). It runs in zlib's thread pool, off the
 * event loop, when the relay stores the event, not on the request's write.
 * A payload that would not shrink is kept as it is.
 */
export async function packPayload(json: string): Promise<string> {
  const packed = `${packedV1}${(await deflate(json, { dictionary: dictionaryV1 })).toString("base64")}`;
  return packed.length < json.length ? packed : json;
}

/** The JSON of a stored payload, packed or not (events stored before packing are plain JSON). */
export async function unpackPayload(stored: string): Promise<string> {
  if (!stored.startsWith(packedV1)) return stored;
  const bytes = Buffer.from(stored.slice(packedV1.length), "base64");
  return (await inflate(bytes, { dictionary: dictionaryV1 })).toString("utf8");
}
