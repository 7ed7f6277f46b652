/**
 * Writes the OpenAPI 3.1 document of the REST API (`openapi/openapi.json`)
 * from the contract: the generated descriptors in gen/, read through the
 * same functions the REST transport uses (the `google.api.http` rules, the
 * `(referral.v1.*)` options, the codec's enum words and unset values), and
 * the proto comments, which only `buf build` keeps (protoc-gen-es embeds
 * descriptors without source info).
 *
 *   node --import tsx scripts/generate-openapi.ts [output path]
 *
 * `npm run generate` runs it after `buf generate`; a test regenerates it and
 * fails when the committed document is stale.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import {
  create,
  createFileRegistry,
  type DescEnum,
  type DescField,
  type DescFile,
  type DescMessage,
  type DescMethod,
  type DescService,
  type FileRegistry,
  fromBinary,
  ScalarType,
} from "@bufbuild/protobuf";
import { FileDescriptorSetSchema, StructSchema, TimestampSchema } from "@bufbuild/protobuf/wkt";
import { getComments } from "@bufbuild/protoplugin";
import { Code } from "@connectrpc/connect";
import { codeToHttpStatus, codeToString } from "@connectrpc/connect/protocol-connect";
import { Access } from "../gen/referral/v1/options_pb.js";
import {
  enumWords,
  methodAccess,
  restContentType,
  restSuccessStatus,
} from "../src/contract/options.js";
import { toPlain, valueKindOf } from "../src/contract/plain-codec.js";
import {
  idempotencyKeyHeader,
  idempotentReplayedHeader,
  isWriteRpc,
} from "../src/transport/idempotency.js";
import { type HttpRoute, httpRouteOf } from "../src/transport/rest/http-rules.js";

/** A JSON Schema (2020-12, as OpenAPI 3.1 uses it) or any other part of the document. */
type Json = Record<string, unknown>;

const root = fileURLToPath(new URL("..", import.meta.url));

/** Where `npm run generate` writes the document, relative to the repository. */
export const openApiPath = "openapi/openapi.json";

/** The security scheme of API keys, as the interface specification names it. */
export const accessKeyScheme = "accessKey";

/** The security scheme of the admin API's `ADMIN_TOKEN`. */
export const adminTokenScheme = "adminToken";

/** The package whose services the REST API serves. */
const contractDirectory = join(root, "gen/referral/v1");

/**
 * The document, built from the contract. Deterministic: the same proto gives
 * the same document, key for key.
 */
export async function buildOpenApiDocument(): Promise<Json> {
  const services = await contractServices();
  const comments = commentReader(sourceRegistry());
  const schemas = new SchemaBuilder(comments);
  const paths: Record<string, Record<string, Json>> = {};
  const tags: Json[] = [];
  const operationNames = operationIds(services);
  // Every response schema first, so a message both written and read gets its
  // plain name for what REST writes and `...Input` for what it reads.
  for (const method of services.flatMap((service) => service.methods)) {
    const route = httpRouteOf(method);
    if (route) schemas.responseBody(method, route);
  }

  for (const service of services) {
    const methods = service.methods.filter((method) => httpRouteOf(method) !== undefined);
    if (methods.length === 0) continue;
    tags.push(withDescription({ name: service.name }, comments.service(service)));
    for (const method of methods) {
      const route = httpRouteOf(method) as HttpRoute;
      const path = openApiPathOf(route);
      paths[path] ??= {};
      paths[path][route.verb.toLowerCase()] = operationOf(
        service,
        method,
        route,
        operationNames.get(method) as string,
        schemas,
        comments,
      );
    }
  }

  return {
    openapi: "3.1.0",
    info: {
      title: "Referral service REST API",
      version: "1.0",
      description: [
        "The JSON REST binding of the referral service's protobuf contract " +
          "(`proto/referral/v1/`), generated from it by `scripts/generate-openapi.ts`. The " +
          "same RPCs are served over gRPC, Connect and gRPC-Web on the same port.",
        "Responses carry every declared field in camelCase, unset optional fields as `null`, " +
          "timestamps as ISO 8601 UTC strings and enums as lowercase words. Requests may also " +
          "name fields and query parameters in snake_case, and send `null` for a field to " +
          "leave it unset; any other key is refused. Errors answer " +
          "`{ code, message, details }`.",
      ].join("\n\n"),
      license: { name: "Apache-2.0", identifier: "Apache-2.0" },
    },
    servers: [{ url: "/" }],
    tags,
    paths: sortedByKey(paths),
    components: {
      schemas: { ...sortedByKey(schemas.all()), [errorSchemaName]: errorSchema() },
      responses: errorResponses(),
      securitySchemes: {
        [accessKeyScheme]: {
          type: "apiKey",
          in: "header",
          name: "Authorization",
          description:
            "An API key: `Authorization: <key>` (`Bearer <key>` works too). Public keys " +
            "(`pk_...`) may call the operations that say so; secret keys (`sk_...`) may call " +
            "every operation of the tenant API.",
        },
        [adminTokenScheme]: {
          type: "apiKey",
          in: "header",
          name: "Authorization",
          description:
            "The operator's `ADMIN_TOKEN`, in the same header as API keys. Without " +
            "`ADMIN_TOKEN` set the admin API answers `permission_denied`.",
        },
      },
    },
  };
}

