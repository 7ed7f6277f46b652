import {
  create,
  type DescField,
  type DescMessage,
  equals,
  getOption,
  type Message,
  ScalarType,
} from "@bufbuild/protobuf";
import {
  FeatureSet_FieldPresence,
  file_google_protobuf_any,
  file_google_protobuf_api,
  file_google_protobuf_duration,
  file_google_protobuf_struct,
  file_google_protobuf_type,
  file_google_protobuf_wrappers,
  StructSchema,
  type Timestamp,
  TimestampSchema,
  timestampDate,
} from "@bufbuild/protobuf/wkt";
import test from "ava";
import fc from "fast-check";
import { file_referral_v1_admin } from "../../gen/referral/v1/admin_pb.js";
import { file_referral_v1_campaigns } from "../../gen/referral/v1/campaigns_pb.js";
import { file_referral_v1_checkpoints } from "../../gen/referral/v1/checkpoints_pb.js";
import { file_referral_v1_customers } from "../../gen/referral/v1/customers_pb.js";
import { rest_name, rest_omit_when_unset } from "../../gen/referral/v1/options_pb.js";
import { file_referral_v1_referrals } from "../../gen/referral/v1/referrals_pb.js";
import {
  CampaignSchema,
  CustomerSchema,
  file_referral_v1_resources,
} from "../../gen/referral/v1/resources_pb.js";
import { file_referral_v1_rewards } from "../../gen/referral/v1/rewards_pb.js";
import { file_referral_v1_webhooks } from "../../gen/referral/v1/webhooks_pb.js";
import {
  FieldError,
  fieldByKey,
  fieldToJson,
  fieldToPlain,
  fromPlain,
  type PlainObject,
  toJson,
  toPlain,
} from "../../src/contract/plain-codec.js";
import { arbitraryMessage, messageTypesOf } from "../helpers/arbitrary-messages.js";

/**
 * The codec compiles a plan per message type; these properties hold it to
 * the plain form's rules as stated on the descriptors, read afresh on every
 * call by a deliberately naive reference below, for random messages of
 * every type of the contract and a few well-known ones.
 */

const contractTypes = messageTypesOf([
  file_referral_v1_admin,
  file_referral_v1_campaigns,
  file_referral_v1_checkpoints,
  file_referral_v1_customers,
  file_referral_v1_referrals,
  file_referral_v1_resources,
  file_referral_v1_rewards,
  file_referral_v1_webhooks,
]);
// Proto3 well-known types bring 64-bit integers and bytes, which the contract
// does not use yet.
const types = [
  ...contractTypes,
  ...messageTypesOf([
    file_google_protobuf_any,
    file_google_protobuf_api,
    file_google_protobuf_duration,
    file_google_protobuf_type,
    file_google_protobuf_wrappers,
  ]),
];
// Struct and Value as messages bring map fields and oneofs, which the writer
// handles but which do not read back (a oneof is not read).
const writerTypes = [...types, ...messageTypesOf([file_google_protobuf_struct])];
const runs = { numRuns: 40 };

/** The plain form by the specification's rules, reflecting on every call. */
function expectedPlain(schema: DescMessage, message: Message, dates: boolean): PlainObject {
  const out: PlainObject = {};
  for (const field of schema.fields) {
    const value = (message as unknown as PlainObject)[field.localName];
    const tracksPresence =
      field.fieldKind === "message" ||
      ((field.fieldKind === "scalar" || field.fieldKind === "enum") &&
        field.presence !== FeatureSet_FieldPresence.IMPLICIT);
    if (tracksPresence && value === undefined) {
      if (getOption(field, rest_omit_when_unset)) continue;
      out[field.jsonName] = field.message?.typeName === StructSchema.typeName ? {} : null;
    } else if (field.fieldKind === "list") {
      out[field.jsonName] = (value as unknown[]).map((item) => expectedValue(field, item, dates));
    } else if (field.fieldKind === "map") {
      out[field.jsonName] = Object.fromEntries(
        Object.entries(value as PlainObject).map(([k, v]) => [k, expectedValue(field, v, dates)]),
      );
    } else {
      out[field.jsonName] = expectedValue(field, value, dates);
    }
  }
  return out;
}

function expectedValue(field: DescField, value: unknown, dates: boolean): unknown {
  if (field.enum) {
    const named = field.enum.values.find((v) => v.number === value);
    if (!named || named.number === 0) return null;
    return getOption(named, rest_name) || named.localName.toLowerCase();
  }
  if (field.message?.typeName === TimestampSchema.typeName) {
    const date = timestampDate(value as Timestamp);
    return dates ? date : date.toISOString();
  }
  if (field.message?.typeName === StructSchema.typeName) return value;
  if (field.message) return expectedPlain(field.message, value as Message, dates);
  if (typeof value === "bigint") return Number(value);
  if (field.scalar === ScalarType.BYTES) return Buffer.from(value as Uint8Array).toString("base64");
  return value;
}

