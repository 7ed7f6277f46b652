import { get as httpGet } from "node:http";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { ConnectError, createClient, type Interceptor, type Transport } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import * as grpc from "@grpc/grpc-js";
import test from "ava";
import {
  CampaignsService,
  type ListCampaignsRequest,
  ListCampaignsRequestSchema,
  ListCampaignsResponseSchema,
} from "../../gen/referral/v1/campaigns_pb.js";
import { loadConfig } from "../../src/config.js";
import { addressKey } from "../../src/transport/rate-limit.js";
import { type WireProtocol, wireOf, wireProtocols } from "../helpers/callers.js";
import { dropDatabase, engineNames, freshDatabaseName } from "../helpers/engines.js";
import {
  closeGrpcClient,
  http2SessionOf,
  keys,
  rest,
  startServer,
  type TestServer,
  useServer,
} from "../helpers/server.js";

// Rate limits per API key and per client address, on every protocol: the
// refusal (429 / RESOURCE_EXHAUSTED), the IETF RateLimit headers on every
// answer, Retry-After, and one limit across instances on one MongoDB.

const metricsToken = "metrics-token-for-rate-limit-tests";

/** What a ListCampaigns call answered: its code word and its response headers (gRPC: metadata). */
interface Answer {
  readonly code: string;
  /** The REST status; undefined on the other protocols. */
  readonly status?: number;
  header(name: string): string | null;
}

/** ListCampaigns over a protocol, keeping the response headers whatever the outcome. */
async function listCampaigns(
  server: TestServer,
  protocol: WireProtocol,
  key: string | undefined,
): Promise<Answer> {
  const { base, httpVersion } = wireOf(protocol);
  if (base === "rest") {
    const response = await rest(server, "GET", "/campaigns", { key, httpVersion });
    return {
      code: response.status === 200 ? "ok" : response.body.code,
      status: response.status,
      header: (name) => response.headers.get(name),
    };
  }
  if (base === "grpc") return grpcListCampaigns(server, key);
  const options = {
    baseUrl: server.baseUrl,
    ...(httpVersion === "2"
      ? { httpVersion: "2" as const, sessionManager: http2SessionOf(server) }
      : { httpVersion: "1.1" as const }),
    useBinaryFormat: base !== "connect",
    interceptors: key === undefined ? [] : [withKey(key)],
  };
  const transport: Transport =
    base === "grpc-web" ? createGrpcWebTransport(options) : createConnectTransport(options);
  let headers = new Headers();
  try {
    await createClient(CampaignsService, transport).listCampaigns(
      {},
      {
        onHeader: (received) => {
          headers = received;
        },
      },
    );
    return { code: "ok", header: (name) => headers.get(name) };
  } catch (error) {
    const connectError = ConnectError.from(error);
    return {
      code: codeToString(connectError.code),
      header: (name) => connectError.metadata.get(name),
    };
  }
}

function withKey(key: string): Interceptor {
  return (next) => (request) => {
    request.header.set("authorization", key);
    return next(request);
  };
}

function grpcListCampaigns(server: TestServer, key: string | undefined): Promise<Answer> {
  const client = new grpc.Client(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure());
  const metadata = new grpc.Metadata();
  if (key !== undefined) metadata.set("authorization", key);
  return new Promise((resolve) => {
    let received = new grpc.Metadata();
    const call = client.makeUnaryRequest(
      `/${CampaignsService.typeName}/ListCampaigns`,
      (value: ListCampaignsRequest) => Buffer.from(toBinary(ListCampaignsRequestSchema, value)),
      (bytes: Buffer) => fromBinary(ListCampaignsResponseSchema, bytes),
      create(ListCampaignsRequestSchema),
      metadata,
      (error) => {
        client.close();
        const from = error ? error.metadata : received;
        resolve({
          code: error ? codeToString(error.code as number) : "ok",
          header: (name) => {
            const value = from.get(name)[0];
            return value === undefined ? null : String(value);
          },
        });
      },
    );
    call.on("metadata", (sent) => {
      received = sent;
    });
  });
}

