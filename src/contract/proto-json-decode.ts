import {
  type DescField,
  type DescMessage,
  fromJson,
  type JsonValue,
  type MessageShape,
  ScalarType,
} from "@bufbuild/protobuf";
import { isFieldError } from "@bufbuild/protobuf/reflect";
import { FieldError, valueKindOf } from "./plain-codec.js";
import { protoEnumNames } from "./proto-json.js";

/**
 * Decodes a request in protobuf's canonical JSON with protobuf-es, and
 * refuses it in the API's words when it does not decode: the field and the
 * JSON it takes (`name must be a string`), not the decoder's (`cannot decode
 * field referral.v1.X.name from JSON: 7`).
 */
export function decodeFromProtoJson<Desc extends DescMessage>(
  schema: Desc,
  json: unknown,
): MessageShape<Desc> {
  if (typeof json !== "object" || json === null || Array.isArray(json)) {
    throw new FieldError("body", "must be a JSON object");
  }
  try {
    return fromJson(schema, json as JsonValue);
  } catch (error) {
    const cause = (error as { cause?: unknown }).cause;
    const field = isFieldError(cause) ? cause.field() : culprit(schema, json);
    if (field === undefined) throw new FieldError("body", `is not a valid ${schema.name}`);
    if (field.kind === "oneof") throw new FieldError(field.name, "may be set only once");
    throw new FieldError(field.jsonName, `must be ${expectedJson(field)}`);
  }
}

/**
 * The top-level field whose value does not decode, for the errors that do
 * not say (a well-known type such as a Struct given an array): each entry
 * is decoded alone. Only runs once decoding has failed.
 */
function culprit(schema: DescMessage, json: object): DescField | undefined {
  for (const [key, value] of Object.entries(json)) {
    try {
      fromJson(schema, { [key]: value } as JsonValue);
    } catch {
      return schema.fields.find((field) => field.jsonName === key || field.name === key);
    }
  }
  return undefined;
}

/** What JSON a field takes, in words. */
function expectedJson(field: DescField): string {
  const [one, many] = itemJson(field);
  if (field.fieldKind === "list") return `an array of ${many}`;
  if (field.fieldKind === "map") return `an object of ${many}`;
  return one;
}

/** What one value (list item, map value) of a field takes: in the singular and the plural. */
function itemJson(field: DescField): [string, string] {
  const kind = valueKindOf(field);
  if (kind === "enum") {
    const words = field.enum ? protoEnumNames(field.enum) : [];
    return [`one of: ${words.join(", ")}`, `these words: ${words.join(", ")}`];
  }
  if (kind === "message") return messageJson(field.message as DescMessage);
  switch (field.scalar) {
    case ScalarType.STRING:
      return ["a string", "strings"];
    case ScalarType.BOOL:
      return ["a boolean", "booleans"];
    case ScalarType.BYTES:
      return ["a base64 string", "base64 strings"];
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return ["a number", "numbers"];
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return ["a 32-bit integer", "32-bit integers"];
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return ["an unsigned 32-bit integer", "unsigned 32-bit integers"];
    default:
      return ["a 64-bit integer (a number or a decimal string)", "64-bit integers"];
  }
}

function messageJson(schema: DescMessage): [string, string] {
  switch (schema.typeName) {
    case "google.protobuf.Timestamp":
      return ["an RFC 3339 date-time string", "RFC 3339 date-time strings"];
    case "google.protobuf.Duration":
      return ['a duration string such as "3.5s"', "duration strings"];
    case "google.protobuf.Value":
      return ["a JSON value", "JSON values"];
    case "google.protobuf.Struct":
      // As REST's codec says it.
      return ["an object", "objects"];
    default:
      return ["a JSON object", "JSON objects"];
  }
}
