import type { DescMessage, Message, MessageShape } from "@bufbuild/protobuf";
import { fromPlain, type PlainObject, toPlain } from "../contract/plain-codec.js";

/** A source of the current time, injectable for tests. */
export type Clock = () => Date;

/**
 * A message from a stored document: the document's fields are the message's
 * plain form (see `src/contract/plain-codec.ts`) with the id in `_id`;
 * storage-only fields are skipped and `extra` adds derived ones.
 */
export function messageFromDoc<Desc extends DescMessage>(
  schema: Desc,
  doc: { _id: string },
  extra: PlainObject = {},
): MessageShape<Desc> {
  const { _id, ...fields } = doc;
  return fromPlain(schema, { ...fields, id: _id, ...extra }, { ignoreUnknown: true });
}

/** A document's fields from a message: its plain form with `Date` timestamps and `_id`. */
export function docFieldsFromMessage(schema: DescMessage, message: Message): PlainObject {
  const { id, ...fields } = toPlain(schema, message, { timestamps: "date" });
  return { _id: id, ...fields };
}
