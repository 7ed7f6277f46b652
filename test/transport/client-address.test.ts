import { request as httpRequest } from "node:http";
import * as grpc from "@grpc/grpc-js";
import test from "ava";
import { CampaignsService } from "../../gen/referral/v1/campaigns_pb.js";
import { loadConfig } from "../../src/config.js";
import { clientAddressResolver } from "../../src/transport/client-address.js";
import {
  closeGrpcClient,
  type Json,
  keys,
  rest,
  startServer,
  type TestServer,
} from "../helpers/server.js";
import { eventually } from "../helpers/wait.js";

/**
 * TRUSTED_PROXIES: the client's address (in the request log and for the
 * failed-authentication limit) comes from Forwarded or X-Forwarded-For only
 * when the peer is a trusted proxy, and is then the right-most hop that is
 * not one; otherwise it is the peer, whatever the headers say.
 */

const resolver = clientAddressResolver(["127.0.0.1", "10.0.0.0/8"]);
const headersOf =
  (headers: Record<string, string>) =>
  (name: string): string | undefined =>
    headers[name];

test("the client is the right-most hop that is not a trusted proxy", (t) => {
  const cases: Array<[string, Record<string, string>, string]> = [
    ["127.0.0.1", {}, "127.0.0.1"],
    ["127.0.0.1", { "x-forwarded-for": "203.0.113.9" }, "203.0.113.9"],
    // What the client wrote itself, left of the first proxy's entry, is not believed.
    ["127.0.0.1", { "x-forwarded-for": "6.6.6.6, 203.0.113.9, 10.1.2.3" }, "203.0.113.9"],
    ["127.0.0.1", { "x-forwarded-for": "10.9.9.9, 10.1.2.3" }, "10.9.9.9"],
    [
      "127.0.0.1",
      { forwarded: 'for=198.51.100.7;proto=https, for="[2001:db8::5]:4711"' },
      "2001:db8::5",
    ],
    [
      "127.0.0.1",
      { forwarded: "for=198.51.100.7", "x-forwarded-for": "203.0.113.9" },
      "198.51.100.7",
    ],
    // A proxy that hides its client stands in for it.
    ["127.0.0.1", { forwarded: "for=unknown" }, "127.0.0.1"],
    ["127.0.0.1", { forwarded: "for=_hidden, for=10.1.2.3" }, "10.1.2.3"],
    // A Forwarded that does not parse leaves X-Forwarded-For.
    ["127.0.0.1", { forwarded: "for=", "x-forwarded-for": "203.0.113.9" }, "203.0.113.9"],
    ["::ffff:127.0.0.1", { "x-forwarded-for": "203.0.113.9" }, "203.0.113.9"],
    // An untrusted peer's headers are never read.
    ["192.0.2.1", { "x-forwarded-for": "203.0.113.9" }, "192.0.2.1"],
  ];
  for (const [peer, headers, client] of cases) {
    t.is(resolver(peer, headersOf(headers)), client, `${peer} ${JSON.stringify(headers)}`);
  }
  const none = clientAddressResolver([]);
  t.is(none("127.0.0.1", headersOf({ "x-forwarded-for": "203.0.113.9" })), "127.0.0.1");
});

test("TRUSTED_PROXIES takes addresses, CIDR ranges and proxy-addr's names, and names itself when wrong", (t) => {
  t.deepEqual(loadConfig({}).trustedProxies, []);
  t.deepEqual(
    loadConfig({ TRUSTED_PROXIES: " 10.0.0.0/8, loopback ,2001:db8::/32" }).trustedProxies,
    ["10.0.0.0/8", "loopback", "2001:db8::/32"],
  );
  for (const wrong of ["proxy.internal", "10.0.0.0/33", "300.1.1.1"]) {
    t.throws(() => loadConfig({ TRUSTED_PROXIES: wrong }), {
      message: new RegExp(`^TRUSTED_PROXIES: "${wrong.replaceAll(".", "\\.")}" is not`),
    });
  }
});

