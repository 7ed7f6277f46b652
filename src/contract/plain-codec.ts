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
  timestampMs,
} from "@bufbuild/protobuf/wkt";
import { isoString } from "../domain/iso-time.js";
import { loneSurrogate } from "../domain/text.js";
import { unknownFieldDescription } from "./field-suggestion.js";
import { enumWords, omitWhenUnset } from "./options.js";
import { encodeOnce } from "./shared-messages.js";

/**
 * Converts messages to and from the plain objects of the REST API and of the
 * stored documents, driven by message reflection so no resource needs a
 * mapper of its own.
 *
 * The plain form is the specification's JSON: camelCase keys, every declared
 * field present, unset fields with explicit presence as `null`, enums as their
 * REST words, `google.protobuf.Struct` as a plain object. Timestamps are ISO
 * 8601 strings on the wire and `Date`s in documents.
 *
 * Reflection happens once per message type: the first conversion compiles a
 * plan (names, presence, options, enum words, and one writer and one reader
 * per field) that every later conversion only runs. Reading descriptor
 * options on every call was most of the REST path's time.
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

/** How {@link fromPlain} reads an object. */
export interface ReadOptions {
  /** Skip unknown keys (documents carry storage-only fields) instead of refusing them. */
  readonly ignoreUnknown?: boolean;
  /** The camelCase path of the object, for error messages. */
  readonly path?: string;
  /**
   * Values read in place of the object's own, as if reading
   * `{ ...plain, ...overrides }`, without copying the object.
   */
  readonly overrides?: PlainObject;
}

/** Writes one set value; `dates` asks for `Date` timestamps instead of ISO strings. */
type ValueWriter = (value: unknown, dates: boolean) => unknown;

/** Writes one set value as the JSON text `JSON.stringify` makes of its plain value. */
type JsonWriter = (value: unknown) => string | undefined;

/**
 * Reads one plain value. Its errors carry the path relative to the value
 * (`""`, `.name`, `[2]`), so no path is built unless something fails.
 */
type ValueReader = (value: unknown, ignoreUnknown: boolean) => unknown;

/** What the codec knows of one field. */
interface FieldPlan {
  readonly field: DescField;
  readonly localName: string;
  readonly jsonName: string;
  /** `"jsonName":`, ready to write. */
  readonly jsonKey: string;
  /** `undefined` in the message means unset: message fields and explicit presence. */
  readonly undefinedIsUnset: boolean;
  /** From `(referral.v1.rest_omit_when_unset)`. */
  readonly omitWhenUnset: boolean;
  /** A Struct is free-form data: an absent one reads as an empty object, not null. */
  readonly unsetIsEmptyObject: boolean;
  /** Undefined where the message value is already its plain value. */
  readonly write: ValueWriter | undefined;
  readonly writeJson: JsonWriter;
  readonly read: ValueReader;
}

/** A message type compiled for the codec. */
interface MessagePlan {
  readonly schema: DescMessage;
  /** In declaration order, which is the order of the plain form's keys. */
  readonly fields: readonly FieldPlan[];
  /** By camelCase JSON name and by proto (snake_case) name. */
  readonly byKey: ReadonlyMap<string, FieldPlan>;
}

const plans = new WeakMap<DescMessage, MessagePlan>();

function planOf(schema: DescMessage): MessagePlan {
  let plan = plans.get(schema);
  if (!plan) {
    plan = compilePlan(schema);
    plans.set(schema, plan);
  }
  return plan;
}

function compilePlan(schema: DescMessage): MessagePlan {
  const fields = schema.fields.map(compileField);
  const byKey = new Map<string, FieldPlan>();
  for (const plan of fields) {
    byKey.set(plan.jsonName, plan);
    byKey.set(plan.field.name, plan);
  }
  return { schema, fields, byKey };
}

