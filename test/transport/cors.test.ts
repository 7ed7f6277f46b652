import { cors as connectCors } from "@connectrpc/connect";
import test from "ava";
import { loadConfig } from "../../src/config.js";
import { keys, startServer, type TestServer, useServer } from "../helpers/server.js";

const server = useServer();
const pageOrigin = "https://app.example.com";

/** REST and Connect paths of one public-key RPC and one secret-key RPC. */
const paths = {
  restIdentify: "/customers/identify",
  connectIdentify: "/referral.v1.CustomersService/IdentifyCustomer",
  restCustomers: "/customers",
};

/** A preflight as a browser sends it before a call with these headers. */
function preflight(target: TestServer, path: string, origin: string, method = "POST") {
  return fetch(`${target.baseUrl}${path}`, {
    method: "OPTIONS",
    headers: {
      origin,
      "access-control-request-method": method,
      "access-control-request-headers": "authorization,content-type,idempotency-key,x-request-id",
    },
  });
}

/** A header's comma-separated list, lowercased. */
function listOf(headers: Headers, name: string): string[] {
  return (headers.get(name) ?? "")
    .split(",")
    .map((item) => item.trim().toLowerCase())
    .filter((item) => item !== "");
}

/** Response headers every page may read without their being exposed (Fetch's safelist), and CORS's own. */
const readableAnyway = new Set([
  "cache-control",
  "content-language",
  "content-length",
  "content-type",
  "expires",
  "last-modified",
  "pragma",
  // Transport headers no script reads.
  "connection",
  "keep-alive",
  "date",
  "transfer-encoding",
  "vary",
]);

for (const path of [paths.restIdentify, paths.connectIdentify, paths.restCustomers]) {
  test(`preflight of ${path}: answered for any origin by default, no key needed`, async (t) => {
    const response = await preflight(
      server,
      path,
      pageOrigin,
      path === "/customers" ? "GET" : "POST",
    );
    t.is(response.status, 204);
    t.is(response.headers.get("access-control-allow-origin"), "*");
    // Never credentials, so never with the wildcard.
    t.is(response.headers.get("access-control-allow-credentials"), null);
    const methods = listOf(response.headers, "access-control-allow-methods");
    for (const method of ["get", "post", "patch", "delete"]) t.true(methods.includes(method));
    const allowed = listOf(response.headers, "access-control-allow-headers");
    for (const header of [
      ...connectCors.allowedHeaders.map((name) => name.toLowerCase()),
      "authorization",
      "idempotency-key",
      "x-request-id",
    ]) {
      t.true(allowed.includes(header), `${header} is not allowed`);
    }
    t.is(response.headers.get("access-control-max-age"), "7200");
  });
}

test("preflights are not counted by any rate limit", async (t) => {
  const limited = await startServer({
    env: { RATE_LIMIT_UNAUTHENTICATED: "1/1m", RATE_LIMIT_PUBLIC: "1/1m" },
  });
  try {
    for (let attempt = 0; attempt < 5; attempt++) {
      const response = await preflight(limited, paths.restIdentify, pageOrigin);
      t.is(response.status, 204);
    }
    // The one call the public key is allowed is still there.
    const call = await fetch(`${limited.baseUrl}${paths.restIdentify}`, {
      method: "POST",
      headers: {
        origin: pageOrigin,
        authorization: keys.public,
        "content-type": "application/json",
      },
      body: JSON.stringify({ externalUserId: "cors-1", name: "Ada" }),
    });
    t.is(call.status, 201);
  } finally {
    await limited.stop();
  }
});

test("errors carry the CORS headers too, so a page can read them", async (t) => {
  const cases: Array<[string, RequestInit, number]> = [
    [paths.restIdentify, { method: "POST", body: "{}" }, 401],
    [paths.connectIdentify, { method: "POST", body: "{}" }, 401],
    [paths.restCustomers, { method: "GET", headers: { authorization: keys.public } }, 403],
    ["/no-such-path", { method: "GET" }, 404],
  ];
  for (const [path, init, status] of cases) {
    const response = await fetch(`${server.baseUrl}${path}`, {
      ...init,
      headers: { origin: pageOrigin, "content-type": "application/json", ...init.headers },
    });
    t.is(response.status, status, path);
    t.is(response.headers.get("access-control-allow-origin"), "*", path);
    t.true(listOf(response.headers, "access-control-expose-headers").includes("x-request-id"));
  }
});

test("a request without an Origin (not from a browser) gets no CORS headers", async (t) => {
  const response = await fetch(`${server.baseUrl}/campaigns`, {
    headers: { authorization: keys.public },
  });
  t.is(response.status, 200);
  const corsHeaders = [...response.headers.keys()].filter((name) =>
    name.startsWith("access-control-"),
  );
  t.deepEqual(corsHeaders, []);
  // A cache must not hand this response to a browser.
  t.true(listOf(response.headers, "vary").includes("origin"));
});

