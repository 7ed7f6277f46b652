import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import { Webhook } from "standardwebhooks";
import { describeAttemptFailure, sendWebhook } from "../../src/delivery/sender.js";
import { reservedPort } from "../helpers/ports.js";
import { type Receiver, startReceiver } from "../helpers/receiver.js";
import { deliveriesOf, waitForRelay } from "../helpers/relay.js";
import { type Json, keys, rest, startServer, type TestServer } from "../helpers/server.js";
import { eventually } from "../helpers/wait.js";

/**
 * What must survive: a restart in the middle of a retry, an endpoint that
 * keeps failing (disabled, and saying so), and addresses that must never be
 * called. Each test starts its own service.
 */

let receiver: Receiver;
test.before(async () => {
  receiver = await startReceiver();
});
test.after.always(async () => {
  await receiver?.close();
});

const at = (path: string) => receiver.received.filter((request) => request.path === path);

async function createEndpoint(
  server: TestServer,
  path: string,
  fields: Record<string, unknown> = {},
) {
  const created = await rest(server, "POST", "/webhooks", {
    key: keys.secret,
    body: {
      url: `${receiver.url}${path}`,
      environment: "test",
      eventTypes: ["customer.created"],
      ...fields,
    },
  });
  if (created.status !== 201) throw new Error(JSON.stringify(created.body));
  return created.body as { webhook: Json; secret: string };
}

const identify = (server: TestServer, externalUserId: string) =>
  rest(server, "POST", "/customers/identify", {
    key: keys.public,
    body: { externalUserId, name: externalUserId, environment: "test" },
  });

