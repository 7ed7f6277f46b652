import {
  create,
  type DescEnum,
  type DescField,
  type DescMessage,
  type Message,
  type MessageShape,
  ScalarType,
} from "@bufbuild/protobuf";
import {
  FeatureSet_FieldPresence,
  StructSchema,
  type Timestamp,
  TimestampSchema,
  timestampDate,
  timestampFromDate,
} from "@bufbuild/protobuf/wkt";
import { enumWords, omitWhenUnset } from "./options.js";

/**
 * Converts messages to and from the plain objects of the REST API and of the
 * stored documents, driven by message reflection so no resource needs a
 * mapper of its own.
 *
 * The plain form is the specification's JSON: camelCase keys, every declared
 * field present, unset fields with explicit presence as `null`, enums as their
 * REST words, `google.protobuf.Struct` as a plain object. Timestamps are ISO
 * 8601 strings on the wire and `Date`s in documents.
 */
export interface PlainOptions {
  /** How timestamps are written: ISO strings (REST) or `Date`s (documents). */
  readonly timestamps: "iso" | "date";
}

/** A plain object as produced by {@link toPlain}. */
export type PlainObject = Record<string, unknown>;

/** A value that does not fit its field; `field` is the camelCase path. */
export class FieldError extends Error {
  constructor(
    readonly field: string,
    readonly description: string,
  ) {
    super(`${field}: ${description}`);
    this.name = "FieldError";
  }
}

const restOptions: PlainOptions = { timestamps: "iso" };

/** Writes a message in its plain form. */
export function toPlain(
  schema: DescMessage,
  message: Message,
  options: PlainOptions = restOptions,
): PlainObject {
  const out: PlainObject = {};
  const record = message as unknown as Record<string, unknown>;
  for (const field of schema.fields) {
    const value = record[field.localName];
    if (isUnset(field, value)) {
      if (omitWhenUnset(field)) continue;
      out[field.jsonName] = unsetValue(field);
      continue;
    }
    out[field.jsonName] = plainFieldValue(field, value, options);
  }
  return out;
}

function isUnset(field: DescField, value: unknown): boolean {
  switch (field.fieldKind) {
    case "list":
    case "map":
      return false;
    case "message":
      return value === undefined;
    default:
      return field.presence !== FeatureSet_FieldPresence.IMPLICIT && value === undefined;
  }
}

function unsetValue(field: DescField): unknown {
  // A Struct is free-form data: an absent one reads as an empty object.
  if (field.fieldKind === "message" && field.message.typeName === StructSchema.typeName) return {};
  return null;
}

function plainFieldValue(field: DescField, value: unknown, options: PlainOptions): unknown {
  switch (field.fieldKind) {
    case "scalar":
      return plainScalar(field.scalar, value);
    case "enum":
      return plainEnum(field.enum, value as number);
    case "message":
      return plainMessage(field.message, value as Message, options);
    case "list":
      return (value as unknown[]).map((item) => {
        if (field.listKind === "scalar") return plainScalar(field.scalar, item);
        if (field.listKind === "enum") return plainEnum(field.enum, item as number);
        return plainMessage(field.message, item as Message, options);
      });
    case "map": {
      const out: PlainObject = {};
      for (const [key, item] of Object.entries(value as Record<string, unknown>)) {
        if (field.mapKind === "scalar") out[key] = plainScalar(field.scalar, item);
        else if (field.mapKind === "enum") out[key] = plainEnum(field.enum, item as number);
        else out[key] = plainMessage(field.message, item as Message, options);
      }
      return out;
    }
  }
}

function plainScalar(type: ScalarType, value: unknown): unknown {
  if (typeof value === "bigint") return Number(value);
  if (type === ScalarType.BYTES) return Buffer.from(value as Uint8Array).toString("base64");
  return value;
}

function plainEnum(desc: DescEnum, value: number): string | null {
  return enumWords(desc).byNumber.get(value) ?? null;
}

function plainMessage(schema: DescMessage, value: Message, options: PlainOptions): unknown {
  switch (schema.typeName) {
    case TimestampSchema.typeName: {
      const date = timestampDate(value as Timestamp);
      return options.timestamps === "date" ? date : date.toISOString();
    }
    case StructSchema.typeName:
      // protobuf-es represents Struct fields as plain JSON objects already.
      return value;
    default:
      return toPlain(schema, value, options);
  }
}

/** How {@link fromPlain} treats keys that name no field. */
export interface ReadOptions {
  /** Skip unknown keys (documents carry storage-only fields) instead of refusing them. */
  readonly ignoreUnknown?: boolean;
  /** The camelCase path of the object, for error messages. */
  readonly path?: string;
}

/**
 * Reads a message from its plain form. Keys may be camelCase or snake_case;
 * `null` leaves a field unset. A key that names no field, or a value of the
 * wrong type, throws a {@link FieldError} naming the field.
 */