/** The parts of a `RateLimit` header item: `"public";r=2;t=60`. */
function rateLimitOf(answer: Answer): { policy: string; remaining: number; reset: number } {
  const value = answer.header("ratelimit") ?? "";
  const match = /^"([a-z]+)";r=(\d+);t=(\d+)$/.exec(value);
  if (!match) throw new Error(`not one RateLimit item: "${value}"`);
  return { policy: match[1] as string, remaining: Number(match[2]), reset: Number(match[3]) };
}

/** A new application through the admin API: its own keys, so its own budgets. */
async function newApplication(
  server: TestServer,
): Promise<{ publicKey: string; secretKey: string }> {
  const created = await rest(server, "POST", "/admin/applications", {
    key: keys.admin,
    body: { name: `Limits ${Math.random()}` },
  });
  if (created.status !== 201) throw new Error(`could not create an application: ${created.status}`);
  return { publicKey: created.body.publicKey, secretKey: created.body.secretKey };
}

async function rateLimitedCount(server: TestServer, limit: string): Promise<number> {
  // From another address than the calls, as a Prometheus server's scrape
  // would come: the calls' address may be over its failure limit.
  const text = await scrape(server, `Bearer ${metricsToken}`, "127.0.0.2");
  const match = new RegExp(`rpc_rate_limited_total\\{limit="${limit}"\\} (\\d+)`).exec(text.body);
  return match ? Number(match[1]) : 0;
}

/** GET /metrics from `localAddress`: status, Retry-After and body. */
function scrape(
  server: TestServer,
  authorization: string,
  localAddress = "127.0.0.1",
): Promise<{
  status: number;
  retryAfter: string | undefined;
  rateLimit: string | undefined;
  body: string;
}> {
  return new Promise((resolve, reject) => {
    const request = httpGet(
      {
        host: "127.0.0.1",
        port: server.port,
        path: "/metrics",
        localAddress,
        headers: { authorization },
      },
      (response) => {
        let body = "";
        response.setEncoding("utf8");
        response.on("data", (chunk: string) => {
          body += chunk;
        });
        response.on("end", () =>
          resolve({
            status: response.statusCode ?? 0,
            retryAfter: response.headers["retry-after"],
            rateLimit: response.headers.ratelimit as string | undefined,
            body,
          }),
        );
      },
    );
    request.on("error", reject);
  });
}

const keyLimited = useServer({
  env: {
    RATE_LIMIT_PUBLIC: "3/1m",
    RATE_LIMIT_SECRET: "5/1m",
    RATE_LIMIT_ADMIN: "off",
    RATE_LIMIT_UNAUTHENTICATED: "off",
    METRICS_TOKEN: metricsToken,
  },
});

// Serial: both count refusals on the same server.
test.serial(
  "a burst over a key's limit is refused on every protocol, the headers counting down",
  async (t) => {
    const refusedBefore = await rateLimitedCount(keyLimited, "public");
    for (const protocol of wireProtocols) {
      const { publicKey } = await newApplication(keyLimited);
      const answers: Answer[] = [];
      for (let i = 0; i < 5; i += 1)
        answers.push(await listCampaigns(keyLimited, protocol, publicKey));
      t.deepEqual(
        answers.map((answer) => answer.code),
        ["ok", "ok", "ok", "resource_exhausted", "resource_exhausted"],
        protocol,
      );
      if (protocol === "rest") {
        t.deepEqual(
          answers.map((answer) => answer.status),
          [200, 200, 200, 429, 429],
        );
      }
      for (const answer of answers) {
        t.is(answer.header("ratelimit-policy"), '"public";q=3;w=60', `${protocol}: every answer`);
      }
      const limits = answers.map(rateLimitOf);
      t.deepEqual(
        limits.map((limit) => limit.remaining),
        [2, 1, 0, 0, 0],
        `${protocol}: the calls left count down`,
      );
      t.true(
        limits.every(
          (limit) => limit.policy === "public" && limit.reset >= 58 && limit.reset <= 60,
        ),
      );
      for (const answer of answers.slice(0, 3)) t.is(answer.header("retry-after"), null);
      for (const [index, answer] of answers.slice(3).entries()) {
        t.is(
          answer.header("retry-after"),
          String(limits[3 + index]?.reset),
          `${protocol}: Retry-After is the seconds until the window ends`,
        );
      }
    }
    t.is(await rateLimitedCount(keyLimited, "public"), refusedBefore + 2 * wireProtocols.length);
  },
);

