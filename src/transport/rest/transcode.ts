import { type DescField, type DescMessage, type Message, ScalarType } from "@bufbuild/protobuf";
import { unknownFieldDescription } from "../../contract/field-suggestion.js";
import {
  FieldError,
  fieldByKey,
  fieldToJson,
  fieldToPlain,
  fromPlain,
  type PlainObject,
  toJson,
  toPlain,
} from "../../contract/plain-codec.js";
import { encodeOnce, isShared } from "../../contract/shared-messages.js";
import type { HttpRoute } from "./http-rules.js";

/** The raw parts of a REST request, as Fastify parsed them. */
export interface RestRequestParts {
  readonly params: Record<string, string>;
  readonly query: Record<string, string | string[] | undefined>;
  readonly body: unknown;
}

/** Reads the RPC request of one route's calls; see {@link requestReader}. */
export type RestRequestReader = (parts: RestRequestParts) => Message;

/** How one query parameter becomes a plain value. */
interface QueryParameter {
  readonly jsonName: string;
  readonly repeated: boolean;
  readonly parse: (value: string) => unknown;
}

/**
 * The RPC request of a REST call: path variables, then the body (`*` or one
 * field), then query parameters for every field the body does not carry.
 * Every key must name a field; values are checked against the field's type.
 * What the route allows is worked out here, once, not on every call.
 */
export function requestReader(schema: DescMessage, route: HttpRoute): RestRequestReader {
  const bodyField = route.body && route.body !== "*" ? fieldByKey(schema, route.body) : undefined;
  const parameters = queryParameters(schema, route, bodyField);
  return (parts) => {
    const plain: PlainObject = {};
    if (route.body === "*") {
      const queryKeys = Object.keys(parts.query);
      if (queryKeys.length > 0) {
        throw new FieldError(queryKeys[0] as string, "is not a known query parameter");
      }
      if (parts.body !== undefined) {
        if (typeof parts.body !== "object" || parts.body === null || Array.isArray(parts.body)) {
          throw new FieldError("body", "must be a JSON object");
        }
        // Object.assign would make a "__proto__" key the prototype, dropping
        // it; like any key that names no field, it is refused.
        if (Object.hasOwn(parts.body, "__proto__")) {
          throw new FieldError("__proto__", "is not a known field");
        }
        Object.assign(plain, parts.body);
      }
    } else {
      readQuery(parameters, parts.query, plain);
      if (bodyField && parts.body !== undefined) plain[bodyField.jsonName] = parts.body;
    }
    for (const field of route.pathFields) {
      // Path variables win over the body, and come last like the template.
      if (field.name in plain) delete plain[field.name];
      if (field.jsonName in plain) delete plain[field.jsonName];
      plain[field.jsonName] = parts.params[field.name];
    }
    return fromPlain(schema, plain) as Message;
  };
}

/**
 * The query parameters a route takes, by camelCase and snake_case name:
 * scalar and enum fields (repeated ones too) that are neither the body nor
 * in the path.
 */
function queryParameters(
  schema: DescMessage,
  route: HttpRoute,
  bodyField: DescField | undefined,
): ReadonlyMap<string, QueryParameter> {
  const parameters = new Map<string, QueryParameter>();
  if (route.body === "*") return parameters;
  for (const field of schema.fields) {
    if (field === bodyField || route.pathFields.includes(field)) continue;
    if (field.fieldKind === "message" || field.fieldKind === "map") continue;
    const kind = field.fieldKind === "list" ? field.listKind : field.fieldKind;
    const parameter = {
      jsonName: field.jsonName,
      repeated: field.fieldKind === "list",
      parse: queryValueParser(kind === "scalar" ? field.scalar : undefined),
    };
    parameters.set(field.jsonName, parameter);
    parameters.set(field.name, parameter);
  }
  return parameters;
}

/**
 * Query parameters as typed plain values: `true`/`false` for booleans,
 * decimal integers, enum words. What does not parse is left as a string so
 * the codec names the field in its error.
 */
function readQuery(
  parameters: ReadonlyMap<string, QueryParameter>,
  query: RestRequestParts["query"],
  out: PlainObject,
): void {
  for (const [key, raw] of Object.entries(query)) {
    if (raw === undefined) continue;
    const parameter = parameters.get(key);
    if (!parameter) {
      const names = [...new Set([...parameters.values()].map(({ jsonName }) => jsonName))];
      throw new FieldError(key, unknownFieldDescription(key, names, "query parameter"));
    }
    if (parameter.repeated) {
      out[parameter.jsonName] = (Array.isArray(raw) ? raw : [raw]).map(parameter.parse);
      continue;
    }
    if (Array.isArray(raw) && raw.length > 1) {
      throw new FieldError(parameter.jsonName, "must be given once");
    }
    out[parameter.jsonName] = parameter.parse((Array.isArray(raw) ? raw[0] : raw) as string);
  }
}

/** Strings, bytes and enum words stay strings; booleans and numbers are parsed. */
function queryValueParser(scalar: ScalarType | undefined): (value: string) => unknown {
  if (scalar === undefined || scalar === ScalarType.STRING || scalar === ScalarType.BYTES) {
    return (value) => value;
  }
  if (scalar === ScalarType.BOOL) {
    return (value) => (value === "true" ? true : value === "false" ? false : value);
  }
  return (value) => (/^-?\d+(\.\d+)?$/.test(value) ? Number(value) : value);
}

/** {@link restFromResponse} as JSON text; undefined when there is no body. */
export function restJsonFromResponse(
  schema: DescMessage,
  route: HttpRoute,
  response: Message,
): string | undefined {
  return route.responseBody
    ? fieldToJson(schema, response, route.responseBody)
    : toJson(schema, response);
}

/**
 * The REST body of a response as sent: its JSON text, or for a shared
 * response (a cached view) its UTF-8 bytes, written once per route. Bytes,
 * because a string is measured and converted to UTF-8 on every send (a
 * 7 KB campaign list spent more in that than in the rest of its route).
 */
export function restBodyFromResponse(
  schema: DescMessage,
  route: HttpRoute,
  response: Message,
): string | Buffer | undefined {
  if (!isShared(response)) return restJsonFromResponse(schema, route, response);
  return encodeOnce(response, route, () => {
    const json = restJsonFromResponse(schema, route, response);
    return json === undefined ? undefined : Buffer.from(json);
  });
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