test.serial("a pending retry survives a restart and the event still arrives", async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), "referrals-restart-"));
  const env = { WEBHOOK_ALLOW_PRIVATE: "true", WEBHOOK_RETRY_SCHEDULE: "0ms,1500ms" };
  let up = true;
  receiver.respond = (request) => (request.path === "/restart" && up ? 500 : 200);
  let second: TestServer | undefined;
  try {
    const first = await startServer({ dataDir, env });
    const { secret } = await createEndpoint(first, "/restart");
    await identify(first, "wh-restart");
    await receiver.waitFor(() => at("/restart").length === 1);
    await first.stop({ keepData: true });
    up = false;
    second = await startServer({ dataDir, env });
    await receiver.waitFor(() => at("/restart").length === 2);
    const [failed, delivered] = at("/restart");
    t.is(
      delivered?.headers["webhook-id"],
      failed?.headers["webhook-id"],
      "the same event, retried",
    );
    t.notThrows(() =>
      new Webhook(secret).verify(
        delivered?.body ?? "",
        delivered?.headers as Record<string, string>,
      ),
    );
  } finally {
    receiver.respond = () => 200;
    await second?.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test.serial("an endpoint failing continuously is disabled, and its health says why", async (t) => {
  const server = await startServer({
    env: {
      WEBHOOK_ALLOW_PRIVATE: "true",
      WEBHOOK_RETRY_SCHEDULE: "0ms,150ms,150ms,150ms,150ms,150ms",
      WEBHOOK_DISABLE_AFTER: "400ms",
    },
  });
  receiver.respond = (request) => (request.path === "/failing" ? 500 : 200);
  try {
    const { webhook } = await createEndpoint(server, "/failing");
    await identify(server, "wh-failing");
    const endpoint: Json = await eventually("the endpoint disabled", async () => {
      const listed = await rest(server, "GET", "/webhooks", { key: keys.secret });
      const found = listed.body.find((e: Json) => e.id === webhook.id);
      return found?.enabled === false ? found : undefined;
    });
    t.false(endpoint.enabled);
    t.truthy(endpoint.health.disabledAt);
    t.regex(endpoint.health.disabledReason, /^every delivery failed since /);
    // At least the first failure and the one past the limit (more when the machine is idle).
    t.true(endpoint.health.consecutiveFailures >= 2);

    const attemptsWhenDisabled = at("/failing").length;
    const [firstDelivery, ...others] = await deliveriesOf(server, webhook.id);
    t.is(others.length, 0, "one event queued while the endpoint was enabled");
    const later = await identify(server, "wh-failing-later");
    t.is(later.status, 201);
    // From here on, every delivery of the later customer.created event is queued.
    await waitForRelay(server, "customers", later.body.id);
    t.deepEqual(
      (await deliveriesOf(server, webhook.id)).map((delivery) => delivery._id),
      [firstDelivery?._id],
      "nothing queued for a disabled endpoint",
    );
    t.is(at("/failing").length, attemptsWhenDisabled, "a disabled endpoint receives nothing");

    const enabled = await rest(server, "PATCH", `/webhooks/${webhook.id}`, {
      key: keys.secret,
      body: { enabled: true },
    });
    t.like(enabled.body, {
      enabled: true,
      health: { disabledAt: null, disabledReason: null, consecutiveFailures: 0 },
    });
  } finally {
    receiver.respond = () => 200;
    await server.stop();
  }
});

test.serial("a resolver that fails at creation is UNAVAILABLE, not a refused url", async (t) => {
  const server = await startServer();
  // The built-in resolver, failing for one host as a DNS server that does not
  // answer would (ESM bindings of built-ins follow their exports once synced).
  const dns = (await import("node:dns")).promises;
  const { syncBuiltinESMExports } = await import("node:module");
  const real = dns.lookup;
  dns.lookup = (async (host: string, options: unknown) => {
    if (host === "flaky.example.com") {
      throw Object.assign(new Error("getaddrinfo EAI_AGAIN flaky.example.com"), {
        code: "EAI_AGAIN",
      });
    }
    return real(host, options as never);
  }) as typeof dns.lookup;
  syncBuiltinESMExports();
  try {
    const response = await rest(server, "POST", "/webhooks", {
      key: keys.secret,
      headers: { "idempotency-key": "flaky-1" },
      body: { url: "https://flaky.example.com/in", environment: "test" },
    });
    t.is(response.status, 503);
    t.is(response.body.code, "unavailable");
    t.regex(response.body.message, /could not be resolved now \(EAI_AGAIN\): retry later/);
    const listed = await rest(server, "GET", "/webhooks", { key: keys.secret });
    t.deepEqual(listed.body, [], "nothing stored");
  } finally {
    dns.lookup = real;
    syncBuiltinESMExports();
    await server.stop();
  }
});

test.serial("refused URLs are refused at creation, naming the url", async (t) => {
  const server = await startServer();
  try {
    const refused = async (url: string, environment?: string) => {
      const response = await rest(server, "POST", "/webhooks", {
        key: keys.secret,
        body: { url, ...(environment ? { environment } : {}) },
      });
      t.is(response.status, 400, url);
      t.is(response.body.details[0]?.field, "url", url);
      return response.body.message as string;
    };
    t.regex(await refused("http://hooks.example.com/in", "production"), /https/);
    t.regex(
      await refused("http://hooks.example.com/in"),
      /https/,
      "both environments include production",
    );
    for (const url of [
      "http://127.0.0.1:9/in",
      "http://10.1.2.3/in",
      "http://192.168.0.10/in",
      "http://169.254.169.254/latest/meta-data",
      "http://[::1]:9/in",
      "http://[::ffff:127.0.0.1]/in",
      "http://localhost:9/in",
    ]) {
      t.regex(await refused(url, "test"), /private, loopback or link-local/, url);
    }
    t.regex(await refused("https://127.0.0.1/in", "production"), /private/);
    t.regex(await refused("ftp://hooks.example.com/in", "test"), /http/);
    t.regex(await refused("not a url", "test"), /absolute URL/);
    t.regex(await refused("https://user:pw@hooks.example.com/in"), /credentials/);
    t.deepEqual(
      (await rest(server, "GET", "/webhooks", { key: keys.secret })).body,
      [],
      "nothing stored",
    );
  } finally {
    await server.stop();
  }
});

test.serial("at delivery time, a host resolving to a private address is refused", async (t) => {
  const response = await sendWebhook({
    url: `${receiver.url.replace("127.0.0.1", "localhost")}/resolved`,
    headers: {},
    body: "{}",
    timeoutMs: 2000,
    allowPrivate: false,
  });
  t.is(response.statusCode, null);
  t.regex(response.error ?? "", /private, loopback or link-local/);
  t.is(at("/resolved").length, 0);
  const allowed = await sendWebhook({
    url: `${receiver.url.replace("127.0.0.1", "localhost")}/resolved`,
    headers: {},
    body: "{}",
    timeoutMs: 2000,
    allowPrivate: true,
  });
  t.is(allowed.statusCode, 200, "the same request is sent when private addresses are allowed");
});

test.serial(
  "a failed attempt says why in plain words, not the resolver's or socket's",
  async (t) => {
    // Nothing listens on it: the connection is refused.
    const port = await reservedPort();
    const response = await sendWebhook({
      url: `http://127.0.0.1:${port}/in`,
      headers: {},
      body: "{}",
      timeoutMs: 2000,
      allowPrivate: true,
    });
    t.is(response.statusCode, null);
    t.is(response.error, "the endpoint refused the connection (ECONNREFUSED)");
    // The resolver's failures, made up: CI has no DNS server to fail on cue.
    const failure = (code: string, message: string) =>
      describeAttemptFailure(Object.assign(new Error(message), { code }));
    t.is(
      failure("ENOTFOUND", "getaddrinfo ENOTFOUND hooks.example.com"),
      "the endpoint's host does not resolve (ENOTFOUND)",
    );
    t.is(
      failure("EAI_AGAIN", "getaddrinfo EAI_AGAIN hooks.example.com"),
      "the endpoint's host could not be resolved for now (EAI_AGAIN)",
    );
    t.is(
      failure("CERT_HAS_EXPIRED", "certificate has expired"),
      "the endpoint's TLS certificate was not accepted (CERT_HAS_EXPIRED)",
    );
    t.is(failure("ESOMETHING", "something odd"), "the request failed (ESOMETHING)");
  },
);

test.serial("signing secrets are encrypted at rest with a key file in DATA_DIR", async (t) => {
  const server = await startServer({ env: { WEBHOOK_ALLOW_PRIVATE: "true" } });
  try {
    const { secret } = await createEndpoint(server, "/secret-at-rest");
    const key = readFileSync(join(server.dataDir, "webhook-secret.key"), "utf8").trim();
    t.is(Buffer.from(key, "base64").length, 32);
    for (const file of readdirSync(server.dataDir)) {
      const content = readFileSync(join(server.dataDir, file), "utf8");
      t.false(content.includes(secret.slice("whsec_".length)), file);
    }
  } finally {
    await server.stop();
  }
});

test.serial(
  "an attempt ends at its timeout, when the response stops half-way, or when the service stops; a redirect is not followed",
  async (t) => {
    const { createServer } = await import("node:http");
    const endpoint = createServer((request, response) => {
      request.resume();
      if (request.url === "/silent") return;
      if (request.url === "/half") {
        response.writeHead(200, { "content-length": "100" });
        response.write("only part");
        setTimeout(() => response.socket?.destroy(), 20);
        return;
      }
      if (request.url === "/moved") {
        response.writeHead(302, { location: `${receiver.url}/moved-here` }).end();
        return;
      }
      response.writeHead(204).end();
    });
    await new Promise<void>((resolve) => endpoint.listen(0, "127.0.0.1", resolve));
    const { port } = endpoint.address() as { port: number };
    const send = (path: string, fields: { timeoutMs?: number; signal?: AbortSignal } = {}) =>
      sendWebhook({
        url: `http://127.0.0.1:${port}${path}`,
        headers: { "content-type": "application/json" },
        body: "{}",
        timeoutMs: fields.timeoutMs ?? 2000,
        allowPrivate: true,
        signal: fields.signal,
      });
    try {
      const silent = await send("/silent", { timeoutMs: 300 });
      t.is(silent.statusCode, null);
      t.is(silent.error, "timed out after 300 ms");
      t.true(silent.durationMs >= 290 && silent.durationMs < 2000, `${silent.durationMs} ms`);

      const half = await send("/half");
      t.is(half.statusCode, null);
      t.is(half.error, "the connection closed before the response ended");

      const moved = await send("/moved");
      t.is(moved.statusCode, 302);
      t.is(moved.error, "HTTP 302");
      t.is(at("/moved-here").length, 0, "the redirect was not followed");

      const stopping = new AbortController();
      const cut = send("/silent", { signal: stopping.signal });
      setTimeout(() => stopping.abort(), 50);
      const stopped = await cut;
      t.is(stopped.statusCode, null);
      t.is(stopped.error, "the attempt was cut short: the service was stopping");

      const answered = await send("/ok");
      t.is(answered.statusCode, 204);
      t.is(answered.error, null);
    } finally {
      endpoint.closeAllConnections();
      await new Promise((resolve) => endpoint.close(resolve));
    }
  },
);