test.serial("each key has its own budget, with its kind's limit", async (t) => {
  const first = await newApplication(keyLimited);
  const second = await newApplication(keyLimited);
  for (let i = 0; i < 3; i += 1) await listCampaigns(keyLimited, "rest", first.publicKey);
  t.is((await listCampaigns(keyLimited, "rest", first.publicKey)).status, 429);

  const otherKey = await listCampaigns(keyLimited, "rest", second.publicKey);
  t.is(otherKey.status, 200, "another public key is not counted with it");
  t.is(rateLimitOf(otherKey).remaining, 2);

  const secret = await listCampaigns(keyLimited, "rest", first.secretKey);
  t.is(secret.status, 200, "the same application's secret key neither");
  t.is(secret.header("ratelimit-policy"), '"secret";q=5;w=60');
  t.is(rateLimitOf(secret).remaining, 4);

  const customers = await rest(keyLimited, "GET", "/customers", { key: first.secretKey });
  t.is(customers.status, 200);
  t.regex(customers.headers.get("ratelimit") ?? "", /^"secret";r=3;/, "every RPC counts");
});

test("after Retry-After seconds the key is served again", async (t) => {
  const server = await startServer({ env: { RATE_LIMIT_PUBLIC: "2/2s" } });
  try {
    let refused: Answer | undefined;
    for (let i = 0; i < 5 && !refused; i += 1) {
      const answer = await listCampaigns(server, "rest", keys.public);
      if (answer.status === 429) refused = answer;
    }
    if (!refused) return t.fail("no call was refused");
    const retryAfter = Number(refused.header("retry-after"));
    t.true(retryAfter >= 1 && retryAfter <= 2, `Retry-After ${retryAfter} within the window`);
    t.is(refused.header("ratelimit"), `"public";r=0;t=${retryAfter}`);
    await new Promise((resolve) => setTimeout(resolve, retryAfter * 1000 + 50));
    const again = await listCampaigns(server, "rest", keys.public);
    t.is(again.status, 200);
    t.is(rateLimitOf(again).remaining, 1, "a new window");
  } finally {
    closeGrpcClient(server);
    await server.stop();
  }
});