function compileField(field: DescField): FieldPlan {
  const isMessage = field.fieldKind === "message";
  return {
    field,
    localName: field.localName,
    jsonName: field.jsonName,
    jsonKey: `${JSON.stringify(field.jsonName)}:`,
    undefinedIsUnset:
      isMessage ||
      ((field.fieldKind === "scalar" || field.fieldKind === "enum") &&
        field.presence !== FeatureSet_FieldPresence.IMPLICIT),
    omitWhenUnset: omitWhenUnset(field),
    unsetIsEmptyObject: isMessage && field.message.typeName === StructSchema.typeName,
    write: fieldWriter(field),
    writeJson: fieldJsonWriter(field),
    read: fieldReader(field),
  };
}

/** The plan of one field of a message type, checked to belong to it. */
function fieldPlanOf(schema: DescMessage, field: DescField): FieldPlan {
  const plan = planOf(schema).byKey.get(field.name);
  if (plan?.field !== field) throw new Error(`${field.name} is not a field of ${schema.typeName}`);
  return plan;
}

/** One compiler per kind of value, for fields that hold one value, a list, or a map. */
interface ValueCompilers<T> {
  scalar(type: ScalarType): T;
  enum(desc: DescEnum): T;
  message(desc: DescMessage): T;
}

/** The kind of one value of a field: the field's own, or its list items' or map values'. */
export function valueKindOf(field: DescField): "scalar" | "enum" | "message" {
  if (field.fieldKind === "list") return field.listKind;
  if (field.fieldKind === "map") return field.mapKind;
  return field.fieldKind;
}

function compileValue<T>(field: DescField, compilers: ValueCompilers<T>): T {
  const kind = valueKindOf(field);
  if (kind === "enum") return compilers.enum(field.enum as DescEnum);
  if (kind === "message") return compilers.message(field.message as DescMessage);
  return compilers.scalar(field.scalar as ScalarType);
}

/**
 * A per-type function resolved on first use: the type may be the very
 * message whose plan is being compiled.
 */
function lazyPlan<R>(
  schema: DescMessage,
  run: (plan: MessagePlan, value: unknown, flag: boolean) => R,
): (value: unknown, flag?: boolean) => R {
  let plan: MessagePlan | undefined;
  return (value, flag) => {
    plan ??= planOf(schema);
    return run(plan, value, flag === true);
  };
}

// Writing the plain form.

/** Writes a message in its plain form. */
export function toPlain(
  schema: DescMessage,
  message: Message,
  options?: PlainOptions,
): PlainObject {
  return writeMessage(planOf(schema), message, options?.timestamps === "date");
}

/**
 * The plain form of one field of a message, as {@link toPlain} writes it;
 * undefined when the field is left out. A REST response that is one field
 * (`response_body`) converts only that field.
 */
export function fieldToPlain(schema: DescMessage, message: Message, field: DescField): unknown {
  const plan = fieldPlanOf(schema, field);
  const value = (message as unknown as Record<string, unknown>)[plan.localName];
  if (plan.undefinedIsUnset && value === undefined) {
    return plan.omitWhenUnset ? undefined : unsetValue(plan);
  }
  return plan.write === undefined ? value : plan.write(value, false);
}

function writeMessage(plan: MessagePlan, message: Message, dates: boolean): PlainObject {
  const out: PlainObject = {};
  const record = message as unknown as Record<string, unknown>;
  const fields = plan.fields;
  for (let i = 0; i < fields.length; i++) {
    const field = fields[i] as FieldPlan;
    const value = record[field.localName];
    if (field.undefinedIsUnset && value === undefined) {
      if (!field.omitWhenUnset) out[field.jsonName] = unsetValue(field);
    } else {
      out[field.jsonName] = field.write === undefined ? value : field.write(value, dates);
    }
  }
  return out;
}

function unsetValue(field: FieldPlan): unknown {
  return field.unsetIsEmptyObject ? {} : null;
}

