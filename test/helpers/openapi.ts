import { Ajv2020, type ValidateFunction } from "ajv/dist/2020.js";
import ajvFormats from "ajv-formats";
import document from "../../openapi/openapi.json" with { type: "json" };

/**
 * Checks REST responses against the committed OpenAPI document, so a
 * response that drifts from it fails the test that received it. Every REST
 * request of the suite goes through here: `rest()`, `validatedFetch` and the
 * few raw HTTP clients call {@link checkRestResponse}.
 */

/** A REST response that the OpenAPI document does not describe. */
export class OpenApiMismatch extends Error {
  constructor(message: string) {
    super(message);
    this.name = "OpenApiMismatch";
  }
}

interface ResponseObject {
  readonly $ref?: string;
  readonly description?: string;
  readonly content?: Record<string, { readonly schema: unknown }>;
}

interface Operation {
  readonly responses: Record<string, ResponseObject>;
}

interface PathTemplate {
  readonly template: string;
  readonly pattern: RegExp;
  /** Literal segments match before variables, as in the router. */
  readonly variables: number;
  readonly operations: Record<string, Operation>;
}

const documentId = "https://referral-service.invalid/openapi.json";
const operationMethods = new Set(["get", "put", "post", "delete", "patch"]);

const ajv = new Ajv2020({ allErrors: true, strict: true });
// A CommonJS module: its function is both the module and its `default`.
ajvFormats.default(ajv);
// The document is one schema resource, so the schemas' "#/components/..."
// references resolve inside it; its OpenAPI sections are not JSON Schema
// keywords, only containers the validators point into.
for (const keyword of Object.keys(document)) ajv.addKeyword(keyword);
ajv.addSchema({ ...document, $id: documentId });

const templates: PathTemplate[] = Object.entries(
  document.paths as Record<string, Record<string, Operation>>,
)
  .map(([template, operations]) => {
    // A variable may be empty, as in the router ("/customers/" is GetCustomer
    // with no id, refused by the service rather than the router).
    const segments = template.replace(/\{[^}]+\}/g, "[^/]*");
    return {
      template,
      pattern: new RegExp(`^${segments}$`),
      variables: (template.match(/\{/g) ?? []).length,
      operations,
    };
  })
  .sort((a, b) => a.variables - b.variables);

/**
 * What the service answers besides its REST API: health, metrics, the
 * document and its docs page (and `/`, which may lead there), and the Connect and gRPC-Web paths
 * (`/package.Service/Method`).
 */
const notRestOperations =
  /^\/(healthz|readyz|metrics|openapi\.json)?$|^\/docs(\/|$)|^\/[a-z_][\w.]*\.[A-Z]\w*\/[A-Z]\w*$/;

const validators = new Map<string, ValidateFunction>();

/** A validator of the schema at a JSON pointer of the document. */
function validatorAt(pointer: string): ValidateFunction {
  let validate = validators.get(pointer);
  if (!validate) {
    validate = ajv.compile({ $ref: `${documentId}#${pointer}` });
    validators.set(pointer, validate);
  }
  return validate;
}