/**
 * Every service of the contract's generated files. Listed from the files in
 * gen/, so a service or RPC added to the proto is in the document after the
 * next `npm run generate` without a line here.
 */
async function contractServices(): Promise<DescService[]> {
  const services: DescService[] = [];
  for (const name of readdirSync(contractDirectory).sort()) {
    if (!name.endsWith("_pb.ts")) continue;
    const module = (await import(pathToFileURL(join(contractDirectory, name)).href)) as Record<
      string,
      unknown
    >;
    for (const value of Object.values(module)) {
      if (isFileDesc(value)) services.push(...value.services);
    }
  }
  // The tenant API first, the operator's admin API after it.
  const adminOnly = (service: DescService) =>
    service.methods.every((method) => methodAccess(method) === Access.ADMIN) ? 1 : 0;
  return services.sort((a, b) => adminOnly(a) - adminOnly(b));
}

function isFileDesc(value: unknown): value is DescFile {
  return (value as { kind?: unknown } | null)?.kind === "file";
}

/**
 * The contract as `buf build` compiles it, with the source info (comments)
 * the generated code leaves out. buf comes from npm and reads only local
 * files, so this runs offline.
 */
function sourceRegistry(): FileRegistry {
  const image = execFileSync(
    join(root, "node_modules/.bin/buf"),
    ["build", "--as-file-descriptor-set", "-o", "-#format=binpb"],
    { cwd: root, maxBuffer: 64 * 1024 * 1024 },
  );
  return createFileRegistry(fromBinary(FileDescriptorSetSchema, image));
}

/** Proto comments of generated descriptors, looked up in the source registry by name. */
interface CommentReader {
  service(desc: DescService): string | undefined;
  method(desc: DescMethod): string | undefined;
  message(desc: DescMessage): string | undefined;
  field(desc: DescField): string | undefined;
}

function commentReader(source: FileRegistry): CommentReader {
  const messageOf = (desc: DescMessage) => source.getMessage(desc.typeName);
  const serviceOf = (desc: DescService) => source.getService(desc.typeName);
  return {
    service: (desc) => textOf(serviceOf(desc)),
    method: (desc) => textOf(serviceOf(desc.parent)?.methods.find((m) => m.name === desc.name)),
    message: (desc) => textOf(messageOf(desc)),
    field: (desc) =>
      desc.parent === undefined
        ? undefined
        : textOf(messageOf(desc.parent)?.fields.find((f) => f.number === desc.number)),
  };
}

/**
 * A leading comment as prose: the proto wraps lines at 100 columns, so lines
 * are joined with spaces and blank lines kept as paragraph breaks.
 */