test("every header the service adds to a response is exposed to pages", async (t) => {
  const limited = await startServer({ env: { RATE_LIMIT_PUBLIC: "2/1m" } });
  try {
    const send = () =>
      fetch(`${limited.baseUrl}${paths.restIdentify}`, {
        method: "POST",
        headers: {
          origin: pageOrigin,
          authorization: keys.public,
          "content-type": "application/json",
          "idempotency-key": "cors-exposed-1",
        },
        body: JSON.stringify({ externalUserId: "cors-2", name: "Ada" }),
      });
    // A first call, its replay (Idempotent-Replayed) and a refused third (Retry-After).
    const responses = [await send(), await send(), await send()];
    t.deepEqual(
      responses.map((response) => response.status),
      [201, 201, 429],
    );
    const connectCall = await fetch(`${limited.baseUrl}${paths.connectIdentify}`, {
      method: "POST",
      headers: { origin: pageOrigin, "content-type": "application/json" },
      body: "{}",
    });
    // An export names its file (Content-Disposition).
    const exported = await fetch(`${limited.baseUrl}/referrals/export`, {
      headers: { origin: pageOrigin, authorization: keys.secret },
    });
    await exported.text();
    const seen = new Set<string>();
    for (const response of [...responses, connectCall, exported]) {
      const exposed = listOf(response.headers, "access-control-expose-headers");
      for (const [name] of response.headers) {
        if (readableAnyway.has(name) || name.startsWith("access-control-")) continue;
        seen.add(name);
        t.true(exposed.includes(name), `${name} is sent but not exposed`);
      }
    }
    for (const name of [
      "idempotent-replayed",
      "retry-after",
      "ratelimit",
      "x-request-id",
      "content-disposition",
    ]) {
      t.true(seen.has(name), `no response carried ${name}`);
    }
    const exposed = listOf(connectCall.headers, "access-control-expose-headers");
    for (const name of connectCors.exposedHeaders) t.true(exposed.includes(name.toLowerCase()));
  } finally {
    await limited.stop();
  }
});

test("with a list of origins, a listed origin is echoed and another gets no Access-Control-Allow-Origin", async (t) => {
  const listing = await startServer({
    env: { CORS_ORIGINS: `${pageOrigin}, http://localhost:5173` },
  });
  try {
    for (const path of [paths.restIdentify, paths.connectIdentify]) {
      const allowed = await preflight(listing, path, "http://localhost:5173");
      t.is(allowed.status, 204);
      t.is(allowed.headers.get("access-control-allow-origin"), "http://localhost:5173");
      t.true(listOf(allowed.headers, "vary").includes("origin"));
      t.is(allowed.headers.get("access-control-allow-credentials"), null);

      const refused = await preflight(listing, path, "https://evil.example.com");
      t.is(refused.headers.get("access-control-allow-origin"), null);
      // The listed origin on another port is another origin.
      const lookalike = await preflight(listing, path, "https://app.example.com:8443");
      t.is(lookalike.headers.get("access-control-allow-origin"), null);

      const call = await fetch(`${listing.baseUrl}${path}`, {
        method: "POST",
        headers: { origin: "https://evil.example.com", "content-type": "application/json" },
        body: "{}",
      });
      t.is(call.headers.get("access-control-allow-origin"), null);
      t.true(listOf(call.headers, "vary").includes("origin"));
    }
  } finally {
    await listing.stop();
  }
});

test("CORS_ORIGINS=off: no CORS headers, and a preflight is not answered", async (t) => {
  const closed = await startServer({ env: { CORS_ORIGINS: "off" } });
  try {
    const response = await preflight(closed, paths.restIdentify, pageOrigin);
    t.is(response.status, 405);
    t.is(response.headers.get("access-control-allow-origin"), null);
  } finally {
    await closed.stop();
  }
});

test("CORS_ORIGINS is read and checked at start", (t) => {
  t.is(loadConfig({}).corsOrigins, "*");
  t.is(loadConfig({ CORS_ORIGINS: "off" }).corsOrigins, "off");
  t.deepEqual(
    loadConfig({ CORS_ORIGINS: " https://a.example , http://localhost:5173" }).corsOrigins,
    ["https://a.example", "http://localhost:5173"],
  );
  for (const wrong of [
    "https://a.example/",
    "https://a.example/app",
    "a.example",
    "*,https://a.example",
    "https://a.example,",
    "HTTPS://A.example",
    "https://a.example:443",
  ]) {
    const error = t.throws(() => loadConfig({ CORS_ORIGINS: wrong }), undefined, wrong);
    t.regex(error?.message ?? "", /^CORS_ORIGINS must be/, wrong);
    t.false(error?.message.includes("\n"), wrong);
  }
});
