import { readFileSync } from "node:fs";
import { Validator } from "@seriousme/openapi-schema-validator";
import test from "ava";
import { Access } from "../../gen/referral/v1/options_pb.js";
import { enumWords, methodAccess, restSuccessStatus } from "../../src/contract/options.js";
import { valueKindOf } from "../../src/contract/plain-codec.js";
import { defaultFraudPolicy } from "../../src/domain/fraud-rules.js";
import { disposableDomains } from "../../src/services/evidence.js";
import { createSecretBox } from "../../src/store/secret-box.js";
import { httpRouteOf } from "../../src/transport/rest/http-rules.js";
import { createServiceRegistrations, rpcsOf } from "../../src/transport/routes.js";
import { engineNames } from "../helpers/engines.js";
import { checkRestResponse, OpenApiMismatch } from "../helpers/openapi.js";
import { keys, rest, startServer, useServer } from "../helpers/server.js";

const documentPath = new URL("../../openapi/openapi.json", import.meta.url);
// biome-ignore lint/suspicious/noExplicitAny: the test reads the document's JSON freely.
const document: any = JSON.parse(readFileSync(documentPath, "utf8"));

const server = useServer();

/** The RPCs the running service registers, with the REST route of each. */
function restRoutes() {
  const registrations = createServiceRegistrations({
    store: server.app.store,
    clock: () => new Date(),
    streamTicks: { onNextTick: () => () => {} },
    fraudPolicy: defaultFraudPolicy,
    disposableDomains: disposableDomains(),
    secretBox: createSecretBox(Buffer.alloc(32)),
    allowPrivateWebhooks: false,
    publicUrl: "http://localhost:8080",
    notifyWebhooks: () => {},
  });
  return rpcsOf(registrations).flatMap((rpc) => {
    const route = httpRouteOf(rpc.method);
    if (!route) return [];
    let index = 0;
    const path = route.template.replace(
      /\{[^}]*\}/g,
      () => `{${route.pathFields[index++]?.jsonName}}`,
    );
    return [{ rpc, route, path, verb: route.verb.toLowerCase() }];
  });
}

test("the document is valid OpenAPI 3.1 (@seriousme/openapi-schema-validator)", async (t) => {
  const validator = new Validator();
  const result = await validator.validate(structuredClone(document));
  t.deepEqual(result.errors, undefined);
  t.true(result.valid);
  t.is(validator.version, "3.1");
  t.is(document.info.version, "1.0");
  t.deepEqual(document.servers, [{ url: "/" }]);
});

test("every REST route the service registers is an operation, with its key and success status, and there are no others", (t) => {
  const routes = restRoutes();
  t.true(routes.length > 0);
  for (const { rpc, path, verb } of routes) {
    const operation = document.paths[path]?.[verb];
    if (!operation) {
      t.fail(`${rpc.name}: ${verb.toUpperCase()} ${path} is not in the document`);
      continue;
    }
    const access = methodAccess(rpc.method);
    t.deepEqual(
      operation.security,
      [{ [access === Access.ADMIN ? "adminToken" : "accessKey"]: [] }],
      rpc.name,
    );
    t.truthy(operation.responses[String(restSuccessStatus(rpc.method))], rpc.name);
    t.truthy(operation.description, `${rpc.name} has the proto comment`);
  }
  const documented = Object.entries(document.paths).flatMap(([path, item]) =>
    Object.keys(item as object).map((verb) => `${verb} ${path}`),
  );
  t.deepEqual(
    documented.sort(),
    routes.map(({ verb, path }) => `${verb} ${path}`).sort(),
    "the document's operations are exactly the service's routes",
  );
  t.deepEqual(Object.keys(document.components.securitySchemes).sort(), ["accessKey", "adminToken"]);
  t.like(document.components.securitySchemes.accessKey, {
    type: "apiKey",
    in: "header",
    name: "Authorization",
  });
});