function textOf(desc: Parameters<typeof getComments>[0] | undefined): string | undefined {
  const leading = desc ? getComments(desc).leading : undefined;
  if (!leading?.trim()) return undefined;
  return leading
    .split(/\n\s*\n/)
    .map((paragraph) =>
      paragraph
        .split("\n")
        .map((line) => line.trim())
        .filter((line) => line !== "")
        .join(" "),
    )
    .filter((paragraph) => paragraph !== "")
    .join("\n\n");
}

/** Operation ids: the RPC's name, or Service_Rpc where two services share a name. */
function operationIds(services: readonly DescService[]): Map<DescMethod, string> {
  const counts = new Map<string, number>();
  for (const service of services) {
    for (const method of service.methods) {
      counts.set(method.name, (counts.get(method.name) ?? 0) + 1);
    }
  }
  const ids = new Map<DescMethod, string>();
  for (const service of services) {
    for (const method of service.methods) {
      const unique = counts.get(method.name) === 1;
      ids.set(method, unique ? method.name : `${service.name}_${method.name}`);
    }
  }
  return ids;
}

/** The route's template with each variable named as REST's JSON names the field. */
function openApiPathOf(route: HttpRoute): string {
  let index = 0;
  return route.template.replace(/\{[^}]*\}/g, () => {
    const field = route.pathFields[index++] as DescField;
    return `{${field.jsonName}}`;
  });
}

function operationOf(
  service: DescService,
  method: DescMethod,
  route: HttpRoute,
  operationId: string,
  schemas: SchemaBuilder,
  comments: CommentReader,
): Json {
  const access = methodAccess(method);
  const parameters: Json[] = [];
  for (const field of route.pathFields) {
    parameters.push(
      withDescription(
        {
          name: field.jsonName,
          in: "path",
          required: true,
          schema: schemas.pathParameter(field),
        },
        comments.field(field),
      ),
    );
  }
  const bodyField =
    route.body && route.body !== "*"
      ? method.input.fields.find((f) => f.name === route.body || f.jsonName === route.body)
      : undefined;
  if (route.body !== "*") {
    for (const field of method.input.fields) {
      if (field === bodyField || route.pathFields.includes(field)) continue;
      // The transport reads scalars and enums (and lists of them) from the
      // query; other fields cannot be set on REST.
      if (field.fieldKind === "message" || field.fieldKind === "map") continue;
      parameters.push(
        withDescription(
          {
            name: field.jsonName,
            in: "query",
            required: false,
            schema: schemas.queryParameter(field),
            ...(field.fieldKind === "list" ? { style: "form", explode: true } : {}),
          },
          comments.field(field),
        ),
      );
    }
  }
  const write = isWriteRpc(method);
  if (write) {
    parameters.push({
      name: idempotencyHeaderName,
      in: "header",
      required: false,
      description:
        "Runs the write once: a retry with the same key and request gets the first outcome " +
        "again, marked `Idempotent-Replayed: true`. 1 to 255 printable ASCII characters, kept " +
        "24 hours.",
      schema: { type: "string", minLength: 1, maxLength: 255, pattern: "^[\\x20-\\x7E]+$" },
    });
  }

  const operation: Json = {
    operationId,
    tags: [service.name],
    summary: `${service.name}.${method.name}`,
  };
  const description = comments.method(method);
  if (description) operation.description = description;
  if (parameters.length > 0) operation.parameters = parameters;

  const body = requestBodyOf(method, route, bodyField, schemas, comments);
  if (body) operation.requestBody = body;

  const status = String(restSuccessStatus(method));
  const success: Json = { description: successDescription(method, route, comments) };
  if (method.methodKind === "server_streaming") {
    success.content = streamContentOf(method);
    // HttpBody's own comment is googleapis' essay on the type.
    if (method.output.typeName === "google.api.HttpBody") {
      success.description = "The body, streamed as it is made.";
    }
  } else {
    const responseSchema = schemas.responseBody(method, route);
    if (responseSchema) success.content = { "application/json": { schema: responseSchema } };
  }
  if (write) {
    success.headers = {
      [idempotentReplayedName]: {
        description: "`true` when the response is a replay of an earlier call's outcome.",
        schema: { type: "string", enum: ["true"] },
      },
    };
  }
  const responses: Record<string, Json> = { [status]: success };
  for (const errorStatus of errorStatusesOf(method, route, access)) {
    responses[String(errorStatus)] = { $ref: `#/components/responses/${errorStatus}` };
  }
  operation.responses = responses;
  operation.security =
    access === Access.ADMIN ? [{ [adminTokenScheme]: [] }] : [{ [accessKeyScheme]: [] }];
  operation["x-access"] = Access[access].toLowerCase();
  return operation;
}

