import { type DescField, type DescMethod, getOption, hasOption } from "@bufbuild/protobuf";
import { http } from "../../../gen/google/api/annotations_pb.js";
import { fieldByKey } from "../../contract/plain-codec.js";

/** One REST route, read from an RPC's `google.api.http` annotation. */
export interface HttpRoute {
  /** GET, POST, PATCH, PUT or DELETE. */
  readonly verb: string;
  /** The annotation's path template, for example `/customers/{id}`. */
  readonly template: string;
  /** The same path in Fastify's syntax: `/customers/:id`. */
  readonly fastifyPath: string;
  /** The request fields bound to path segments. */
  readonly pathFields: readonly DescField[];
  /** `*` (the whole request), a field name, or empty (no body). */
  readonly body: string;
  /** The response field REST returns instead of the whole response, if any. */
  readonly responseBody: DescField | undefined;
  /** Matches a concrete path against the template (for 405 answers). */
  readonly pattern: RegExp;
}

/** The REST route of a method, or undefined when it has no annotation. */
export function httpRouteOf(method: DescMethod): HttpRoute | undefined {
  if (!hasOption(method, http)) return undefined;
  const rule = getOption(method, http);
  const { case: verb, value } = rule.pattern;
  if (verb === undefined) return undefined;
  const template = verb === "custom" ? value.path : value;
  const pathFields: DescField[] = [];
  const fastifyPath = template.replace(/\{([^}=]+)(=[^}]*)?\}/g, (_match, name: string) => {
    const field = fieldByKey(method.input, name);
    if (!field) throw new Error(`${method.name}: path variable ${name} names no request field`);
    pathFields.push(field);
    return `:${field.name}`;
  });
  const responseBody = rule.responseBody ? fieldByKey(method.output, rule.responseBody) : undefined;
  if (rule.responseBody && !responseBody) {
    throw new Error(`${method.name}: response_body ${rule.responseBody} names no response field`);
  }
  return {
    verb: verb === "custom" ? value.kind.toUpperCase() : verb.toUpperCase(),
    template,
    fastifyPath,
    pathFields,
    body: rule.body,
    responseBody,
    pattern: new RegExp(`^${fastifyPath.replace(/:[a-z_]+/g, "[^/]+")}$`),
  };
}