test("schemas: REST's enum words, nullable and omitted fields, timestamps, bare arrays and envelopes", (t) => {
  const schemas = document.components.schemas;
  const customer = schemas.Customer;
  t.false(customer.additionalProperties);
  t.true(customer.required.includes("email"));
  t.deepEqual(customer.properties.email.type, ["string", "null"]);
  t.deepEqual(customer.properties.externalUserId.type, "string");
  t.deepEqual(customer.properties.createdAt.type, ["string", "null"]);
  t.is(customer.properties.createdAt.format, "date-time");
  t.deepEqual(customer.properties.customProperties.type, "object");
  t.deepEqual(customer.properties.environment.enum, ["production", "test", null]);
  // Left out when unset (rest_omit_when_unset) rather than written as null.
  t.false(schemas.Referral.required.includes("environment"));
  t.true(schemas.Referral.required.includes("status"));
  // The email types' REST words come from (referral.v1.rest_name).
  const emailType = schemas.Email.properties.type;
  t.true(emailType.enum.includes("referrer:reward"));
  // Every enum of a response lists exactly the codec's words (and null).
  for (const { rpc } of restRoutes()) {
    for (const field of rpc.method.output.fields) {
      if (valueKindOf(field) !== "enum" || field.fieldKind !== "scalar") continue;
      const words = enumWords(field.enum as never).words;
      const property = schemas[rpc.method.output.name]?.properties[field.jsonName];
      if (property) t.deepEqual(property.enum, [...words, null], `${rpc.name} ${field.name}`);
    }
  }
  const ok = (path: string, verb: string, status: string) =>
    document.paths[path][verb].responses[status].content["application/json"].schema;
  t.deepEqual(ok("/campaigns", "get", "200"), {
    type: "array",
    items: { $ref: "#/components/schemas/Campaign" },
  });
  t.deepEqual(ok("/customers", "get", "200"), {
    $ref: "#/components/schemas/ListCustomersResponse",
  });
  t.deepEqual(schemas.ListCustomersResponse.required, ["total", "limit", "offset", "data"]);
  t.deepEqual(ok("/customers/identify", "post", "201"), {
    $ref: "#/components/schemas/Customer",
  });
  t.deepEqual(document.paths["/customers/{id}"].get.responses["404"], {
    $ref: "#/components/responses/404",
  });
  t.deepEqual(schemas.Error.required, ["code", "message", "details"]);
  t.true(schemas.Error.properties.code.enum.includes("failed_precondition"));
  // What REST reads refuses unknown keys and takes null for any field.
  t.false(schemas.IdentifyCustomerRequest.additionalProperties);
  t.deepEqual(schemas.IdentifyCustomerRequest.properties.name.type, ["string", "null"]);
});

for (const engine of engineNames) {
  test(`GET /openapi.json serves the document with no key, outside rate limits (${engine})`, async (t) => {
    const limited = await startServer({
      engine,
      env: {
        RATE_LIMIT_PUBLIC: "1/1m",
        RATE_LIMIT_SECRET: "1/1m",
        RATE_LIMIT_ADMIN: "1/1m",
        RATE_LIMIT_UNAUTHENTICATED: "1/1m",
      },
    });
    try {
      for (const authorization of [undefined, "not-a-key", "not-a-key", keys.public]) {
        const response = await fetch(`${limited.baseUrl}/openapi.json`, {
          headers: authorization ? { authorization } : {},
        });
        t.is(response.status, 200);
        t.regex(response.headers.get("content-type") ?? "", /^application\/json/);
        t.deepEqual(await response.json(), document);
      }
    } finally {
      await limited.stop();
    }
  });
}

test("every operation answers a call without a key as the document says (401, the error body)", async (t) => {
  for (const [path, item] of Object.entries(document.paths)) {
    for (const verb of Object.keys(item as object)) {
      const concrete = path.replace(/\{[^}]+\}/g, "some-id");
      // rest() checks the answer against the document.
      const response = await rest(server, verb.toUpperCase(), concrete);
      t.is(response.status, 401, `${verb} ${path}`);
    }
  }
});

test("the response check fails a drifted body, an undocumented status and a route the document lacks", (t) => {
  const error = (body: unknown) => JSON.stringify(body);
  const contentType = "application/json; charset=utf-8";
  t.throws(
    () =>
      checkRestResponse({
        method: "GET",
        path: "/customers/cus_1",
        status: 200,
        contentType,
        body: error({ id: "cus_1" }),
      }),
    { instanceOf: OpenApiMismatch, message: /required property 'externalUserId'/ },
  );
  t.throws(
    () =>
      checkRestResponse({
        method: "GET",
        path: "/campaigns",
        status: 418,
        contentType,
        body: "{}",
      }),
    { instanceOf: OpenApiMismatch, message: /the document lists/ },
  );
  t.throws(
    () =>
      checkRestResponse({
        method: "GET",
        path: "/not-documented",
        status: 200,
        contentType,
        body: "{}",
      }),
    { instanceOf: OpenApiMismatch, message: /has no path/ },
  );
  t.throws(
    () =>
      checkRestResponse({
        method: "GET",
        path: "/customers/cus_1",
        status: 404,
        contentType,
        body: error({ code: "missing", message: "x", details: [] }),
      }),
    { instanceOf: OpenApiMismatch },
  );
  t.notThrows(() =>
    checkRestResponse({
      method: "PUT",
      path: "/customers/cus_1",
      status: 405,
      contentType,
      body: error({ code: "unimplemented", message: "PUT is not allowed", details: [] }),
    }),
  );
});

test("the response check reads formats and enums: a real customer passes, a drifted copy does not", async (t) => {
  const identified = await rest(server, "POST", "/customers/identify", {
    key: keys.public,
    body: { externalUserId: "openapi-check", name: "Ada" },
  });
  t.is(identified.status, 201);
  const answer = (body: unknown) => ({
    method: "POST",
    path: "/customers/identify",
    status: 201,
    contentType: "application/json; charset=utf-8",
    body: JSON.stringify(body),
  });
  t.notThrows(() => checkRestResponse(answer(identified.body)));
  for (const drift of [
    { createdAt: "yesterday" },
    { environment: "staging" },
    { visitedReferralsCount: "0" },
    { nickname: "Ada" },
  ]) {
    t.throws(() => checkRestResponse(answer({ ...identified.body, ...drift })), {
      instanceOf: OpenApiMismatch,
      message: /does not match the document/,
    });
  }
});
