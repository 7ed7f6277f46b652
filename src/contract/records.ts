import type { DescMessage, Message, MessageShape } from "@bufbuild/protobuf";
import { fromPlain, type PlainObject, toPlain } from "./plain-codec.js";

/**
 * A message from a stored document: the document's fields are the message's
 * plain form (see `src/contract/plain-codec.ts`) with the id in `_id`;
 * storage-only fields (`_id` among them) are skipped and `extra` adds derived
 * ones. The document is read where it is, not copied first.
 */
export function messageFromDoc<Desc extends DescMessage>(
  schema: Desc,
  doc: { _id: string },
  extra?: PlainObject,
): MessageShape<Desc> {
  const overrides = extra ? { id: doc._id, ...extra } : { id: doc._id };
  return fromPlain(schema, doc, { ignoreUnknown: true, overrides });
}

/**
 * A document's fields from a message: its plain form with `Date` timestamps
 * and `_id`, as `Doc`, the document type that declares that plain form.
 */
export function docFieldsFromMessage<Doc extends { _id: string }>(
  schema: DescMessage,
  message: Message,
): Doc {
  const { id, ...fields } = toPlain(schema, message, { timestamps: "date" });
  return { _id: id, ...fields } as Doc;
}
