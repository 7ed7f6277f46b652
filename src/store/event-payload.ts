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

/** The mark of a payload stored compressed with version 2's dictionaries. */
const packedV2 = "d2:";

/**
 * What version 2 adds to a type's dictionary: the event's own fields that
 * its payload repeats, and that never change once it is stored (erasure
 * rewrites a payload, not these): its time, as the payload's `timestamp`
 * has it, and the ids of its organization, application and customers.
 */
export interface PayloadContext {
  readonly type: string;
  readonly createdAt: Date;
  readonly organizationId: string;
  readonly applicationId: string;
  readonly customerId?: string;
  readonly referredById?: string;
}

/**
 * An event's payload as stored: deflated against its type's dictionary (a
 * payload of that type with every field at its default) followed by the
 * event's own ids and time (see {@link PayloadContext}), as base64 after
 * `d2:`. A payload is a few hundred bytes of JSON whose keys and nulls
 * repeat from one event to the next, so plain deflate barely shrinks it
 * (609 bytes to 372 for a customer); the type's dictionary does (to 190),
 * and the event's ids, which the payload holds and nothing else would
 * predict, take it to 105. A payload that would not shrink is kept as it is.
 */
export function packPayload(json: string, event: PayloadContext): string {
  const packed = `${packedV2}${deflateRawSync(json, { ...deflateOptions, dictionary: dictionaryOf(event) }).toString("base64")}`;
  return packed.length < json.length ? packed : json;
}

/** The JSON of a stored payload, packed by either version or not at all (too small to shrink). */
export function unpackPayload(stored: string, event: PayloadContext): string {
  const version = stored.slice(0, packedV2.length);
  if (version !== packedV1 && version !== packedV2) return stored;
  const dictionary =
    version === packedV2
      ? dictionaryOf(event)
      : (dictionaries.get(event.type) ?? fallbackDictionary);
  const bytes = Buffer.from(stored.slice(version.length), "base64");
  return inflateRawSync(bytes, { windowBits: deflateOptions.windowBits, dictionary }).toString(
    "utf8",
  );
}

// Deflate looks back from the end of a dictionary first, so what a payload
// repeats most surely comes last.
function dictionaryOf(event: PayloadContext): Buffer {
  const type = dictionaries.get(event.type) ?? fallbackDictionary;
  const own =
    (event.referredById ?? "") +
    (event.customerId ?? "") +
    event.organizationId +
    event.applicationId +
    event.createdAt.toISOString();
  return Buffer.concat([type, Buffer.from(own)]);
}