const idempotencyHeaderName = headerCase(idempotencyKeyHeader);
const idempotentReplayedName = headerCase(idempotentReplayedHeader);

function headerCase(name: string): string {
  return name.replace(/(^|-)([a-z])/g, (_match, dash: string, letter: string) => {
    return dash + letter.toUpperCase();
  });
}

function requestBodyOf(
  method: DescMethod,
  route: HttpRoute,
  bodyField: DescField | undefined,
  schemas: SchemaBuilder,
  comments: CommentReader,
): Json | undefined {
  if (route.body === "*") {
    // A POST with an empty body reads as {}, so the body is never required.
    return {
      required: false,
      content: {
        "application/json": { schema: schemas.requestBody(method.input, route.pathFields) },
      },
    };
  }
  if (!bodyField) return undefined;
  return withDescription(
    {
      required: true,
      content: { "application/json": { schema: schemas.inputField(bodyField) } },
    },
    comments.field(bodyField),
  );
}

function successDescription(method: DescMethod, route: HttpRoute, comments: CommentReader): string {
  if (route.responseBody) {
    return comments.field(route.responseBody) ?? route.responseBody.jsonName;
  }
  return comments.message(method.output) ?? method.output.name;
}

/**
 * The error statuses an operation can answer, from what the transport and
 * the pipeline do to every call of its kind: every call is read (400), must
 * present a credential (401), may name a record that is not there (404), is
 * rate-limited (429), may fail unexpectedly (500) and may be refused for now
 * (503: the instance is draining); secret and admin RPCs
 * refuse other credentials (403), as public RPCs that take a `userHash` refuse
 * what an unverified caller may not do (403, see docs/trust.md); writes read a body (413, 415) and take an
 * idempotency key whose first call may still run (409); a path variable may
 * be too long (414).
 */
function errorStatusesOf(method: DescMethod, route: HttpRoute, access: Access): number[] {
  const statuses = [400, 401, 404, 429, 500, 503];
  const takesUserHash = method.input.fields.some((field) => field.name === "user_hash");
  if (access !== Access.PUBLIC || takesUserHash) statuses.push(403);
  if (isWriteRpc(method)) statuses.push(409, 413, 415);
  if (route.pathFields.length > 0) statuses.push(414);
  return statuses.sort((a, b) => a - b);
}

/** What each error status means, with the codes it carries. */
const errorStatusMeanings: Record<number, string> = {
  400: "The request is invalid: a malformed body or query, a field that breaks its rules, a state that does not allow the change, or an idempotency key sent before with another request.",
  401: "The credential is missing, unknown or revoked, or a `userHash` does not verify.",
  403: "The credential may not call this operation (a public key on a secret-key operation; the admin API disabled), or a public key without a valid `userHash` may not do this (see the trust model).",
  404: "A record the request names is not in this application.",
  409: "A call with this idempotency key is still running: retry a moment later with the same key.",
  413: "The body is larger than `MAX_BODY_BYTES`.",
  414: "A path segment is longer than 100 characters.",
  415: "The body is not `application/json`.",
  429: "Over a rate limit: retry after `Retry-After` seconds.",
  500: "Something unexpected failed; the cause is logged, never sent.",
  503: "Not now: the instance is shutting down (a request pipelined behind another during its drain), or a host the request names could not be resolved. Send the request again.",
};

/**
 * Connect's code words, from its own table, so REST's error codes and the
 * document cannot differ.
 */
function errorCodes(): string[] {
  return allCodes().map((code) => codeToString(code));
}

/** The codes Connect's table maps to an HTTP status: the only ones REST answers it with. */
function codesOfStatus(status: number): Code[] {
  return allCodes().filter((code) => codeToHttpStatus(code) === status);
}

