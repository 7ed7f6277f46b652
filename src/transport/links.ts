import type { FastifyInstance } from "fastify";
import { followLink, type LinkDeps, linkQrCode } from "../services/links.js";
import type { RateLimits } from "./rate-limit.js";

/** The share links' route (docs/links.md). */
export const linkRoute = "/r/:code";

/**
 * `GET` and `HEAD /r/{code}` (`?c=` the campaign, `?ch=` the channel): no
 * key (a friend follows it), limited per client address. A person is
 * redirected (302) to the landing page, a link preview gets a page of its
 * own; nothing is cached by the way, so every click reaches the service,
 * and no cookie is set.
 */
export function registerLinks(
  app: FastifyInstance,
  deps: LinkDeps & { readonly limit: RateLimits["followLink"] },
): void {
  app.route<{ Params: { code: string }; Querystring: Record<string, string | undefined> }>({
    method: ["GET", "HEAD"],
    url: linkRoute,
    // HEAD is answered by this handler (not Fastify's GET shadow), so it is counted apart.
    exposeHeadRoute: false,
    async handler(request, reply) {
      const limits = { responseHeaders: new Map<string, string>() };
      try {
        await deps.limit(limits, request.clientAddress);
      } finally {
        for (const [name, value] of limits.responseHeaders) reply.header(name, value);
      }
      const query = request.query;
      const answer = await followLink(deps, {
        code: request.params.code,
        campaignId: typeof query.c === "string" ? query.c : undefined,
        channel: typeof query.ch === "string" ? query.ch : undefined,
        address: request.clientAddress,
        userAgent: request.headers["user-agent"],
        head: request.method === "HEAD",
      });
      reply.header("cache-control", "no-store");
      reply.header("referrer-policy", "no-referrer");
      if (answer.kind === "redirect") return reply.redirect(answer.location, 302);
      return reply.type("text/html; charset=utf-8").send(answer.html);
    },
  });
  // The QR code of a customer's link (its `qr` channel): an image, cacheable.
  app.get<{ Params: { code: string }; Querystring: Record<string, string | undefined> }>(
    "/r/:code/qr.svg",
    async (request, reply) => {
      const limits = { responseHeaders: new Map<string, string>() };
      try {
        await deps.limit(limits, request.clientAddress);
      } finally {
        for (const [name, value] of limits.responseHeaders) reply.header(name, value);
      }
      const campaignId = request.query.c;
      const svg = await linkQrCode(deps, {
        code: request.params.code,
        campaignId: typeof campaignId === "string" ? campaignId : undefined,
      });
      if (svg === null) {
        return reply.code(404).type("text/plain; charset=utf-8").send("no such link\n");
      }
      reply.header("cache-control", "public, max-age=86400");
      return reply.type("image/svg+xml").send(svg);
    },
  );
}
