import { type DescMessage, type Message, ScalarType } from "@bufbuild/protobuf";
import {
  FieldError,
  fieldByKey,
  fieldToPlain,
  fromPlain,
  type PlainObject,
  toPlain,
} from "../../contract/plain-codec.js";
import type { HttpRoute } from "./http-rules.js";

/** The raw parts of a REST request, as Fastify parsed them. */
export interface RestRequestParts {
  readonly params: Record<string, string>;
  readonly query: Record<string, string | string[] | undefined>;
  readonly body: unknown;
}

/**
 * The RPC request of a REST call: path variables, then the body (`*` or one
 * field), then query parameters for every field the body does not carry.
 * Every key must name a field; values are checked against the field's type.
 */
export function requestFromRest(
  schema: DescMessage,
  route: HttpRoute,
  parts: RestRequestParts,
): Message {
  const plain: PlainObject = {};
  const queryKeys = Object.keys(parts.query);
  if (route.body === "*") {
    if (queryKeys.length > 0) {
      throw new FieldError(queryKeys[0] as string, "is not a known query parameter");
    }
    if (parts.body !== undefined) {
      if (typeof parts.body !== "object" || parts.body === null || Array.isArray(parts.body)) {
        throw new FieldError("body", "must be a JSON object");
      }
      Object.assign(plain, parts.body);
    }
  } else {
    Object.assign(plain, queryValues(schema, route, parts.query));
    if (route.body) {
      const field = fieldByKey(schema, route.body);
      if (field && parts.body !== undefined) plain[field.jsonName] = parts.body;
    }
  }
  for (const field of route.pathFields) {
    for (const key of [field.name, field.jsonName]) delete plain[key];
    plain[field.jsonName] = parts.params[field.name];
  }
  return fromPlain(schema, plain) as Message;
}

/**
 * Query parameters as typed plain values: camelCase or snake_case names,
 * `true`/`false` for booleans, decimal integers, enum words. What does not
 * parse is left as a string so the codec names the field in its error.
 */
function queryValues(
  schema: DescMessage,
  route: HttpRoute,
  query: RestRequestParts["query"],
): PlainObject {
  const out: PlainObject = {};
  for (const [key, raw] of Object.entries(query)) {
    if (raw === undefined) continue;
    const field = fieldByKey(schema, key);
    const bodyField = route.body ? fieldByKey(schema, route.body) : undefined;
    if (
      !field ||
      field === bodyField ||
      route.pathFields.includes(field) ||
      field.fieldKind === "message" ||
      field.fieldKind === "map"
    ) {
      throw new FieldError(key, "is not a known query parameter");
    }
    const values = Array.isArray(raw) ? raw : [raw];
    if (field.fieldKind === "list") {
      out[field.jsonName] = values.map((value) =>
        typedQueryValue(
          field.listKind,
          value,
          field.listKind === "scalar" ? field.scalar : undefined,
        ),
      );
      continue;
    }
    if (values.length > 1) throw new FieldError(field.jsonName, "must be given once");
    out[field.jsonName] = typedQueryValue(field.fieldKind, values[0] as string, field.scalar);
  }
  return out;
}

function typedQueryValue(kind: string, value: string, scalar?: ScalarType): unknown {
  if (kind !== "scalar" || scalar === ScalarType.STRING || scalar === ScalarType.BYTES)
    return value;
  if (scalar === ScalarType.BOOL)
    return value === "true" ? true : value === "false" ? false : value;
  return /^-?\d+(\.\d+)?$/.test(value) ? Number(value) : value;
}

/** The REST body of a response: the whole message, or its `response_body` field. */
export function restFromResponse(
  schema: DescMessage,
  route: HttpRoute,
  response: Message,
): unknown {
  return route.responseBody
    ? fieldToPlain(schema, response, route.responseBody)
    : toPlain(schema, response);
}
