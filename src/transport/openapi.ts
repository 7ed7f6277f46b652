import type { FastifyInstance } from "fastify";
import document from "../../openapi/openapi.json" with { type: "json" };

/** Where the service serves its OpenAPI document. */
export const openApiRoute = "/openapi.json";

/**
 * Serves the OpenAPI document (generated from the contract by
 * `npm run generate`, committed as openapi/openapi.json) at
 * `GET /openapi.json`. A plain route beside `/readyz`: no key, no rate
 * limit, no RPC metrics, since it describes the API rather than calling it.
 * The JSON module import puts the document in dist/ with the compiled code.
 */
export function registerOpenApi(app: FastifyInstance): void {
  const body = JSON.stringify(document);
  app.get(openApiRoute, (_request, reply) =>
    reply.type("application/json; charset=utf-8").send(body),
  );
}