export function fromPlain<Desc extends DescMessage>(
  schema: Desc,
  plain: unknown,
  options: ReadOptions = {},
): MessageShape<Desc> {
  const path = options.path ?? "";
  if (!isPlainObject(plain)) {
    throw new FieldError(path || "body", "must be a JSON object");
  }
  const init: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(plain)) {
    const field = fieldByKey(schema, key);
    if (!field) {
      if (options.ignoreUnknown) continue;
      throw new FieldError(join(path, key), "is not a known field");
    }
    if (value === null || value === undefined) continue;
    init[field.localName] = readField(field, value, join(path, field.jsonName), options);
  }
  return create(schema, init as never);
}

/** Finds a field by its camelCase JSON name or its proto (snake_case) name. */
export function fieldByKey(schema: DescMessage, key: string): DescField | undefined {
  return fieldIndex(schema).get(key);
}

const fieldIndexCache = new WeakMap<DescMessage, Map<string, DescField>>();

function fieldIndex(schema: DescMessage): Map<string, DescField> {
  let index = fieldIndexCache.get(schema);
  if (!index) {
    index = new Map();
    for (const field of schema.fields) {
      index.set(field.jsonName, field);
      index.set(field.name, field);
    }
    fieldIndexCache.set(schema, index);
  }
  return index;
}

function join(path: string, key: string): string {
  return path ? `${path}.${key}` : key;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return (
    typeof value === "object" && value !== null && !Array.isArray(value) && !(value instanceof Date)
  );
}

function readField(field: DescField, value: unknown, path: string, options: ReadOptions): unknown {
  switch (field.fieldKind) {
    case "scalar":
      return readScalar(field.scalar, value, path);
    case "enum":
      return readEnum(field.enum, value, path);
    case "message":
      return readMessage(field.message, value, path, options);
    case "list":
      if (!Array.isArray(value)) throw new FieldError(path, "must be an array");
      return value.map((item, i) => {
        const itemPath = `${path}[${i}]`;
        if (item === null) throw new FieldError(itemPath, "must not be null");
        if (field.listKind === "scalar") return readScalar(field.scalar, item, itemPath);
        if (field.listKind === "enum") return readEnum(field.enum, item, itemPath);
        return readMessage(field.message, item, itemPath, options);
      });
    case "map": {
      if (!isPlainObject(value)) throw new FieldError(path, "must be an object");
      const out: Record<string, unknown> = {};
      for (const [key, item] of Object.entries(value)) {
        const itemPath = `${path}.${key}`;
        if (field.mapKind === "scalar") out[key] = readScalar(field.scalar, item, itemPath);
        else if (field.mapKind === "enum") out[key] = readEnum(field.enum, item, itemPath);
        else out[key] = readMessage(field.message, item, itemPath, options);
      }
      return out;
    }
  }
}

const int32Range = { min: -(2 ** 31), max: 2 ** 31 - 1 };
const uint32Range = { min: 0, max: 2 ** 32 - 1 };

function readScalar(type: ScalarType, value: unknown, path: string): unknown {
  switch (type) {
    case ScalarType.STRING:
      if (typeof value !== "string") throw new FieldError(path, "must be a string");
      return value;
    case ScalarType.BOOL:
      if (typeof value !== "boolean") throw new FieldError(path, "must be a boolean");
      return value;
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      if (typeof value !== "number" || !Number.isFinite(value)) {
        throw new FieldError(path, "must be a number");
      }
      return value;
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return readInteger(value, path, int32Range);
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return readInteger(value, path, uint32Range);
    case ScalarType.BYTES:
      if (typeof value !== "string") throw new FieldError(path, "must be a base64 string");
      return Buffer.from(value, "base64");
    default: {
      // 64-bit integers: a JSON number or a decimal string.
      if (typeof value === "number" && Number.isSafeInteger(value)) return BigInt(value);
      if (typeof value === "string" && /^-?\d{1,20}$/.test(value)) return BigInt(value);
      throw new FieldError(path, "must be an integer");
    }
  }
}

function readInteger(value: unknown, path: string, range: { min: number; max: number }): number {
  if (typeof value !== "number" || !Number.isInteger(value)) {
    throw new FieldError(path, "must be an integer");
  }
  if (value < range.min || value > range.max) throw new FieldError(path, "is out of range");
  return value;
}

function readEnum(desc: DescEnum, value: unknown, path: string): number {
  const words = enumWords(desc);
  const number = typeof value === "string" ? words.byWord.get(value) : undefined;
  if (number === undefined) {
    throw new FieldError(path, `must be one of: ${words.words.join(", ")}`);
  }
  return number;
}

function readMessage(
  schema: DescMessage,
  value: unknown,
  path: string,
  options: ReadOptions,
): unknown {
  switch (schema.typeName) {
    case TimestampSchema.typeName:
      return readTimestamp(value, path);
    case StructSchema.typeName:
      if (!isPlainObject(value)) throw new FieldError(path, "must be an object");
      return value;
    default:
      return fromPlain(schema, value, { ...options, path });
  }
}

function readTimestamp(value: unknown, path: string): Timestamp {
  const date =
    value instanceof Date
      ? value
      : typeof value === "string" && /^\d{4}-\d{2}-\d{2}T/.test(value)
        ? new Date(value)
        : undefined;
  if (!date || Number.isNaN(date.getTime())) {
    throw new FieldError(path, "must be an ISO 8601 date-time string");
  }
  return timestampFromDate(date);
}