function allCodes(): Code[] {
  return Object.values(Code).filter((value): value is Code => typeof value === "number");
}

/**
 * The codes of the statuses the HTTP server itself answers (a body too
 * large, a path segment too long, a body that is not JSON), outside
 * Connect's table, as src/transport/errors.ts gives them a code.
 */
const httpServerCodes: Record<number, Code[]> = {
  413: [Code.ResourceExhausted],
  414: [Code.InvalidArgument],
  415: [Code.InvalidArgument],
};

const errorSchemaName = "Error";

function errorSchema(): Json {
  return {
    type: "object",
    description:
      "Every REST error: the Connect code word, a message for people, and the fields at fault (for `invalid_argument`).",
    required: ["code", "message", "details"],
    additionalProperties: false,
    properties: {
      code: { type: "string", enum: errorCodes() },
      message: { type: "string" },
      details: {
        type: "array",
        items: {
          type: "object",
          required: ["field", "description"],
          additionalProperties: false,
          properties: {
            field: { type: "string", description: "The field, as a camelCase path." },
            description: { type: "string", description: "What is wrong with it." },
          },
        },
      },
    },
  };
}

function errorResponses(): Record<string, Json> {
  const responses: Record<string, Json> = {};
  for (const [status, meaning] of Object.entries(errorStatusMeanings)) {
    const codes = httpServerCodes[Number(status)] ?? codesOfStatus(Number(status));
    const words = codes.map((code) => codeToString(code));
    const response: Json = {
      description: `${meaning} Codes: ${words.map((word) => `\`${word}\``).join(", ")}.`,
      content: {
        "application/json": {
          schema: {
            allOf: [{ $ref: `#/components/schemas/${errorSchemaName}` }],
            type: "object",
            properties: { code: { enum: words } },
          },
        },
      },
    };
    if (status === "429") {
      response.headers = {
        "Retry-After": {
          description: "Seconds until the window ends.",
          schema: { type: "integer", minimum: 0 },
        },
      };
    }
    responses[status] = response;
  }
  return responses;
}

/**
 * Component schemas of messages, one per message as REST writes it and one
 * per message as REST reads it (`...Input`, where the message is written
 * too). Field shapes follow the codec: which fields it writes as `null` or
 * leaves out is read from its own output for an empty message, enum words
 * from `enumWords`, so the document and the wire cannot disagree.
 */
class SchemaBuilder {
  private readonly output = new Map<string, Json>();
  private readonly input = new Map<string, Json>();
  private readonly outputNames = new Set<string>();

  constructor(private readonly comments: CommentReader) {}

  /** Every component schema built so far, by name. */
  all(): Record<string, Json> {
    return Object.fromEntries([...this.output, ...this.input]);
  }

  /** The body of a success response, or undefined when it has none. */
  responseBody(method: DescMethod, route: HttpRoute): Json | undefined {
    if (!route.responseBody) return this.outputRef(method.output);
    const field = route.responseBody;
    // The services always set the field a route answers with.
    if (field.fieldKind === "list") {
      return { type: "array", items: this.outputValue(field) };
    }
    if (field.fieldKind === "message") return this.outputRef(field.message);
    return this.outputValue(field);
  }

  /** A `body: "*"` request: the request message without its path fields. */
  requestBody(schema: DescMessage, pathFields: readonly DescField[]): Json {
    if (pathFields.length === 0) return this.inputRef(schema);
    const name = `${schema.name}Body`;
    if (!this.input.has(name)) {
      this.input.set(
        name,
        this.inputObject(
          schema,
          schema.fields.filter((field) => !pathFields.includes(field)),
        ),
      );
    }
    return { $ref: `#/components/schemas/${name}` };
  }

  /** A request field read from the body (`body: "field"`). */
  inputField(field: DescField): Json {
    return this.inputFieldSchema(field, false);
  }

  pathParameter(field: DescField): Json {
    return this.inputScalarOrEnum(field, false);
  }