/** A server that logs calls, with a failed-authentication limit of 2 per address. */
async function loggingServer(trustedProxies: string | undefined) {
  const lines: string[] = [];
  const server = await startServer({
    env: {
      LOG_LEVEL: "info",
      RATE_LIMIT_UNAUTHENTICATED: "2/1m",
      ...(trustedProxies ? { TRUSTED_PROXIES: trustedProxies } : {}),
    },
    logTo: { write: (line) => lines.push(line) },
  });
  const clients = async () => {
    await new Promise((resolve) => setImmediate(resolve));
    return lines
      .map((line) => JSON.parse(line) as Json)
      .filter((entry) => entry.msg === "call")
      .map((entry) => entry.client as string);
  };
  return { server, lines, clients };
}

function grpcListCampaigns(server: TestServer, forwardedFor: string): Promise<number> {
  const client = new grpc.Client(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure());
  const metadata = new grpc.Metadata();
  metadata.set("authorization", keys.public);
  metadata.set("x-forwarded-for", forwardedFor);
  return new Promise((resolve) => {
    client.makeUnaryRequest(
      `/${CampaignsService.typeName}/ListCampaigns`,
      (value: Buffer) => value,
      (bytes: Buffer) => bytes,
      Buffer.alloc(0),
      metadata,
      (error) => {
        client.close();
        resolve(error?.code ?? 0);
      },
    );
  });
}

test("behind a trusted proxy chain each client is logged and limited by its own address", async (t) => {
  const { server, clients } = await loggingServer("127.0.0.1, 10.0.0.0/8");
  try {
    const via = (forwardedFor: string, key: string | undefined, httpVersion: "1.1" | "2" = "1.1") =>
      rest(server, "GET", "/campaigns", {
        key,
        headers: { "x-forwarded-for": forwardedFor },
        httpVersion,
      });
    // Client A, through two proxies, fails twice: its address is over its limit.
    const a = "spoofed, 203.0.113.10, 10.0.0.7";
    t.is((await via(a, "pk_wrong")).status, 401);
    t.is((await via(a, "pk_wrong", "2")).status, 401);
    t.is((await via(a, "pk_wrong")).status, 429);
    // Client B, through the same proxies, is another address.
    const b = "203.0.113.20, 10.0.0.7";
    t.is((await via(b, "pk_wrong")).status, 401, "another client's budget is its own");
    t.is((await via(b, keys.public, "2")).status, 200);
    t.is(await grpcListCampaigns(server, "203.0.113.30"), 0);
    t.deepEqual(await clients(), [
      "203.0.113.10",
      "203.0.113.10",
      "203.0.113.10",
      "203.0.113.20",
      "203.0.113.20",
      "203.0.113.30",
    ]);
  } finally {
    closeGrpcClient(server);
    await server.stop();
  }
});

test("without TRUSTED_PROXIES, or from a peer not in it, no header is believed", async (t) => {
  for (const trusted of [undefined, "10.0.0.0/8"]) {
    const { server, clients } = await loggingServer(trusted);
    try {
      const forged = (address: string) =>
        rest(server, "GET", "/campaigns", {
          key: "pk_wrong",
          headers: { "x-forwarded-for": address, forwarded: `for=${address}` },
        });
      // A client cannot escape its limit by naming a new address each time.
      t.is((await forged("203.0.113.1")).status, 401);
      t.is((await forged("203.0.113.2")).status, 401);
      t.is((await forged("203.0.113.3")).status, 429, `${trusted}: one budget for the peer`);
      t.is(await grpcListCampaigns(server, "203.0.113.4"), 0, "a valid key is served");
      t.deepEqual(await clients(), Array(4).fill("127.0.0.1"));
    } finally {
      closeGrpcClient(server);
      await server.stop();
    }
  }
});

test("a call whose connection the client closes is logged with its address", async (t) => {
  const { server, clients } = await loggingServer(undefined);
  try {
    const status = await new Promise<number>((resolve, reject) => {
      const request = httpRequest(
        {
          host: "127.0.0.1",
          port: server.port,
          path: "/campaigns",
          headers: { authorization: keys.public, connection: "close" },
        },
        (response) => {
          response.resume();
          response.on("end", () => resolve(response.statusCode ?? 0));
        },
      );
      request.on("error", reject);
      request.end();
    });
    t.is(status, 200);
    // The line is written after the response, by when the connection is gone.
    const logged = await eventually("the call's line", async () => {
      const found = await clients();
      return found.length > 0 && found;
    });
    t.deepEqual(logged, ["127.0.0.1"]);
  } finally {
    await server.stop();
  }
});
