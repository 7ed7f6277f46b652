import { execFile } from "node:child_process";
import { connect as http2Connect } from "node:http2";
import { promisify } from "node:util";
import test from "ava";
import { CampaignsService } from "../../gen/referral/v1/campaigns_pb.js";
import { connectClient, http2Fetch, type Json, keys, rest, useServer } from "../helpers/server.js";

/**
 * What the parity matrix does not show about serving every protocol on
 * HTTP/1.1 and cleartext HTTP/2 (prior knowledge) on one port: the HTTP
 * endpoints answer alike to curl on both, a refusal over HTTP/2 has the error
 * body, an idempotency key spans both, the request log reads the same, and
 * HTTP/1.1's request timeout holds on an HTTP/2 stream.
 */

const run = promisify(execFile);
const metricsToken = "metrics-token-for-http-versions";
const lines: string[] = [];
const server = useServer({
  env: {
    LOG_LEVEL: "info",
    METRICS_TOKEN: metricsToken,
    HTTP_HEADERS_TIMEOUT: "1s",
    HTTP_REQUEST_TIMEOUT: "1s",
  },
  logTo: { write: (line) => lines.push(line) },
});

interface CurlAnswer {
  readonly httpVersion: string;
  readonly status: number;
  readonly contentType: string;
  readonly body: string;
}

/** One request with curl, over HTTP/1.1 or HTTP/2 with prior knowledge. */
async function curl(
  version: "1.1" | "2",
  path: string,
  options: { headers?: Record<string, string>; method?: string; body?: string } = {},
): Promise<CurlAnswer> {
  const args = [
    "-s",
    version === "2" ? "--http2-prior-knowledge" : "--http1.1",
    "-X",
    options.method ?? "GET",
    "-o",
    "-",
    "-w",
    "\n%{http_version} %{http_code} %{content_type}",
  ];
  for (const [name, value] of Object.entries(options.headers ?? {})) {
    args.push("-H", `${name}: ${value}`);
  }
  if (options.body !== undefined) args.push("--data-binary", options.body);
  const { stdout } = await run("curl", [...args, `${server.baseUrl}${path}`]);
  const end = stdout.lastIndexOf("\n");
  const [httpVersion = "", status = "0", ...type] = stdout.slice(end + 1).split(" ");
  return {
    httpVersion,
    status: Number(status),
    contentType: type.join(" "),
    body: stdout.slice(0, end),
  };
}