test("admin calls are limited by address, counted before the token is checked", async (t) => {
  const server = await startServer({
    env: {
      RATE_LIMIT_ADMIN: "3/1m",
      RATE_LIMIT_UNAUTHENTICATED: "off",
      METRICS_TOKEN: metricsToken,
    },
  });
  try {
    const admin = (key: string) => rest(server, "GET", "/admin/applications", { key });
    const first = await admin(keys.admin);
    t.is(first.status, 200);
    t.is(first.headers.get("ratelimit-policy"), '"admin";q=3;w=60');
    t.regex(first.headers.get("ratelimit") ?? "", /^"admin";r=2;t=(59|60)$/);
    const guess = await admin("not-the-admin-token");
    t.is(guess.status, 401);
    t.regex(guess.headers.get("ratelimit") ?? "", /^"admin";r=1;/, "a wrong token counts too");
    t.is((await admin(keys.admin)).status, 200);
    const refused = await admin(keys.admin);
    t.is(refused.status, 429, "the right token, over the limit, is refused");
    t.like(refused.body, { code: "resource_exhausted" });
    t.regex(refused.body.message, /too many admin calls from this address \(3 calls per 60 s\)/);
    t.regex(refused.headers.get("retry-after") ?? "", /^(59|60)$/);

    const overGrpc = await new Promise<grpc.ServiceError | null>((resolve) => {
      const client = new grpc.Client(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure());
      const metadata = new grpc.Metadata();
      metadata.set("authorization", keys.admin);
      client.makeUnaryRequest(
        "/referral.v1.AdminService/ListApplications",
        (value: Buffer) => value,
        (bytes: Buffer) => bytes,
        Buffer.alloc(0),
        metadata,
        (error) => {
          client.close();
          resolve(error);
        },
      );
    });
    t.is(
      overGrpc?.code,
      grpc.status.RESOURCE_EXHAUSTED,
      "one budget per address, whatever the protocol",
    );
    t.regex(String(overGrpc?.metadata.get("ratelimit")[0]), /^"admin";r=0;t=\d+$/);

    const tenant = await listCampaigns(server, "rest", keys.public);
    t.is(tenant.status, 200, "calls with an API key are not admin calls");
    t.is(await rateLimitedCount(server, "admin"), 2);
  } finally {
    closeGrpcClient(server);
    await server.stop();
  }
});

test("failed authentications are limited by address; past the limit failures are 429 and valid keys are served", async (t) => {
  const server = await startServer({
    env: {
      RATE_LIMIT_PUBLIC: "50/1s",
      RATE_LIMIT_UNAUTHENTICATED: "3/1m",
      METRICS_TOKEN: metricsToken,
    },
  });
  try {
    const valid = await listCampaigns(server, "rest", keys.public);
    t.is(valid.status, 200);
    t.is(valid.header("ratelimit-policy"), '"public";q=50;w=1', "a success counts no failure");
    const failures: Answer[] = [];
    for (const key of ["pk_wrong_1", undefined, "sk_wrong_2"]) {
      failures.push(await listCampaigns(server, "rest", key));
    }
    t.deepEqual(
      failures.map((answer) => answer.status),
      [401, 401, 401],
    );
    t.deepEqual(
      failures.map((answer) => answer.header("ratelimit-policy")),
      Array(3).fill('"unauthenticated";q=3;w=60'),
    );
    t.deepEqual(
      failures.map((answer) => rateLimitOf(answer).remaining),
      [2, 1, 0],
    );
    for (const protocol of wireProtocols) {
      const blocked = await listCampaigns(server, protocol, "pk_wrong_again");
      t.is(blocked.code, "resource_exhausted", `${protocol}: another failure is refused`);
      t.regex(blocked.header("ratelimit") ?? "", /^"unauthenticated";r=0;t=\d+$/, protocol);
      t.is(blocked.header("retry-after"), String(rateLimitOf(blocked).reset), protocol);
      // Behind one NAT or proxy, the other users of the address go on.
      const served = await listCampaigns(server, protocol, keys.public);
      t.is(served.code, "ok", `${protocol}: a valid key is served from the same address`);
      t.is(served.header("ratelimit-policy"), '"public";q=50;w=1', protocol);
    }
    // The admin token may be a guessable word: past the limit it is not checked.
    const admin = await rest(server, "GET", "/admin/applications", { key: keys.admin });
    t.is(admin.status, 429, "the admin token, even the right one, is not checked");
    t.is(admin.body.code, "resource_exhausted");
    t.is(await rateLimitedCount(server, "unauthenticated"), wireProtocols.length + 1);
  } finally {
    closeGrpcClient(server);
    await server.stop();
  }
});

