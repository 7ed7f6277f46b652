import { deflateRawSync, inflateRawSync } from "node:zlib";
import { eventPayloadDictionaryV1 } from "./event-payload-dictionary-v1.js";

/** The mark of a payload stored compressed with the version 1 dictionaries. */
const packedV1 = "d1:";

/**
 * One dictionary per event type: the line of the frozen text that is a
 * payload of that type. A type added since (not in the text) takes the
 * last line's, forever, so what it packs always reads back.
 */
const dictionaries = new Map<string, Buffer>();
const lines = eventPayloadDictionaryV1.split("\n");
for (const line of lines) {
  dictionaries.set((JSON.parse(line) as { type: string }).type, Buffer.from(line));
}
const fallbackDictionary = Buffer.from(lines[lines.length - 1] ?? "");

// A small window and the fastest level: a payload is a few hundred bytes,
// so a bigger window finds nothing more, and zlib's set-up is most of the
// cost (13 µs a payload this way, 30 with zlib's defaults). Synchronous on
// purpose: zlib's asynchronous calls cost about 270 µs of CPU each in
// thread hand-offs, which cut the webhook peak by a quarter.
const deflateOptions = { windowBits: 10, memLevel: 1, level: 1 } as const;

/**
 * An event's payload as stored: deflated against its type's dictionary (a
 * payload of that type with every field at its default), as base64 after
 * `d1:`. A payload is a few hundred bytes of JSON whose keys and nulls
 * repeat from one event to the next, so plain deflate barely shrinks it
 * (552 bytes to 372 for a customer) and the dictionary does (to 139). A
 * payload that would not shrink is kept as it is.
 */
export function packPayload(json: string, type: string): string {
  const dictionary = dictionaries.get(type) ?? fallbackDictionary;
  const packed = `${packedV1}${deflateRawSync(json, { ...deflateOptions, dictionary }).toString("base64")}`;
  return packed.length < json.length ? packed : json;
}

/** The JSON of a stored payload, packed or not (a payload too small to shrink is plain JSON). */
export function unpackPayload(stored: string, type: string): string {
  if (!stored.startsWith(packedV1)) return stored;
  const dictionary = dictionaries.get(type) ?? fallbackDictionary;
  const bytes = Buffer.from(stored.slice(packedV1.length), "base64");
  return inflateRawSync(bytes, { windowBits: deflateOptions.windowBits, dictionary }).toString(
    "utf8",
  );
}