  queryParameter(field: DescField): Json {
    if (field.fieldKind === "list") {
      return { type: "array", items: this.inputScalarOrEnum(field, false) };
    }
    return this.inputScalarOrEnum(field, false);
  }

  // Output: what REST writes.

  private outputRef(schema: DescMessage): Json {
    if (schema.typeName === StructSchema.typeName) return freeFormObject(false);
    const name = schema.name;
    if (!this.output.has(name)) {
      this.outputNames.add(name);
      // Set before the fields are built: a message may contain itself.
      const placeholder: Json = {};
      this.output.set(name, placeholder);
      Object.assign(placeholder, this.outputObject(schema));
    }
    return { $ref: `#/components/schemas/${name}` };
  }

  private outputObject(schema: DescMessage): Json {
    // The codec's plain form of an empty message: a key it leaves out is
    // omitted when unset, a null is written when unset.
    const unset = toPlain(schema, create(schema));
    const properties: Record<string, Json> = {};
    const required: string[] = [];
    for (const field of schema.fields) {
      const present = Object.hasOwn(unset, field.jsonName);
      const nullable = present && unset[field.jsonName] === null;
      if (present) required.push(field.jsonName);
      properties[field.jsonName] = withDescription(
        this.outputFieldSchema(field, nullable),
        this.comments.field(field),
      );
    }
    return withDescription(
      { type: "object", required, additionalProperties: false, properties },
      this.comments.message(schema),
    );
  }

  private outputFieldSchema(field: DescField, nullable: boolean): Json {
    if (field.fieldKind === "list") {
      return { type: "array", items: this.outputValue(field) };
    }
    if (field.fieldKind === "map") {
      return { type: "object", additionalProperties: this.outputValue(field) };
    }
    return orNull(this.outputValue(field), nullable);
  }

  /** One value of a field (the field's own, or one list item or map value). */
  private outputValue(field: DescField): Json {
    const kind = valueKindOf(field);
    if (kind === "enum") {
      // The codec writes a number without a word (the zero value, or one
      // this contract does not know) as null.
      return orNull(enumSchema(field.enum as DescEnum), true);
    }
    if (kind === "message") {
      const message = field.message as DescMessage;
      if (message.typeName === TimestampSchema.typeName) return dateTime();
      return this.outputRef(message);
    }
    return scalarOutput(field.scalar as ScalarType);
  }

  // Input: what REST reads.

  private inputRef(schema: DescMessage): Json {
    if (schema.typeName === StructSchema.typeName) return freeFormObject(false);
    const name = this.inputName(schema);
    if (!this.input.has(name)) {
      const placeholder: Json = {};
      this.input.set(name, placeholder);
      Object.assign(placeholder, this.inputObject(schema, schema.fields));
    }
    return { $ref: `#/components/schemas/${name}` };
  }

  /** A message read by REST is named `...Input` where the same message is also written. */
  private inputName(schema: DescMessage): string {
    return this.outputNames.has(schema.name) ? `${schema.name}Input` : schema.name;
  }

  private inputObject(schema: DescMessage, fields: readonly DescField[]): Json {
    const properties: Record<string, Json> = {};
    for (const field of fields) {
      properties[field.jsonName] = withDescription(
        this.inputFieldSchema(field, true),
        this.comments.field(field),
      );
    }
    return withDescription(
      { type: "object", additionalProperties: false, properties },
      this.comments.message(schema),
    );
  }

  /** A field as the codec reads it: `null` leaves any field unset. */
  private inputFieldSchema(field: DescField, nullable: boolean): Json {
    if (field.fieldKind === "list") {
      return orNull({ type: "array", items: this.inputValue(field) }, nullable);
    }
    if (field.fieldKind === "map") {
      return orNull({ type: "object", additionalProperties: this.inputValue(field) }, nullable);
    }
    return orNull(this.inputValue(field), nullable);
  }

  private inputValue(field: DescField): Json {
    const kind = valueKindOf(field);
    if (kind === "message") {
      const message = field.message as DescMessage;
      if (message.typeName === TimestampSchema.typeName) return dateTime();
      return this.inputRef(message);
    }
    return this.inputScalarOrEnum(field, false);
  }