test("wrong metrics tokens count as failed authentications of their address", async (t) => {
  const server = await startServer({
    env: { RATE_LIMIT_UNAUTHENTICATED: "3/1m", METRICS_TOKEN: metricsToken },
  });
  try {
    const guesses = [];
    for (const guess of ["Bearer wrong-1", "Bearer wrong-2", "wrong-3"]) {
      guesses.push(await scrape(server, guess));
    }
    t.deepEqual(
      guesses.map((guess) => guess.status),
      [401, 401, 401],
    );
    for (const [index, guess] of guesses.entries()) {
      // A 401 carries the failure limit's headers, as an API call's does.
      t.regex(guess.rateLimit ?? "", new RegExp(`^"unauthenticated";r=${2 - index};t=\\d+$`));
    }
    const blocked = await scrape(server, `Bearer ${metricsToken}`);
    t.is(blocked.status, 429, "past the limit, not even the right token is checked");
    t.regex(blocked.retryAfter ?? "", /^\d+$/);
    t.is(JSON.parse(blocked.body).code, "resource_exhausted");
    const call = await listCampaigns(server, "rest", "pk_wrong");
    t.is(call.code, "resource_exhausted", "one limit for the address, whatever it guessed at");
    const served = await listCampaigns(server, "rest", keys.public);
    t.is(served.code, "ok", "a valid API key is still served");
    const elsewhere = await scrape(server, `Bearer ${metricsToken}`, "127.0.0.2");
    t.is(elsewhere.status, 200, "another address is served");
  } finally {
    closeGrpcClient(server);
    await server.stop();
  }
});

// With workers the counters are the primary's, and a worker takes a key's
// budget a slice at a time: calls that wait together for one slice must
// not be refused for the others' share of it.
test("with two workers, concurrent calls are refused only past the whole service's limit", async (t) => {
  const server = await startServer({
    workers: 2,
    env: {
      // The defaults, as a user runs them (the test helper's are unlimited).
      RATE_LIMIT_PUBLIC: "1000/1s",
      RATE_LIMIT_SECRET: "1000/1s",
      RATE_LIMIT_ADMIN: "60/1m",
      RATE_LIMIT_UNAUTHENTICATED: "30/1m",
      METRICS_TOKEN: metricsToken,
    },
  });
  try {
    const identify = (index: number) =>
      rest(server, "POST", "/customers/identify", {
        key: keys.secret,
        body: {
          externalUserId: `burst-${index}`,
          name: "Burst",
          email: `burst-${index}@example.com`,
        },
      });
    for (let round = 0; round < 5; round += 1) {
      const started = Date.now();
      const answers = await Promise.all(
        Array.from({ length: 100 }, (_, index) => identify(round * 100 + index)),
      );
      // Five rounds may share a window: 500 calls, half the limit.
      t.deepEqual(
        answers
          .filter((answer) => answer.status >= 300)
          .map((answer) => `${answer.status} ${answer.body.message}`),
        [],
        `round ${round + 1} (${Date.now() - started} ms): 100 identifies at once, none refused`,
      );
    }

    // Six wrong keys at once: 6 of 30 failures, far from blocking the address.
    const guesses = await Promise.all(
      Array.from({ length: 6 }, (_, index) => listCampaigns(server, "rest", `pk_wrong_${index}`)),
    );
    t.deepEqual(
      guesses.map((guess) => guess.status),
      Array(6).fill(401),
    );
    t.is((await scrape(server, `Bearer ${metricsToken}`)).status, 200, "a scrape is served");

    // Admin calls: 60 a minute from this address, each counted once.
    const admin = () => rest(server, "GET", "/admin/applications", { key: keys.admin });
    const together = await Promise.all(Array.from({ length: 10 }, admin));
    t.deepEqual(
      together.map((answer) => answer.status),
      Array(10).fill(200),
      "10 admin calls at once are served",
    );
    let served = together.length;
    for (;;) {
      const answer = await admin();
      if (answer.status !== 200) {
        t.is(answer.status, 429);
        break;
      }
      served += 1;
    }
    t.is(served, 60, "the 61st admin call of the minute is the first refused");
  } finally {
    closeGrpcClient(server);
    await server.stop();
  }
});

