import type { DescMessage, Message } from "@bufbuild/protobuf";
import { FieldError } from "./plain-codec.js";

/**
 * Refuses a decoded binary message that carried fields its type does not
 * declare (protobuf keeps them as `$unknown`), at any depth, naming where:
 * the binary protocols then refuse what the JSON ones refuse.
 */
export function rejectUnknownFields(schema: DescMessage, message: Message, path = ""): void {
  const unknown = (message as { $unknown?: readonly { no: number }[] }).$unknown;
  if (unknown && unknown.length > 0) {
    throw new FieldError(
      `${path}${path ? "." : ""}${unknown[0]?.no}`,
      "is not a known field number",
    );
  }
  const values = message as unknown as Record<string, unknown>;
  for (const field of schema.fields) {
    if (field.message === undefined || field.message.typeName.startsWith("google.protobuf.")) {
      continue;
    }
    const value = values[field.localName];
    if (value === undefined) continue;
    const at = `${path}${path ? "." : ""}${field.jsonName}`;
    if (field.fieldKind === "message") {
      rejectUnknownFields(field.message, value as Message, at);
    } else if (field.fieldKind === "list") {
      (value as Message[]).forEach((item, index) => {
        rejectUnknownFields(field.message as DescMessage, item, `${at}[${index}]`);
      });
    } else if (field.fieldKind === "map") {
      for (const [key, item] of Object.entries(value as Record<string, Message>)) {
        rejectUnknownFields(field.message, item, `${at}.${key}`);
      }
    }
  }
}
