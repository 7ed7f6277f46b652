import { type DescEnum, type DescField, type DescMessage, ScalarType } from "@bufbuild/protobuf";
import { loneSurrogate } from "../domain/text.js";
import { unknownFieldDescription } from "./field-suggestion.js";
import { FieldError } from "./plain-codec.js";

/**
 * Checks a request in protobuf's canonical JSON (the Connect protocol's JSON
 * codec) before it is decoded: every key must name a field and every enum
 * value must be one of the enum's, or the call is refused naming the field,
 * with the words REST uses for the same mistake. (The decoder itself would
 * refuse them too, but without naming the field of an enum.)
 */
export function checkProtoJson(schema: DescMessage, json: unknown): void {
  checkMessage(schema, json, "");
}

function checkMessage(schema: DescMessage, json: unknown, path: string): void {
  if (typeof json !== "object" || json === null || Array.isArray(json)) return;
  const fields = fieldsByKey(schema);
  for (const [key, value] of Object.entries(json)) {
    const field = fields.get(key);
    if (!field) {
      const names = schema.fields.map((known) => known.jsonName);
      throw new FieldError(join(path, key), unknownFieldDescription(key, names));
    }
    if (value === null) continue;
    checkValue(field, value, join(path, field.jsonName));
  }
}

function checkValue(field: DescField, value: unknown, path: string): void {
  switch (field.fieldKind) {
    case "scalar":
      if (field.scalar === ScalarType.STRING) checkString(value, path);
      return;
    case "enum":
      checkEnum(field.enum, value, path);
      return;
    case "message":
      checkNested(field.message, value, path);
      return;
    case "list":
      if (!Array.isArray(value)) return;
      value.forEach((item, index) => {
        if (field.listKind === "scalar" && field.scalar === ScalarType.STRING) {
          checkString(item, `${path}[${index}]`);
        }
        if (field.listKind === "enum") checkEnum(field.enum, item, `${path}[${index}]`);
        if (field.listKind === "message") checkNested(field.message, item, `${path}[${index}]`);
      });
      return;
    case "map":
      if (typeof value !== "object" || value === null) return;
      for (const [key, item] of Object.entries(value)) {
        if (field.mapKind === "enum") checkEnum(field.enum, item, `${path}.${key}`);
        if (field.mapKind === "message") checkNested(field.message, item, `${path}.${key}`);
      }
      return;
    default:
      return;
  }
}

/**
 * A lone surrogate is refused in the words REST uses (the decoder would
 * refuse it too, as a value that is not a string).
 */
function checkString(value: unknown, path: string): void {
  if (typeof value === "string" && !value.isWellFormed()) throw new FieldError(path, loneSurrogate);
}

// Well-known types have JSON forms of their own (a Struct is any object).
function checkNested(schema: DescMessage, value: unknown, path: string): void {
  if (!schema.typeName.startsWith("google.protobuf.")) checkMessage(schema, value, path);
}

function checkEnum(schema: DescEnum, value: unknown, path: string): void {
  if (schema.typeName === "google.protobuf.NullValue") return;
  const known =
    typeof value === "string"
      ? schema.values.some((entry) => entry.name === value)
      : typeof value === "number" && schema.values.some((entry) => entry.number === value);
  if (known) return;
  throw new FieldError(path, `must be one of: ${protoEnumNames(schema).join(", ")}`);
}

/** An enum's values as protobuf's JSON names them, without the unset zero. */
export function protoEnumNames(schema: DescEnum): string[] {
  return schema.values.filter((entry) => entry.number !== 0).map((entry) => entry.name);
}

const keysBySchema = new WeakMap<DescMessage, Map<string, DescField>>();

/** A message's fields by JSON name and by proto name, as the decoder accepts them. */
function fieldsByKey(schema: DescMessage): Map<string, DescField> {
  let fields = keysBySchema.get(schema);
  if (!fields) {
    fields = new Map();
    for (const field of schema.fields) {
      fields.set(field.jsonName, field);
      fields.set(field.name, field);
    }
    keysBySchema.set(schema, fields);
  }
  return fields;
}

function join(path: string, key: string): string {
  return path ? `${path}.${key}` : key;
}
