import {
  create,
  type DescField,
  type DescFile,
  type DescMessage,
  type Message,
  ScalarType,
} from "@bufbuild/protobuf";
import {
  FeatureSet_FieldPresence,
  StructSchema,
  TimestampSchema,
  timestampFromDate,
} from "@bufbuild/protobuf/wkt";
import fc from "fast-check";

/**
 * fast-check arbitraries for any message type, read from its descriptor, so
 * codec properties cover every type of the contract without a generator per
 * resource.
 */

/** Every message type declared in the files, nested ones included. */
export function messageTypesOf(files: readonly DescFile[]): DescMessage[] {
  const out: DescMessage[] = [];
  const walk = (messages: readonly DescMessage[]) => {
    for (const message of messages) {
      out.push(message);
      walk(message.nestedMessages);
    }
  };
  for (const file of files) walk(file.messages);
  return out;
}

/** How values are drawn. */
export interface ArbitraryOptions {
  /** Nesting depth below which message fields stay unset and lists empty. */
  readonly depth?: number;
  /**
   * Allow values that do not survive a trip through the plain form: NaN and
   * infinities, enum numbers without a name, dates of any year.
   */
  readonly lossy?: boolean;
}

/** Random messages of a type: every field set or unset at random, nested to a bounded depth. */
export function arbitraryMessage(
  schema: DescMessage,
  options: ArbitraryOptions = {},
): fc.Arbitrary<Message> {
  const depth = options.depth ?? 2;
  const members: Record<string, fc.Arbitrary<unknown>> = {};
  const requiredKeys: string[] = [];
  for (const field of schema.fields) {
    if (field.oneof) continue;
    const value = fieldArbitrary(field, { ...options, depth });
    if (value) members[field.localName] = value;
    // An unset Struct is written as {} and so reads back set.
    if (value && !options.lossy && field.message?.typeName === StructSchema.typeName) {
      requiredKeys.push(field.localName);
    }
  }
  for (const oneof of schema.oneofs) {
    const cases = oneof.fields.flatMap((field) => {
      const value = valueArbitrary(field, { ...options, depth });
      return value ? [value.map((v) => ({ case: field.localName, value: v }))] : [];
    });
    members[oneof.localName] = fc.oneof(fc.constant({ case: undefined }), ...cases);
  }
  return fc.record(members, { requiredKeys }).map((init) => create(schema, init as never));
}

function fieldArbitrary(
  field: DescField,
  options: ArbitraryOptions & { depth: number },
): fc.Arbitrary<unknown> | undefined {
  switch (field.fieldKind) {
    case "list": {
      const item = itemArbitrary(field, options);
      return item ? fc.array(item, { maxLength: 3 }) : undefined;
    }
    case "map": {
      const item = itemArbitrary(field, options);
      return item ? fc.dictionary(fc.string({ maxLength: 4 }), item, { maxKeys: 3 }) : undefined;
    }
    default: {
      const value = valueArbitrary(field, options);
      if (!value) return undefined;
      const tracksPresence =
        field.fieldKind === "message" || field.presence !== FeatureSet_FieldPresence.IMPLICIT;
      const unsetReadsBack = field.message?.typeName !== StructSchema.typeName;
      return tracksPresence && (unsetReadsBack || options.lossy)
        ? fc.option(value, { nil: undefined })
        : value;
    }
  }
}

function itemArbitrary(
  field: DescField & { fieldKind: "list" | "map" },
  options: ArbitraryOptions & { depth: number },
): fc.Arbitrary<unknown> | undefined {
  const kind = field.fieldKind === "list" ? field.listKind : field.mapKind;
  if (kind === "scalar") return scalarArbitrary(field.scalar as ScalarType, options);
  if (kind === "enum") return enumArbitrary(field, options);
  return messageValueArbitrary(field.message as DescMessage, options);
}

function valueArbitrary(
  field: DescField,
  options: ArbitraryOptions & { depth: number },
): fc.Arbitrary<unknown> | undefined {
  switch (field.fieldKind) {
    case "scalar":
      return scalarArbitrary(field.scalar, options);
    case "enum":
      return enumArbitrary(field, options);
    case "message":
      return messageValueArbitrary(field.message, options);
    default:
      return undefined;
  }
}

function enumArbitrary(
  field: DescField,
  options: ArbitraryOptions,
): fc.Arbitrary<number> | undefined {
  const values = field.enum?.values ?? [];
  if (options.lossy) {
    return fc.oneof(
      fc.constantFrom(...values.map((v) => v.number)),
      fc.integer({ min: 0, max: 1000 }),
    );
  }
  // The zero value has no word and is written null, which reads back as unset:
  // the same message only where unset is zero (a singular field without presence).
  const zeroReadsBack =
    field.fieldKind === "enum" && field.presence === FeatureSet_FieldPresence.IMPLICIT;
  const numbers = values.map((v) => v.number).filter((n) => n !== 0 || zeroReadsBack);
  return numbers.length > 0 ? fc.constantFrom(...numbers) : undefined;
}

function messageValueArbitrary(
  schema: DescMessage,
  options: ArbitraryOptions & { depth: number },
): fc.Arbitrary<unknown> | undefined {
  if (schema.typeName === TimestampSchema.typeName) {
    // Whole milliseconds: the plain form is an ISO string, which has no more.
    // Lossy dates span every year a Date has, whose ISO strings do not read back.
    const range = options.lossy ? {} : { min: new Date("1970-01-01"), max: new Date("2100-01-01") };
    return fc.date({ ...range, noInvalidDate: true }).map(timestampFromDate);
  }
  if (schema.typeName === StructSchema.typeName) {
    return fc.dictionary(fc.string({ maxLength: 6 }), fc.jsonValue({ maxDepth: 2 }), {
      maxKeys: 4,
    });
  }
  if (options.depth <= 0) return undefined;
  return arbitraryMessage(schema, { ...options, depth: options.depth - 1 });
}

const int32 = { min: -(2 ** 31), max: 2 ** 31 - 1 };

function scalarArbitrary(type: ScalarType, options: ArbitraryOptions): fc.Arbitrary<unknown> {
  switch (type) {
    case ScalarType.STRING:
      return fc.string({ maxLength: 12, unit: "binary" });
    case ScalarType.BOOL:
      return fc.boolean();
    case ScalarType.DOUBLE:
      return fc.double({ noNaN: !options.lossy, noDefaultInfinity: !options.lossy });
    case ScalarType.FLOAT:
      return fc.float({ noNaN: !options.lossy, noDefaultInfinity: !options.lossy });
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return fc.integer(int32);
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return fc.integer({ min: 0, max: 2 ** 32 - 1 });
    case ScalarType.BYTES:
      return fc.uint8Array({ maxLength: 8 });
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      // Within the safe range: the plain form writes 64-bit integers as numbers.
      return fc.bigInt({ min: 0n, max: BigInt(Number.MAX_SAFE_INTEGER) });
    default:
      return fc.bigInt({
        min: -BigInt(Number.MAX_SAFE_INTEGER),
        max: BigInt(Number.MAX_SAFE_INTEGER),
      });
  }
}