test("a limit set to off counts nothing and adds no header", async (t) => {
  const server = await startServer({ env: { RATE_LIMIT_PUBLIC: "off" } });
  try {
    for (let i = 0; i < 20; i += 1) {
      const answer = await listCampaigns(server, "rest", keys.public);
      t.is(answer.status, 200);
      t.is(answer.header("ratelimit"), null);
    }
  } finally {
    closeGrpcClient(server);
    await server.stop();
  }
});

test("the variables take calls per window or off, and name themselves when wrong", (t) => {
  const defaults = loadConfig({}).rateLimits;
  t.deepEqual(defaults, {
    public: { calls: 1000, windowSeconds: 1 },
    secret: { calls: 1000, windowSeconds: 1 },
    admin: { calls: 60, windowSeconds: 60 },
    unauthenticated: { calls: 30, windowSeconds: 60 },
    codeLookups: { calls: 30, windowSeconds: 60 },
    links: { calls: 120, windowSeconds: 60 },
  });
  const set = loadConfig({ RATE_LIMIT_SECRET: "5000/1h", RATE_LIMIT_ADMIN: "off" }).rateLimits;
  t.deepEqual(set.secret, { calls: 5000, windowSeconds: 3600 });
  t.is(set.admin, undefined);
  for (const wrong of ["100", "100/", "0/1s", "10/1500ms", "10/0s", "ten/1s", "10/1y"]) {
    t.throws(
      () => loadConfig({ RATE_LIMIT_PUBLIC: wrong }),
      { message: /^RATE_LIMIT_PUBLIC / },
      wrong,
    );
  }
});

test("addresses are counted as IPv4, or by their IPv6 /64", (t) => {
  t.is(addressKey("203.0.113.9"), "203.0.113.9");
  t.is(addressKey("::ffff:203.0.113.9"), "203.0.113.9");
  t.is(addressKey("2001:db8:1:2:aaaa::1"), addressKey("2001:db8:1:2:bbbb::2"));
  t.not(addressKey("2001:db8:1:2::1"), addressKey("2001:db8:1:3::1"));
});

if (engineNames.includes("mongodb")) {
  test("mongodb: two instances on one database enforce one limit", async (t) => {
    const database = freshDatabaseName("ratelimits");
    const env = {
      MONGODB_DB: database,
      RATE_LIMIT_PUBLIC: "4/1m",
      RATE_LIMIT_UNAUTHENTICATED: "2/1m",
    };
    const first = await startServer({ engine: "mongodb", env });
    const second = await startServer({ engine: "mongodb", env });
    try {
      const answers: Answer[] = [];
      for (const server of [first, second, first, second, first, second]) {
        answers.push(await listCampaigns(server, "rest", keys.public));
      }
      t.deepEqual(
        answers.map((answer) => answer.status),
        [200, 200, 200, 200, 429, 429],
      );
      t.deepEqual(
        answers.slice(0, 4).map((answer) => rateLimitOf(answer).remaining),
        [3, 2, 1, 0],
        "one count across both",
      );

      t.is((await listCampaigns(first, "rest", "pk_wrong")).status, 401);
      t.is((await listCampaigns(second, "rest", "pk_wrong")).status, 401);
      t.is(
        (await listCampaigns(second, "rest", keys.secret)).status,
        429,
        "the instance that saw the last failure refuses the address at once",
      );
      t.is(
        (await listCampaigns(first, "rest", "pk_wrong")).status,
        429,
        "the other finds the shared count over the limit at its next failure",
      );
      t.is((await listCampaigns(first, "rest", keys.secret)).status, 429);
    } finally {
      await first.stop();
      await second.stop();
      await dropDatabase(database);
    }
  });
}