const valueWriters: ValueCompilers<ValueWriter | undefined> = {
  scalar(type) {
    if (type === ScalarType.BYTES) {
      return (value) => Buffer.from(value as Uint8Array).toString("base64");
    }
    // JSON has no 64-bit integers; bigints are written as numbers (strings pass).
    if (is64Bit(type)) return (value) => (typeof value === "bigint" ? Number(value) : value);
    return undefined;
  },
  enum(desc) {
    const byNumber = enumWords(desc).byNumber;
    // The zero value, and numbers the contract does not know, have no word.
    return (value) => byNumber.get(value as number) ?? null;
  },
  message(schema) {
    switch (schema.typeName) {
      case TimestampSchema.typeName:
        return (value, dates) =>
          dates ? timestampDate(value as Timestamp) : isoString(timestampMs(value as Timestamp));
      case StructSchema.typeName:
        // protobuf-es represents Struct fields as plain JSON objects already.
        return undefined;
      default:
        return lazyPlan(schema, (plan, value, dates) =>
          writeMessage(plan, value as Message, dates),
        );
    }
  },
};

function fieldWriter(field: DescField): ValueWriter | undefined {
  const item = compileValue(field, valueWriters);
  switch (field.fieldKind) {
    case "list":
      // Always a new array: documents must not share arrays with messages.
      if (item === undefined) return (value) => (value as unknown[]).slice();
      return (value, dates) => (value as unknown[]).map((entry) => item(entry, dates));
    case "map":
      return (value, dates) => {
        const out: PlainObject = {};
        for (const [key, entry] of Object.entries(value as PlainObject)) {
          out[key] = item === undefined ? entry : item(entry, dates);
        }
        return out;
      };
    default:
      return item;
  }
}

function is64Bit(type: ScalarType): boolean {
  return (
    type === ScalarType.INT64 ||
    type === ScalarType.UINT64 ||
    type === ScalarType.SINT64 ||
    type === ScalarType.FIXED64 ||
    type === ScalarType.SFIXED64
  );
}

// Writing JSON text directly: what `JSON.stringify` would make of the plain
// form, without building the plain form first.

/**
 * `JSON.stringify(toPlain(schema, message))`, in one pass. A shared message
 * (see `shared-messages.ts`) is written once, and so is each shared message
 * inside it: a list page of cached customers joins their texts.
 */
export function toJson(schema: DescMessage, message: Message): string {
  return encodeOnce(message, restJson, () => writeMessageJson(planOf(schema), message));
}

/** The REST JSON text, as a key of a shared message's encodings. */
const restJson = { format: "rest-json" };

/** `JSON.stringify(fieldToPlain(schema, message, field))`, in one pass. */
export function fieldToJson(
  schema: DescMessage,
  message: Message,
  field: DescField,
): string | undefined {
  const plan = fieldPlanOf(schema, field);
  const value = (message as unknown as Record<string, unknown>)[plan.localName];
  if (plan.undefinedIsUnset && value === undefined) {
    return plan.omitWhenUnset ? undefined : unsetJson(plan);
  }
  return plan.writeJson(value);
}

function writeMessageJson(plan: MessagePlan, message: Message): string {
  const record = message as unknown as Record<string, unknown>;
  const fields = plan.fields;
  let out = "";
  for (let i = 0; i < fields.length; i++) {
    const field = fields[i] as FieldPlan;
    const value = record[field.localName];
    let json: string | undefined;
    if (field.undefinedIsUnset && value === undefined) {
      if (field.omitWhenUnset) continue;
      json = unsetJson(field);
    } else {
      json = field.writeJson(value);
      // As JSON.stringify leaves out a key whose value has no JSON.
      if (json === undefined) continue;
    }
    out = out === "" ? `{${field.jsonKey}${json}` : `${out},${field.jsonKey}${json}`;
  }
  return out === "" ? "{}" : `${out}}`;
}

function unsetJson(field: FieldPlan): string {
  return field.unsetIsEmptyObject ? "{}" : "null";
}

