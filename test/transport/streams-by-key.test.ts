import { connect as http2Connect } from "node:http2";
import { connect as netConnect, type Socket } from "node:net";
import { create, type Message, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import { encodeEnvelope } from "@connectrpc/connect/protocol";
import test, { type ExecutionContext } from "ava";
import { InsightsService } from "../../gen/referral/v1/insights_pb.js";
import { revokeApiKey } from "../../src/store/tenants.js";
import type { Rpc, ServiceRegistration } from "../../src/transport/pipeline.js";
import { type WireProtocol, wireProtocols } from "../helpers/callers.js";
import { keys, rest, type TestServer, useServer } from "../helpers/server.js";
import {
  callStream,
  keepStreamOpen,
  type OpenStream,
  type StreamOutcome,
} from "../helpers/streams.js";
import { manualTicker } from "../helpers/ticker.js";
import { eventually, within } from "../helpers/wait.js";

/**
 * The server streams an API key holds open, on every protocol with real
 * clients: at most STREAMS_PER_KEY at once (`resource_exhausted` past it,
 * REST 429), each slot given back however its stream ends; and a key's
 * streams end with `unauthenticated` once it is revoked, through this
 * process or, seen at the next poll, elsewhere. The cluster's side is in
 * streams-by-key-workers.test.ts.
 */

const watch = InsightsService.method.watchCampaignStats;
const exportReferrals = InsightsService.method.exportReferrals;
/** One stream per wire protocol fills a key. */
const limit = wireProtocols.length;
const ticker = manualTicker();
/** The campaign whose watch fails after its first message (see `failingWatch`). */
let failingCampaignId = "";

const server = useServer({
  env: { STREAMS_PER_KEY: String(limit) },
  streamTicks: ticker,
  registrations: (standard) => standard.map(failingWatch),
});

/**
 * The standard services, but the watch of `failingCampaignId` fails after
 * its first message, as a store lost mid-stream would end it.
 */
function failingWatch(registration: ServiceRegistration): ServiceRegistration {
  if (registration.service.typeName !== InsightsService.typeName) return registration;
  const rpcs = registration.rpcs.map((rpc): Rpc => {
    if (rpc.method !== watch) return rpc;
    const real = rpc.implementation;
    return {
      ...rpc,
      implementation: async function* (request: Message, context: HandlerContext) {
        const updates = real(request, context) as AsyncIterable<Message>;
        if ((request as Message & { id: string }).id !== failingCampaignId) {
          yield* updates;
          return;
        }
        for await (const update of updates) {
          yield update;
          throw new ConnectError("the campaign was deleted while watched", Code.FailedPrecondition);
        }
      },
    };
  });
  return { ...registration, rpcs };
}

let campaignId = "";
test.serial.before(async () => {
  campaignId = await createCampaign(server);
  failingCampaignId = await createCampaign(server);
});

async function createCampaign(target: TestServer): Promise<string> {
  const created = await rest(
    target,
    "POST",
    `/admin/applications/${target.app.demo?.applicationId}/campaigns`,
    {
      key: keys.admin,
      body: { name: "Watched", environment: "production", isLive: true },
    },
  );
  if (created.status !== 201) throw new Error(`campaign: ${JSON.stringify(created.body)}`);
  return created.body.id;
}

/** A new secret key of the demo application, and its id. */
async function newSecretKey(): Promise<{ key: string; id: string }> {
  const created = await rest(
    server,
    "POST",
    `/admin/applications/${server.app.demo?.applicationId}/api-keys`,
    { key: keys.admin, body: { kind: "secret" } },
  );
  if (created.status !== 201) throw new Error(`key: ${JSON.stringify(created.body)}`);
  return { key: created.body.key, id: created.body.apiKey.id };
}

/** Opens a watch and waits for its first message. */
async function openWatch(protocol: WireProtocol, key: string, id = campaignId) {
  const stream = keepStreamOpen(server, protocol, watch, { id }, key);
  await within(
    Promise.race([stream.received(1), stream.ended.then((error) => Promise.reject(error))]),
    10_000,
    `${protocol}: the first message`,
  );
  return stream;
}

/** Opens a watch, takes its first message and cancels it: the outcome. */
function probe(key: string) {
  return callStream(server, "rest", watch, { id: campaignId }, key, 1);
}

/**
 * Runs a stream until the limit does not refuse it: a slot given back
 * reaches the count once the server has seen the stream end, a moment
 * after its client did. A slot never given back fails the wait.
 */
function onceSlotFree(how: string, run: () => Promise<StreamOutcome>): Promise<StreamOutcome> {
  return eventually(`a slot free for ${how}`, async () => {
    const outcome = await run();
    return outcome.error?.code === "resource_exhausted" ? undefined : outcome;
  });
}

/** Opens a watch of `key` once a slot is free (see `onceSlotFree`), and keeps it open. */
function reopen(key: string, how: string, protocol: WireProtocol = "rest"): Promise<OpenStream> {
  return eventually(`a slot given back after ${how}`, async () => {
    const stream = keepStreamOpen(server, protocol, watch, { id: campaignId }, key);
    const opened = await Promise.race([
      stream.received(1).then(() => true),
      stream.ended.then(() => false),
    ]);
    return opened ? stream : undefined;
  });
}

/** Asserts the key is at its limit: a further stream is refused. */
async function refusedAtLimit(t: ExecutionContext, key: string, how: string) {
  const refused = await probe(key);
  t.is(refused.error?.code, "resource_exhausted", `${how}: at the limit again`);
}

test.serial(
  "past STREAMS_PER_KEY a key's stream is refused, resource_exhausted naming the limit, on every protocol",
  async (t) => {
    const { key } = await newSecretKey();
    const open = await Promise.all(wireProtocols.map((protocol) => openWatch(protocol, key)));
    try {
      for (const protocol of wireProtocols) {
        for (const method of [watch, exportReferrals]) {
          const request = method === watch ? { id: campaignId } : {};
          const outcome = await callStream(server, protocol, method, request, key, 1);
          t.deepEqual(
            outcome,
            {
              messages: [],
              error: {
                code: "resource_exhausted",
                message: `this API key has ${limit} streams open, the most STREAMS_PER_KEY allows: end one before opening another`,
              },
            },
            `${protocol} ${method.name}`,
          );
        }
      }
      const refused = await fetch(`${server.baseUrl}/campaigns/${campaignId}/stats/stream`, {
        headers: { authorization: key },
      });
      t.is(refused.status, 429);
      t.like(await refused.json(), { code: "resource_exhausted" });
      // The limit is the key's: another key opens its streams.
      t.is((await probe(keys.secret)).messages.length, 1);
      // Unary calls are not streams.
      t.is((await rest(server, "GET", `/campaigns/${campaignId}/stats`, { key })).status, 200);
    } finally {
      for (const stream of open) stream.stop();
    }
  },
);

test.serial("a client that cancels gives its slot back, on every protocol", async (t) => {
  const { key } = await newSecretKey();
  const open = await Promise.all(wireProtocols.map((protocol) => openWatch(protocol, key)));
  try {
    for (const [index, protocol] of wireProtocols.entries()) {
      (open[index] as OpenStream).stop();
      open[index] = await reopen(key, `${protocol} cancelled`, protocol);
      await refusedAtLimit(t, key, protocol);
    }
  } finally {
    for (const stream of open) stream.stop();
  }
});

test.serial(
  "a client that vanishes without a word gives its slot back: HTTP/1.1 and HTTP/2 connections reset",
  async (t) => {
    const { key } = await newSecretKey();
    const open = await Promise.all(
      wireProtocols.slice(2).map((protocol) => openWatch(protocol, key)),
    );
    try {
      // Server-Sent Events over a raw HTTP/1.1 connection.
      const http1 = await rawConnection();
      const http1Data = receivedOn(http1, "data: ");
      http1.write(
        `GET /campaigns/${campaignId}/stats/stream HTTP/1.1\r\nHost: localhost\r\nAuthorization: ${key}\r\n\r\n`,
      );
      await http1Data;
      // gRPC over a raw HTTP/2 connection.
      const http2Socket = await rawConnection();
      const session = http2Connect(server.baseUrl, { createConnection: () => http2Socket });
      session.on("error", () => {});
      const call = session.request({
        ":method": "POST",
        ":path": `/${InsightsService.typeName}/${watch.name}`,
        "content-type": "application/grpc",
        te: "trailers",
        authorization: key,
      });
      call.on("error", () => {});
      call.end(encodeEnvelope(0, toBinary(watch.input, create(watch.input, { id: campaignId }))));
      await new Promise((resolve) => call.once("data", resolve));
      await refusedAtLimit(t, key, "both raw connections open");

      http1.resetAndDestroy();
      open.push(await reopen(key, "an HTTP/1.1 connection reset"));
      await refusedAtLimit(t, key, "HTTP/1.1");
      http2Socket.resetAndDestroy();
      session.destroy();
      open.push(await reopen(key, "an HTTP/2 connection reset"));
      await refusedAtLimit(t, key, "HTTP/2");
    } finally {
      for (const stream of open) stream.stop();
    }
  },
);

test.serial(
  "a stream that ends by itself, fails before or after its first message, or answers HEAD gives its slot back",
  async (t) => {
    const { key } = await newSecretKey();
    const open = await Promise.all(
      wireProtocols.slice(1).map((protocol) => openWatch(protocol, key)),
    );
    // One slot is left: each way below takes it, and must give it back for the next.
    try {
      const exported = await onceSlotFree("an export", () =>
        callStream(server, "grpc", exportReferrals, {}, key),
      );
      t.is(exported.error, undefined, "an export read to its end");

      const missing = await onceSlotFree("an error before the first message", () =>
        callStream(server, "connect", watch, { id: "cmp_missing" }, key),
      );
      t.is(missing.error?.code, "not_found", "an error before the first message");

      const failed = await onceSlotFree("an error after the first message", () =>
        callStream(server, "grpc-web", watch, { id: failingCampaignId }, key),
      );
      t.deepEqual(
        [failed.messages.length, failed.error?.code],
        [1, "failed_precondition"],
        "an error after the first message",
      );

      const head = await onceSlotFree("HEAD", async () => {
        const response = await fetch(`${server.baseUrl}/campaigns/${campaignId}/stats/stream`, {
          method: "HEAD",
          headers: { authorization: key },
        });
        return response.status === 429
          ? { messages: [], error: { code: "resource_exhausted", message: "" } }
          : { messages: [{ status: response.status }] };
      });
      t.deepEqual(head.messages, [{ status: 200 }]);

      open.push(await reopen(key, "every way"));
      await refusedAtLimit(t, key, "every way");
    } finally {
      for (const stream of open) stream.stop();
    }
  },
);

test.serial(
  "revoking a key ends its open streams with unauthenticated, on every protocol",
  async (t) => {
    const { key, id } = await newSecretKey();
    const open = await Promise.all(wireProtocols.map((protocol) => openWatch(protocol, key)));
    const other = await openWatch("grpc", keys.secret);
    const revoked = await rest(server, "POST", `/admin/api-keys/${id}/revoke`, {
      key: keys.admin,
    });
    t.is(revoked.status, 200);
    for (const [index, protocol] of wireProtocols.entries()) {
      const end = await within(
        (open[index] as OpenStream).ended,
        10_000,
        `${protocol}: the end of a revoked key's stream`,
      );
      t.deepEqual(end, { code: "unauthenticated", message: "the API key was revoked" }, protocol);
    }
    // Another key's stream goes on, and the revoked key opens none.
    t.is(other.messages.length, 1);
    other.stop();
    t.is(await other.ended, undefined);
    t.like(await probe(key), { messages: [], error: { code: "unauthenticated" } });
  },
);

test.serial(
  "a key revoked where this process is not told (another instance) ends its streams at the next poll",
  async (t) => {
    const { key, id } = await newSecretKey();
    const open = await Promise.all(
      (["rest", "grpc", "connect-h2"] as const).map((protocol) => openWatch(protocol, key)),
    );
    // As another instance on the same MongoDB would: straight in the store, nobody told.
    await revokeApiKey(server.app.store.system, id, new Date());
    ticker.tick();
    for (const stream of open) {
      t.deepEqual(await within(stream.ended, 10_000, "the end at the next poll"), {
        code: "unauthenticated",
        message: "the API key was revoked",
      });
    }
  },
);

/** A TCP connection to the server's port. */
async function rawConnection(): Promise<Socket> {
  const socket = netConnect(server.port, "127.0.0.1");
  socket.on("error", () => {});
  await new Promise((resolve) => socket.once("connect", resolve));
  return socket;
}

/** Resolves once `text` has arrived on the socket. */
function receivedOn(socket: Socket, text: string): Promise<void> {
  let received = "";
  return new Promise((resolve) => {
    const onData = (chunk: Buffer) => {
      received += chunk.toString();
      if (!received.includes(text)) return;
      socket.off("data", onData);
      resolve();
    };
    socket.on("data", onData);
  });
}