test("toPlain writes what the descriptors say, for every type", (t) => {
  for (const schema of writerTypes) {
    fc.assert(
      fc.property(arbitraryMessage(schema, { lossy: true }), (message) => {
        t.deepEqual(toPlain(schema, message), expectedPlain(schema, message, false));
        t.deepEqual(
          toPlain(schema, message, { timestamps: "date" }),
          expectedPlain(schema, message, true),
        );
      }),
      runs,
    );
  }
});

test("toJson and fieldToJson are JSON.stringify of toPlain and fieldToPlain, byte for byte", (t) => {
  for (const schema of writerTypes) {
    fc.assert(
      fc.property(arbitraryMessage(schema, { lossy: true }), (message) => {
        const plain = toPlain(schema, message);
        t.is(toJson(schema, message), JSON.stringify(plain));
        for (const field of schema.fields) {
          t.deepEqual(fieldToPlain(schema, message, field), plain[field.jsonName]);
          t.is(fieldToJson(schema, message, field), JSON.stringify(plain[field.jsonName]));
        }
      }),
      runs,
    );
  }
});

test("toJson leaves out what JSON.stringify leaves out, even in malformed messages", (t) => {
  // create() never leaves a value undefined; a message built by hand can.
  const message = { ...create(CampaignSchema), name: undefined, platforms: [undefined, 1] };
  const malformed = message as unknown as Message;
  t.is(toJson(CampaignSchema, malformed), JSON.stringify(toPlain(CampaignSchema, malformed)));
  t.false(toJson(CampaignSchema, malformed).includes('"name"'));
});

test("fromPlain reads back what toPlain wrote, from JSON and from documents", (t) => {
  for (const schema of types) {
    fc.assert(
      fc.property(arbitraryMessage(schema), (message) => {
        const fromDocument = fromPlain(schema, toPlain(schema, message, { timestamps: "date" }));
        t.true(equals(schema, fromDocument, message), schema.typeName);
        const json = JSON.parse(JSON.stringify(toPlain(schema, message)));
        t.deepEqual(toPlain(schema, fromPlain(schema, json)), json);
      }),
      runs,
    );
  }
});

test("fromPlain takes snake_case keys and skips nulls", (t) => {
  const customer = fromPlain(CustomerSchema, {
    external_user_id: "u1",
    referredBy: null,
    visited_referrals_count: 3,
  });
  t.is(customer.externalUserId, "u1");
  t.is(customer.referredBy, undefined);
  t.is(customer.visitedReferralsCount, 3);
  t.is(
    fieldByKey(CustomerSchema, "external_user_id"),
    fieldByKey(CustomerSchema, "externalUserId"),
  );
  t.is(fieldByKey(CustomerSchema, "nickname"), undefined);
});

/** A place in a plain object: the path the error names, and the field whose value is there. */
interface Place {
  readonly steps: readonly (string | number)[];
  readonly path: string;
  readonly field: DescField;
  /** A list item rather than the field's whole value. */
  readonly item: boolean;
}

/** Every place in a plain form that holds a field's value or a list item. */
function placesOf(schema: DescMessage, plain: PlainObject, prefix: Place["steps"] = []): Place[] {
  const places: Place[] = [];
  for (const field of schema.fields) {
    if (!(field.jsonName in plain)) continue;
    const steps = [...prefix, field.jsonName];
    places.push({ steps, path: pathOf(steps), field, item: false });
    const value = plain[field.jsonName];
    const nested = field.message && !wellKnown(field.message) ? field.message : undefined;
    if (field.fieldKind === "list") {
      (value as unknown[]).forEach((entry, i) => {
        const itemSteps = [...steps, i];
        places.push({ steps: itemSteps, path: pathOf(itemSteps), field, item: true });
        if (nested) places.push(...placesOf(nested, entry as PlainObject, itemSteps));
      });
    } else if (nested && field.fieldKind === "message" && value !== null) {
      places.push(...placesOf(nested, value as PlainObject, steps));
    }
  }
  return places;
}

function wellKnown(schema: DescMessage): boolean {
  return schema.typeName === TimestampSchema.typeName || schema.typeName === StructSchema.typeName;
}

function pathOf(steps: Place["steps"]): string {
  return steps.reduce<string>(
    (path, step) =>
      typeof step === "number" ? `${path}[${step}]` : path ? `${path}.${step}` : step,
    "",
  );
}

/** A value the place cannot hold, and what the error says about it. */
function wrongValueFor(place: Place): { value: unknown; description: string } {
  const { field } = place;
  if (field.fieldKind === "list" && !place.item) {
    return { value: {}, description: "must be an array" };
  }
  if (place.item) return { value: null, description: "must not be null" };
  if (field.fieldKind === "map") return { value: "1", description: "must be an object" };
  if (field.enum) {
    const words = field.enum.values
      .filter((v) => v.number !== 0)
      .map((v) => getOption(v, rest_name) || v.localName.toLowerCase());
    return { value: "no-such-word", description: `must be one of: ${words.join(", ")}` };
  }
  if (field.message?.typeName === TimestampSchema.typeName) {
    return { value: "yesterday", description: "must be an ISO 8601 date-time string" };
  }
  if (field.message?.typeName === StructSchema.typeName) {
    return { value: [], description: "must be an object" };
  }
  if (field.message) return { value: 7, description: "must be a JSON object" };
  switch (field.scalar) {
    case ScalarType.STRING:
      return { value: 5, description: "must be a string" };
    case ScalarType.BOOL:
      return { value: "yes", description: "must be a boolean" };
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return { value: "1", description: "must be a number" };
    case ScalarType.BYTES:
      return { value: 1, description: "must be a base64 string" };
    default:
      return { value: 1.5, description: "must be an integer" };
  }
}