const jsonWriters: ValueCompilers<JsonWriter> = {
  scalar(type) {
    const write = valueWriters.scalar(type);
    if (write === undefined) return (value) => JSON.stringify(value);
    return (value) => JSON.stringify(write(value, false));
  },
  enum(desc) {
    const byNumber = new Map<number, string>();
    for (const [number, word] of enumWords(desc).byNumber) {
      byNumber.set(number, JSON.stringify(word));
    }
    return (value) => byNumber.get(value as number) ?? "null";
  },
  message(schema) {
    switch (schema.typeName) {
      case TimestampSchema.typeName:
        // An ISO string has nothing JSON escapes.
        return (value) => `"${isoString(timestampMs(value as Timestamp))}"`;
      case StructSchema.typeName:
        return (value) => JSON.stringify(value);
      default:
        return lazyPlan(schema, (plan, value) =>
          encodeOnce(value as Message, restJson, () => writeMessageJson(plan, value as Message)),
        );
    }
  },
};

function fieldJsonWriter(field: DescField): JsonWriter {
  switch (field.fieldKind) {
    case "list": {
      const item = compileValue(field, jsonWriters);
      return (value) => {
        const list = value as unknown[];
        let out = "";
        for (let i = 0; i < list.length; i++) {
          // As JSON.stringify writes an array item that has no JSON.
          const json = item(list[i]) ?? "null";
          out = i === 0 ? json : `${out},${json}`;
        }
        return `[${out}]`;
      };
    }
    case "map": {
      // Going through the plain form's object keeps JSON.stringify's key
      // order (integer-like keys first).
      const write = fieldWriter(field) as ValueWriter;
      return (value) => JSON.stringify(write(value, false));
    }
    default:
      return compileValue(field, jsonWriters);
  }
}

// Reading the plain form.

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
  try {
    const plan = planOf(schema);
    const ignoreUnknown = options.ignoreUnknown === true;
    const message = options.overrides
      ? readMessage(plan, plain, ignoreUnknown, options.overrides)
      : readMessage(plan, plain, ignoreUnknown);
    return message as MessageShape<Desc>;
  } catch (error) {
    if (!(error instanceof FieldError)) throw error;
    // The object itself is fine, so the path starts with ".name".
    const field = path ? `${path}${error.field}` : error.field.slice(1);
    throw new FieldError(field, error.description);
  }
}

/** Finds a field by its camelCase JSON name or its proto (snake_case) name. */
export function fieldByKey(schema: DescMessage, key: string): DescField | undefined {
  return planOf(schema).byKey.get(key)?.field;
}

function readMessage(
  plan: MessagePlan,
  value: unknown,
  ignoreUnknown: boolean,
  overrides?: PlainObject,
): Message {
  if (!isPlainObject(value)) throw new FieldError("", "must be a JSON object");
  const init: PlainObject = {};
  const keys = Object.keys(value);
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i] as string;
    const entry = overrides && Object.hasOwn(overrides, key) ? overrides[key] : value[key];
    readEntry(plan, init, key, entry, ignoreUnknown);
  }
  if (overrides) {
    for (const key of Object.keys(overrides)) {
      if (!Object.hasOwn(value, key)) readEntry(plan, init, key, overrides[key], ignoreUnknown);
    }
  }
  return create(plan.schema, init as never);
}

function readEntry(
  plan: MessagePlan,
  init: PlainObject,
  key: string,
  entry: unknown,
  ignoreUnknown: boolean,
): void {
  const field = plan.byKey.get(key);
  if (field === undefined) {
    if (ignoreUnknown) return;
    const names = plan.fields.map((known) => known.jsonName);
    throw new FieldError(`.${key}`, unknownFieldDescription(key, names));
  }
  if (entry === null || entry === undefined) return;
  try {
    init[field.localName] = field.read(entry, ignoreUnknown);
  } catch (error) {
    throw nested(error, `.${field.jsonName}`);
  }
}

/** The error of a value inside another, with the step to it put in front of its path. */
function nested(error: unknown, step: string): unknown {
  return error instanceof FieldError
    ? new FieldError(step + error.field, error.description)
    : error;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return (
    typeof value === "object" && value !== null && !Array.isArray(value) && !(value instanceof Date)
  );
}