  private inputScalarOrEnum(field: DescField, nullable: boolean): Json {
    const kind = valueKindOf(field);
    if (kind === "enum") return orNull(enumSchema(field.enum as DescEnum), nullable);
    if (kind === "scalar") return orNull(scalarInput(field.scalar as ScalarType), nullable);
    throw new Error(`${field.parent?.typeName}.${field.name} is not a scalar or an enum`);
  }
}

function enumSchema(desc: DescEnum): Json {
  return { type: "string", enum: [...enumWords(desc).words] };
}

function dateTime(): Json {
  return { type: "string", format: "date-time" };
}

function freeFormObject(nullable: boolean): Json {
  return orNull({ type: "object", additionalProperties: true }, nullable);
}

/** JSON numbers REST writes for each scalar; 64-bit integers are written as numbers. */
function scalarOutput(type: ScalarType): Json {
  switch (type) {
    case ScalarType.STRING:
      return { type: "string" };
    case ScalarType.BYTES:
      return { type: "string", contentEncoding: "base64" };
    case ScalarType.BOOL:
      return { type: "boolean" };
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return { type: "number" };
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return { type: "integer", format: "int32" };
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return { type: "integer", minimum: 0, maximum: 2 ** 32 - 1 };
    default:
      return { type: "integer", format: "int64" };
  }
}

/** What REST accepts for each scalar: 32-bit integers in range, 64-bit ones as numbers or decimal strings. */
function scalarInput(type: ScalarType): Json {
  switch (type) {
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return { type: "integer", format: "int32", minimum: -(2 ** 31), maximum: 2 ** 31 - 1 };
    case ScalarType.INT64:
    case ScalarType.UINT64:
    case ScalarType.SINT64:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return {
        anyOf: [
          { type: "integer", format: "int64" },
          { type: "string", pattern: "^-?\\d{1,20}$" },
        ],
      };
    default:
      return scalarOutput(type);
  }
}

/** The schema, admitting null too when `nullable`. */
function orNull(schema: Json, nullable: boolean): Json {
  if (!nullable || (Array.isArray(schema.type) && schema.type.includes("null"))) return schema;
  if (typeof schema.type === "string") {
    const widened: Json = { ...schema, type: [schema.type, "null"] };
    if (Array.isArray(schema.enum)) widened.enum = [...schema.enum, null];
    return widened;
  }
  return { anyOf: [schema, { type: "null" }] };
}

function withDescription<T extends Json>(value: T, description: string | undefined): T {
  return description ? { ...value, description } : value;
}

function sortedByKey<T>(record: Record<string, T>): Record<string, T> {
  return Object.fromEntries(
    Object.entries(record).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
  );
}

/**
 * The document as committed: Biome's JSON formatting (what `npm run lint`
 * checks), so regenerating it gives the same bytes.
 */
export function formatOpenApiDocument(document: Json): string {
  return execFileSync(
    join(root, "node_modules/.bin/biome"),
    ["format", `--stdin-file-path=${openApiPath}`],
    { cwd: root, input: JSON.stringify(document, null, 2), encoding: "utf8" },
  );
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const output = process.argv[2] ?? join(root, openApiPath);
  mkdirSync(dirname(output), { recursive: true });
  writeFileSync(output, formatOpenApiDocument(await buildOpenApiDocument()));
}

/**
 * A server-streaming RPC's REST body: a `google.api.HttpBody` stream's bytes
 * in its declared media type, any other stream as Server-Sent Events whose
 * `data:` lines are its messages' JSON.
 */
function streamContentOf(method: DescMethod): Json {
  if (method.output.typeName === "google.api.HttpBody") {
    const type = restContentType(method) ?? "application/octet-stream";
    return { [type]: { schema: { type: "string" } } };
  }
  return {
    "text/event-stream": {
      schema: {
        type: "string",
        description: `Server-Sent Events: each \`data:\` line is a ${method.output.name} as JSON (#/components/schemas/${method.output.name}); a comment line every 15 s; an \`error\` event then the end when the stream fails after it started.`,
      },
    },
  };
}
