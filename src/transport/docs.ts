import fastifySwagger, { type StaticDocumentSpec } from "@fastify/swagger";
import fastifySwaggerUi from "@fastify/swagger-ui";
import type { FastifyInstance } from "fastify";
import document from "../../openapi/openapi.json" with { type: "json" };

/** Where the API reference page is served. */
export const docsRoute = "/docs";

/**
 * Serves the API reference at `GET /docs`: Swagger UI (`@fastify/swagger-ui`,
 * its assets shipped in the package, no CDN) rendering the OpenAPI document
 * that `GET /openapi.json` serves, loaded the same way (a JSON module import,
 * so it travels into dist/ with the compiled code). `@fastify/swagger` in
 * static mode hands the document over as it is; its `servers` entry (`/`)
 * makes "Try it out" call the origin that served the page, with the key
 * entered under "Authorize" in the Authorization header. A plain route like
 * `/openapi.json`: no key, no rate limit.
 */
export async function registerDocs(app: FastifyInstance): Promise<void> {
  // Encapsulated: the `swagger` decorator stays inside this scope.
  await app.register(async (scope) => {
    await scope.register(fastifySwagger, {
      mode: "static",
      // Its types stop at OpenAPI 3.0; static mode serves any document as it is.
      specification: { document: document as unknown as StaticDocumentSpec["document"] },
    });
    await scope.register(fastifySwaggerUi, {
      routePrefix: docsRoute,
      theme: { title: `${document.info.title} ${document.info.version}` },
      uiConfig: {
        // Operations listed, collapsed: the page opens on the whole API.
        docExpansion: "list",
        // The key entered under "Authorize" lasts for the tab, not beyond.
        persistAuthorization: false,
        displayRequestDuration: true,
      },
    });
  });
}