test.serial(
  "curl gets the same health, readiness, API, metrics, OpenAPI and docs answers on HTTP/1.1 and HTTP/2",
  async (t) => {
    const bearer = { authorization: keys.public };
    const cases: Array<[string, Record<string, string>, boolean]> = [
      ["/healthz", {}, true],
      ["/readyz", {}, true],
      ["/campaigns", bearer, true],
      ["/customers/identify", bearer, true],
      ["/nowhere", {}, true],
      ["/openapi.json", {}, true],
      ["/docs", {}, true],
      // Counters move between the two scrapes: the status and type are compared.
      ["/metrics", { authorization: `Bearer ${metricsToken}` }, false],
    ];
    for (const [path, headers, sameBody] of cases) {
      const overHttp1 = await curl("1.1", path, { headers });
      const overHttp2 = await curl("2", path, { headers });
      t.is(overHttp1.httpVersion, "1.1", path);
      t.is(overHttp2.httpVersion, "2", path);
      t.is(overHttp2.status, overHttp1.status, path);
      t.is(overHttp2.contentType, overHttp1.contentType, path);
      if (sameBody) t.is(overHttp2.body, overHttp1.body, path);
      t.true(overHttp2.status < 500, `${path}: ${overHttp2.status}`);
    }
    const metrics = await curl("2", "/metrics", {
      headers: { authorization: `Bearer ${metricsToken}` },
    });
    t.is(metrics.status, 200);
    t.regex(metrics.body, /^rpc_calls_total\{/m, "the calls are counted whatever the version");
  },
);

test.serial("a refusal over HTTP/2 carries the error body, as over HTTP/1.1", async (t) => {
  const wrongType = {
    method: "POST",
    headers: { authorization: keys.public, "content-type": "text/plain" },
    body: "hello",
  };
  for (const path of ["/customers/identify", `/${CampaignsService.typeName}/ListCampaigns`]) {
    const overHttp1 = await curl("1.1", path, wrongType);
    const overHttp2 = await curl("2", path, wrongType);
    t.is(overHttp2.status, 415, path);
    t.is(overHttp2.body, overHttp1.body, path);
    const error = JSON.parse(overHttp2.body) as Json;
    t.truthy(error.code, path);
    t.truthy(error.message, path);
  }
});

test.serial("an idempotency key given over HTTP/1.1 replays over HTTP/2", async (t) => {
  const headers = { "idempotency-key": "across-http-versions" };
  const body = { externalUserId: "idempotent-across-versions", name: "Ada" };
  const first = await rest(server, "POST", "/customers/identify", {
    key: keys.public,
    body,
    headers,
  });
  t.is(first.status, 201);
  const again = await rest(server, "POST", "/customers/identify", {
    key: keys.public,
    body,
    headers,
    httpVersion: "2",
  });
  t.is(again.status, 201);
  t.is(again.headers.get("idempotent-replayed"), "true");
  t.deepEqual(again.body, first.body);
});

test.serial("the request log reads the same whatever the HTTP version", async (t) => {
  const logged = () =>
    lines
      .map((line) => JSON.parse(line) as Json)
      .filter((entry) => entry.msg === "call" && entry.rpc.endsWith("ListCampaigns"));
  lines.length = 0;
  await rest(server, "GET", "/campaigns", { key: keys.public });
  await rest(server, "GET", "/campaigns", { key: keys.public, httpVersion: "2" });
  await connectClient(server, CampaignsService, { key: keys.public }).listCampaigns({});
  await connectClient(server, CampaignsService, {
    key: keys.public,
    httpVersion: "2",
  }).listCampaigns({});
  // Outcomes are logged just after their responses are written.
  await new Promise((resolve) => setImmediate(resolve));
  const entries = logged().map(({ protocol, rpc, code, keyId, client }) => ({
    protocol,
    rpc,
    code,
    keyId,
    client,
  }));
  t.is(entries.length, 4);
  t.deepEqual(entries[1], entries[0], "REST over HTTP/2 logs as REST over HTTP/1.1");
  t.deepEqual(entries[3], entries[2], "Connect over HTTP/2 logs as over HTTP/1.1");
  t.is(entries[0]?.client, "127.0.0.1");
});

test.serial(
  "a request body that does not arrive in time over HTTP/2 is 408 with the error body",
  async (t) => {
    const session = http2Connect(server.baseUrl);
    try {
      const stream = session.request({
        ":method": "POST",
        ":path": "/customers/identify",
        authorization: keys.public,
        "content-type": "application/json",
      });
      // The body is begun and never finished.
      stream.write('{"externalUserId":');
      const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
        let status = 0;
        let body = "";
        stream.on("response", (headers) => {
          status = Number(headers[":status"]);
        });
        stream.setEncoding("utf8");
        stream.on("data", (chunk: string) => {
          body += chunk;
        });
        stream.on("close", () => resolve({ status, body }));
        stream.on("error", reject);
      });
      t.is(answer.status, 408);
      t.is((JSON.parse(answer.body) as Json).code, "deadline_exceeded");
      // The session is still good for the next request.
      const next = await http2Fetch(server, "GET", "/healthz", {});
      t.is(next.status, 200);
    } finally {
      session.close();
    }
  },
);

test.serial("buf curl calls Connect over HTTP/2 with prior knowledge", async (t) => {
  const bufPath = new URL("../../node_modules/.bin/buf", import.meta.url).pathname;
  const { stdout } = await run(bufPath, [
    "curl",
    "--http2-prior-knowledge",
    "--protocol",
    "connect",
    "--schema",
    new URL("../../proto", import.meta.url).pathname,
    "-H",
    `authorization: ${keys.public}`,
    "-d",
    "{}",
    `${server.baseUrl}/${CampaignsService.typeName}/ListCampaigns`,
  ]);
  const viaRest = await rest(server, "GET", "/campaigns", { key: keys.public });
  const campaigns = (JSON.parse(stdout) as Json).campaigns as Json[];
  t.deepEqual(
    campaigns.map((campaign) => campaign.id),
    (viaRest.body as Json[]).map((campaign) => campaign.id),
  );
});