function pointerStep(key: string): string {
  return key.replace(/~/g, "~0").replace(/\//g, "~1");
}

/**
 * The path the server receives for a path a client was given: `fetch`
 * resolves `.` and `..` segments and escapes what URLs must, as WHATWG's URL
 * parser does.
 */
function requestPathOf(path: string): string {
  return new URL(path, "http://service.invalid").pathname;
}

/** The path template of the document that a request path falls under, if any. */
export function pathTemplateOf(path: string): string | undefined {
  const bare = requestPathOf(path);
  return templates.find(({ pattern }) => pattern.test(bare))?.template;
}

/** What {@link checkRestResponse} looks at. */
export interface RestExchange {
  readonly method: string;
  /** The request path, with or without its query. */
  readonly path: string;
  readonly status: number;
  readonly contentType: string | null | undefined;
  /** The response body's text ("" when there is none). */
  readonly body: string;
}

/**
 * Throws an {@link OpenApiMismatch} unless the document describes the
 * response: the path's operation for the method, a response for the status
 * (an undocumented status fails), and a JSON body valid against its schema
 * (or no body where none is documented). A method the path does not have
 * must be refused with the error body, and a path the document lacks must
 * be the router's refusal (a route missing from the document fails). Health,
 * metrics, Connect paths and CORS preflights are not REST operations and
 * are not checked.
 */
export function checkRestResponse(exchange: RestExchange): void {
  const method = exchange.method.toLowerCase();
  if (!operationMethods.has(method)) return;
  const bare = requestPathOf(exchange.path);
  const match = templates.find(({ pattern }) => pattern.test(bare));
  const where = `${exchange.method.toUpperCase()} ${exchange.path} answered ${exchange.status}`;
  if (!match) {
    if (notRestOperations.test(bare)) return;
    // Anything else must be the router's refusal of a path it has no route
    // for; an answer of any other kind is a route the document lacks.
    if (![400, 404, 414].includes(exchange.status)) {
      throw new OpenApiMismatch(`${where}, but the document has no path ${bare}`);
    }
    checkBody(where, "/components/schemas/Error", exchange);
    return;
  }
  const operation = match.operations[method];
  if (!operation) {
    if (exchange.status < 400 || exchange.status >= 500) {
      throw new OpenApiMismatch(`${where}, but ${match.template} has no ${method} operation`);
    }
    checkBody(where, `/components/schemas/Error`, exchange);
    return;
  }
  const operationPointer = `/paths/${pointerStep(match.template)}/${method}`;
  let response = operation.responses[String(exchange.status)];
  let responsePointer = `${operationPointer}/responses/${exchange.status}`;
  if (!response) {
    throw new OpenApiMismatch(
      `${where}: the document lists ${Object.keys(operation.responses).join(", ")} for ${method} ${match.template}\n${exchange.body}`,
    );
  }
  if (response.$ref) {
    responsePointer = response.$ref.slice(1);
    response = resolve(responsePointer) as ResponseObject;
  }
  const streamed = Object.keys(response.content ?? {}).find((type) => type !== "application/json");
  if (streamed) {
    // A stream's body: Server-Sent Events or a file, in the media type the document names.
    const mediaType = exchange.contentType?.split(";")[0]?.trim();
    if (mediaType !== streamed) {
      throw new OpenApiMismatch(`${where} as ${exchange.contentType}, not ${streamed}`);
    }
    return;
  }
  if (!response.content?.["application/json"]) {
    if (exchange.body !== "") {
      throw new OpenApiMismatch(`${where} with a body where the document has none`);
    }
    return;
  }
  checkBody(where, `${responsePointer}/content/application~1json/schema`, exchange);
}

function checkBody(where: string, schemaPointer: string, exchange: RestExchange): void {
  if (!exchange.contentType?.startsWith("application/json")) {
    throw new OpenApiMismatch(`${where} as ${exchange.contentType}, not application/json`);
  }
  let json: unknown;
  try {
    json = JSON.parse(exchange.body);
  } catch {
    throw new OpenApiMismatch(`${where} with a body that is not JSON: ${exchange.body}`);
  }
  const validate = validatorAt(schemaPointer);
  if (!validate(json)) {
    const errors = (validate.errors ?? [])
      .map((error) => `  ${error.instancePath || "(body)"} ${error.message}`)
      .join("\n");
    throw new OpenApiMismatch(
      `${where}, which does not match the document (${schemaPointer}):\n${errors}\n${exchange.body.slice(0, 2000)}`,
    );
  }
}

function resolve(pointer: string): unknown {
  let value: unknown = document;
  for (const step of pointer.split("/").slice(1)) {
    const key = step.replace(/~1/g, "/").replace(/~0/g, "~");
    value = (value as Record<string, unknown>)[key];
  }
  return value;
}

/**
 * `fetch`, with the response checked by {@link checkRestResponse} before the
 * caller sees it (a fresh Response over the text read).
 */
export async function validatedFetch(url: string, init: RequestInit = {}): Promise<Response> {
  const response = await fetch(url, init);
  const body = await response.text();
  checkRestResponse({
    method: init.method ?? "GET",
    path: new URL(url).pathname,
    status: response.status,
    contentType: response.headers.get("content-type"),
    body,
  });
  // 1xx, 204 and 304 responses cannot be constructed with a body.
  const bodyless = response.status === 204 || response.status === 304;
  return new Response(bodyless ? null : body, {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers,
  });
}