function fieldReader(field: DescField): ValueReader {
  const item = compileValue(field, valueReaders);
  switch (field.fieldKind) {
    case "list":
      return (value, ignoreUnknown) => {
        if (!Array.isArray(value)) throw new FieldError("", "must be an array");
        return value.map((entry, i) => {
          if (entry === null) throw new FieldError(`[${i}]`, "must not be null");
          try {
            return item(entry, ignoreUnknown);
          } catch (error) {
            throw nested(error, `[${i}]`);
          }
        });
      };
    case "map":
      return (value, ignoreUnknown) => {
        if (!isPlainObject(value)) throw new FieldError("", "must be an object");
        const out: PlainObject = {};
        for (const [key, entry] of Object.entries(value)) {
          try {
            out[key] = item(entry, ignoreUnknown);
          } catch (error) {
            throw nested(error, `.${key}`);
          }
        }
        return out;
      };
    default:
      return item;
  }
}

const int32Range = { min: -(2 ** 31), max: 2 ** 31 - 1 };
const uint32Range = { min: 0, max: 2 ** 32 - 1 };

const valueReaders: ValueCompilers<ValueReader> = {
  scalar(type) {
    switch (type) {
      case ScalarType.STRING:
        // A request's text must be well-formed; a stored document (read
        // leniently, as `ignoreUnknown` says) is read back as it was stored.
        return (value, lenient) => {
          if (typeof value !== "string") throw new FieldError("", "must be a string");
          if (!lenient && !value.isWellFormed()) throw new FieldError("", loneSurrogate);
          return value;
        };
      case ScalarType.BOOL:
        return (value) => {
          if (typeof value !== "boolean") throw new FieldError("", "must be a boolean");
          return value;
        };
      case ScalarType.DOUBLE:
      case ScalarType.FLOAT:
        return (value) => {
          if (typeof value !== "number" || !Number.isFinite(value)) {
            throw new FieldError("", "must be a number");
          }
          return value;
        };
      case ScalarType.INT32:
      case ScalarType.SINT32:
      case ScalarType.SFIXED32:
        return (value) => readInteger(value, int32Range);
      case ScalarType.UINT32:
      case ScalarType.FIXED32:
        return (value) => readInteger(value, uint32Range);
      case ScalarType.BYTES:
        return (value) => {
          if (typeof value !== "string") throw new FieldError("", "must be a base64 string");
          return Buffer.from(value, "base64");
        };
      default:
        // 64-bit integers: a JSON number or a decimal string.
        return (value) => {
          if (typeof value === "number" && Number.isSafeInteger(value)) return BigInt(value);
          if (typeof value === "string" && /^-?\d{1,20}$/.test(value)) return BigInt(value);
          throw new FieldError("", "must be an integer");
        };
    }
  },
  enum(desc) {
    const { byWord, words } = enumWords(desc);
    return (value) => {
      const number = typeof value === "string" ? byWord.get(value) : undefined;
      if (number === undefined) throw new FieldError("", `must be one of: ${words.join(", ")}`);
      return number;
    };
  },
  message(schema) {
    switch (schema.typeName) {
      case TimestampSchema.typeName:
        return readTimestamp;
      case StructSchema.typeName:
        return (value) => {
          if (!isPlainObject(value)) throw new FieldError("", "must be an object");
          return value;
        };
      default:
        return lazyPlan(schema, (plan, value, ignoreUnknown) =>
          readMessage(plan, value, ignoreUnknown),
        );
    }
  },
};

function readInteger(value: unknown, range: { min: number; max: number }): number {
  if (typeof value !== "number" || !Number.isInteger(value)) {
    throw new FieldError("", "must be an integer");
  }
  if (value < range.min || value > range.max) throw new FieldError("", "is out of range");
  return value;
}

function readTimestamp(value: unknown): Timestamp {
  const date =
    value instanceof Date
      ? value
      : typeof value === "string" && /^\d{4}-\d{2}-\d{2}T/.test(value)
        ? new Date(value)
        : undefined;
  if (!date || Number.isNaN(date.getTime())) {
    throw new FieldError("", "must be an ISO 8601 date-time string");
  }
  return timestampFromDate(date);
}
