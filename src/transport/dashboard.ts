import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { FastifyInstance } from "fastify";

/** Where the operator's dashboard is served. */
export const dashboardRoute = "/dashboard";

/**
 * Everything the page loads comes from this origin: its script, uPlot's,
 * the stylesheets and the API calls. No inline script or style, no frames,
 * no form posting elsewhere, so a secret key typed into the page can only
 * travel to this service. `data:` images are the empty favicon.
 */
export const dashboardContentSecurityPolicy = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join("; ");

/**
 * The folder of the page's own files. tsc compiles only TypeScript, so
 * after `npm run build` the module runs from dist/src/transport/ while the
 * files stay in src/transport/dashboard/: the folder beside the module is
 * tried first (running from src/ with tsx, or a build that copied it), then
 * the one in src/.
 */
export function dashboardAssetsDir(): string | undefined {
  const candidates = [
    new URL("./dashboard/", import.meta.url),
    new URL("../../../src/transport/dashboard/", import.meta.url),
  ].map((url) => fileURLToPath(url));
  return candidates.find((dir) => existsSync(join(dir, "index.html")));
}

/** A file served as it is, with its validator. */
interface Asset {
  readonly body: Buffer;
  readonly contentType: string;
  readonly etag: string;
}

function assetOf(path: string, contentType: string): Asset {
  const body = readFileSync(path);
  const etag = `"${createHash("sha256").update(body).digest("base64url").slice(0, 27)}"`;
  return { body, contentType, etag };
}

/**
 * Serves the operator's dashboard at `GET /dashboard`: a page that calls
 * this service's REST API with a secret key the operator pastes (kept in the
 * tab's sessionStorage, sent as the Authorization header), charts with
 * uPlot served from its npm package, and follows the stats stream live. A
 * plain route like `/docs`: the page holds no data, so it needs no key.
 * The files are read once, here; a missing asset folder (an image that
 * copied dist/ alone) leaves the API up and answers 404 with the reason.
 */
export function registerDashboard(app: FastifyInstance): void {
  const dir = dashboardAssetsDir();
  if (dir === undefined) {
    const reason =
      "the dashboard's files were not found: copy src/transport/dashboard/ to dist/src/transport/dashboard/";
    app.log.warn(reason);
    app.get(dashboardRoute, (_request, reply) =>
      reply.code(404).type("text/plain; charset=utf-8").send(reason),
    );
    return;
  }
  // The package's own entry points, so an install that hoists or nests it still resolves.
  const require = createRequire(import.meta.url);
  const uplotDist = dirname(require.resolve("uplot"));
  const assets = new Map<string, Asset>([
    [dashboardRoute, assetOf(join(dir, "index.html"), "text/html; charset=utf-8")],
    [
      `${dashboardRoute}/dashboard.js`,
      assetOf(join(dir, "dashboard.js"), "text/javascript; charset=utf-8"),
    ],
    [
      `${dashboardRoute}/dashboard.css`,
      assetOf(join(dir, "dashboard.css"), "text/css; charset=utf-8"),
    ],
    [
      `${dashboardRoute}/uplot.js`,
      assetOf(join(uplotDist, "uPlot.iife.min.js"), "text/javascript; charset=utf-8"),
    ],
    [
      `${dashboardRoute}/uplot.css`,
      assetOf(join(uplotDist, "uPlot.min.css"), "text/css; charset=utf-8"),
    ],
  ]);
  for (const [path, asset] of assets) {
    app.get(path, (request, reply) => {
      reply
        .header("content-security-policy", dashboardContentSecurityPolicy)
        .header("x-content-type-options", "nosniff")
        .header("referrer-policy", "no-referrer")
        // Revalidated on every load: file names carry no version, and a
        // 304 costs one round trip for a few kilobytes.
        .header("cache-control", "no-cache")
        .header("etag", asset.etag)
        .type(asset.contentType);
      if (matches(request.headers["if-none-match"], asset.etag)) return reply.code(304).send();
      return reply.send(asset.body);
    });
  }
}

/** Whether an If-None-Match header names the ETag (weak comparison, as RFC 9110 asks for GET). */
function matches(ifNoneMatch: string | undefined, etag: string): boolean {
  if (ifNoneMatch === undefined) return false;
  return ifNoneMatch
    .split(",")
    .map((tag) => tag.trim().replace(/^W\//, ""))
    .some((tag) => tag === etag || tag === "*");
}