function replaced(plain: PlainObject, steps: Place["steps"], value: unknown): PlainObject {
  const copy = structuredClone(plain);
  let node = copy as Record<string | number, unknown>;
  for (const step of steps.slice(0, -1)) node = node[step] as Record<string | number, unknown>;
  node[steps.at(-1) as string | number] = value;
  return copy;
}

function fieldErrorOf(run: () => unknown): { field: string; description: string } | undefined {
  try {
    run();
    return undefined;
  } catch (error) {
    if (!(error instanceof FieldError)) throw error;
    return { field: error.field, description: error.description };
  }
}

test("fromPlain names the field of a wrong value at any depth, under any path", (t) => {
  for (const schema of contractTypes) {
    fc.assert(
      fc.property(
        arbitraryMessage(schema, { depth: 3 }),
        fc.nat(),
        fc.constantFrom("", "request"),
        (message, pick, path) => {
          const plain = JSON.parse(JSON.stringify(toPlain(schema, message)));
          const places = placesOf(schema, plain);
          if (places.length === 0) return;
          const place = places[pick % places.length] as Place;
          const wrong = wrongValueFor(place);
          const error = fieldErrorOf(() =>
            fromPlain(schema, replaced(plain, place.steps, wrong.value), { path }),
          );
          t.deepEqual(error, {
            field: path ? `${path}.${place.path}` : place.path,
            description: wrong.description,
          });
        },
      ),
      runs,
    );
  }
});

test("fromPlain refuses unknown keys at any depth unless told to skip them", (t) => {
  for (const schema of contractTypes) {
    fc.assert(
      fc.property(arbitraryMessage(schema, { depth: 3 }), fc.nat(), (message, pick) => {
        const plain = JSON.parse(JSON.stringify(toPlain(schema, message)));
        // The objects in the plain form: the root and every nested message.
        const objects = [
          { steps: [] as Place["steps"], path: "" },
          ...placesOf(schema, plain).filter((place) => {
            const value = place.steps.reduce<unknown>(
              (node, step) => (node as Record<string | number, unknown>)[step],
              plain,
            );
            const isMessage = place.field.message && !wellKnown(place.field.message);
            return isMessage && value !== null && (place.item || place.field.fieldKind !== "list");
          }),
        ];
        const target = objects[pick % objects.length] as (typeof objects)[number];
        const withUnknown = replaced(plain, [...target.steps, "zz_unknown"], 1);
        t.deepEqual(
          fieldErrorOf(() => fromPlain(schema, withUnknown)),
          {
            field: target.path ? `${target.path}.zz_unknown` : "zz_unknown",
            description: "is not a known field",
          },
        );
        const skipped = fromPlain(schema, withUnknown, { ignoreUnknown: true });
        t.deepEqual(toPlain(schema, skipped), plain);
      }),
      runs,
    );
  }
});

test("fromPlain refuses a body that is not an object, naming the body or the path", (t) => {
  for (const body of [null, [], "x", 3, new Date()]) {
    t.deepEqual(
      fieldErrorOf(() => fromPlain(CustomerSchema, body)),
      {
        field: "body",
        description: "must be a JSON object",
      },
    );
  }
  t.deepEqual(
    fieldErrorOf(() => fromPlain(CustomerSchema, [], { path: "customer" })),
    {
      field: "customer",
      description: "must be a JSON object",
    },
  );
});

test("fromPlain with overrides reads as if the object were spread with them", (t) => {
  const keys = [...CustomerSchema.fields.map((f) => f.jsonName), "external_user_id", "_id", "zz"];
  const values = fc.oneof(fc.string(), fc.integer(), fc.constant(null), fc.constant(undefined));
  const objects = fc.dictionary(fc.constantFrom(...keys), values, { maxKeys: 6 });
  fc.assert(
    fc.property(objects, objects, fc.boolean(), (plain, overrides, ignoreUnknown) => {
      const outcome = (run: () => Message) => {
        const error = fieldErrorOf(run);
        return error ?? toPlain(CustomerSchema, run());
      };
      t.deepEqual(
        outcome(() => fromPlain(CustomerSchema, plain, { ignoreUnknown, overrides })),
        outcome(() => fromPlain(CustomerSchema, { ...plain, ...overrides }, { ignoreUnknown })),
      );
    }),
    { numRuns: 300 },
  );
});
