import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import * as grpc from "@grpc/grpc-js";
import test from "ava";
import {
  CampaignsService,
  type ListCampaignsRequest,
  ListCampaignsRequestSchema,
  ListCampaignsResponseSchema,
} from "../../gen/referral/v1/campaigns_pb.js";
import { type Call, observeCalls } from "../../src/transport/pipeline.js";
import { connectClient, type Json, keys, rest, useServer } from "../helpers/server.js";

// Request logs and metrics, on every protocol.

const metricsToken = "metrics-token-for-tests";
const lines: string[] = [];
const server = useServer({
  env: { LOG_LEVEL: "info", METRICS_TOKEN: metricsToken },
  logTo: { write: (line) => lines.push(line) },
});

/** The log lines of calls (the pipeline's), parsed. */
function callLines(): Json[] {
  return lines.map((line) => JSON.parse(line)).filter((entry) => entry.msg === "call");
}

/** ListCampaigns over gRPC, with the response metadata the service sent. */
function grpcListCampaigns(requestId?: string): Promise<{ code: number; requestId: unknown }> {
  const client = new grpc.Client(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure());
  const metadata = new grpc.Metadata();
  metadata.set("authorization", keys.public);
  if (requestId) metadata.set("x-request-id", requestId);
  return new Promise((resolve) => {
    let requestIdSent: unknown;
    const call = client.makeUnaryRequest(
      `/${CampaignsService.typeName}/ListCampaigns`,
      (value: ListCampaignsRequest) => Buffer.from(toBinary(ListCampaignsRequestSchema, value)),
      (bytes: Buffer) => fromBinary(ListCampaignsResponseSchema, bytes),
      create(ListCampaignsRequestSchema),
      metadata,
      (error) => {
        client.close();
        resolve({ code: error?.code ?? 0, requestId: requestIdSent });
      },
    );
    call.on("metadata", (received) => {
      requestIdSent = received.get("x-request-id")[0];
    });
  });
}

test.serial("every protocol writes one line per call and returns the request id", async (t) => {
  lines.length = 0;
  const viaRest = await rest(server, "GET", "/campaigns", {
    key: keys.public,
    headers: { "x-request-id": "rest-call-1" },
  });
  t.is(viaRest.headers.get("x-request-id"), "rest-call-1", "a plain client id is echoed");
  const generated = await rest(server, "GET", "/customers/cus_missing", { key: keys.secret });
  t.is(generated.status, 404);
  t.regex(
    generated.headers.get("x-request-id") ?? "",
    /^[0-9a-f-]{36}$/,
    "else a new one, on errors too",
  );
  const unsafe = await rest(server, "GET", "/campaigns", {
    key: keys.public,
    headers: { "x-request-id": 'a b"c' },
  });
  t.not(unsafe.headers.get("x-request-id"), 'a b"c', "an id that is not plain is replaced");

  const viaGrpc = await grpcListCampaigns("grpc-call-1");
  t.is(viaGrpc.code, 0);
  t.is(viaGrpc.requestId, "grpc-call-1");

  let connectRequestId: string | null | undefined;
  await connectClient(server, CampaignsService, { key: keys.public }).listCampaigns(
    {},
    {
      headers: { "x-request-id": "connect-call-1" },
      onHeader: (headers) => {
        connectRequestId = headers.get("x-request-id");
      },
    },
  );
  t.is(connectRequestId, "connect-call-1");

  const logged = callLines();
  t.is(logged.length, 5, "one line per call");
  const byId = (id: string) => logged.find((entry) => entry.requestId === id);
  t.like(byId("rest-call-1"), {
    protocol: "rest",
    rpc: "referral.v1.CampaignsService/ListCampaigns",
    code: "ok",
  });
  t.like(byId("grpc-call-1"), { protocol: "grpc", code: "ok" });
  t.like(byId("connect-call-1"), { protocol: "connect", code: "ok" });
  t.like(byId(generated.headers.get("x-request-id") ?? ""), {
    protocol: "rest",
    rpc: "referral.v1.CustomersService/GetCustomer",
    code: "not_found",
  });
  for (const entry of logged) {
    t.regex(entry.keyId, /^key_/, "the key's id is logged");
    t.is(typeof entry.durationMs, "number");
  }
});

test.serial("a key of the wrong kind is logged by its id", async (t) => {
  lines.length = 0;
  const refused = await rest(server, "GET", "/customers", { key: keys.public });
  t.is(refused.status, 403);
  const [entry] = callLines();
  t.like(entry, { rpc: "referral.v1.CustomersService/ListCustomers", code: "permission_denied" });
  t.regex(entry?.keyId ?? "", /^key_/, "the key was known: its id is logged");
});

test("observers hear of an outcome after its response, or at once when settled", async (t) => {
  const heard: string[] = [];
  const observed = observeCalls([
    { enter: () => heard.push("enter"), leave: (_call, code) => heard.push(code) },
  ]);
  const call = {} as Call;
  const response = {} as Awaited<ReturnType<Parameters<typeof observed.step>[1]>>;
  t.is(await observed.step(call, async () => response), response);
  t.deepEqual(heard, ["enter"], "the outcome waits for the turn's responses to be written");
  observed.settle();
  t.deepEqual(heard, ["enter", "ok"], "a scrape or the shutdown hears it at once");
  const failed = observed.step(call, async () => {
    throw new ConnectError("gone", Code.NotFound);
  });
  await t.throwsAsync(failed);
  await new Promise((resolve) => setImmediate(resolve));
  t.deepEqual(heard, ["enter", "ok", "enter", "not_found"], "and every outcome by the next turn");
  observed.settle();
  t.is(heard.length, 4, "each outcome once");
});

test.serial("no log line holds a key, the admin token or the metrics token", async (t) => {
  await rest(server, "GET", "/admin/applications", { key: keys.admin });
  await rest(server, "GET", "/campaigns", { key: "pk_not_a_real_key_0000000000000000" });
  await rest(server, "GET", "/metrics", { headers: { authorization: `Bearer ${metricsToken}` } });
  const all = lines.join("\n");
  t.true(all.length > 0);
  for (const secret of [keys.secret, keys.public, keys.admin, metricsToken]) {
    t.false(all.includes(secret), "a secret reached the log");
  }
  t.like(callLines().at(-1), { code: "unauthenticated" });
});

test.serial(
  "GET /metrics needs the token and shows calls, store, webhooks and process",
  async (t) => {
    t.is((await rest(server, "GET", "/metrics")).status, 401);
    t.is(
      (await rest(server, "GET", "/metrics", { headers: { authorization: "Bearer wrong" } }))
        .status,
      401,
    );
    const response = await fetch(`${server.baseUrl}/metrics`, {
      headers: { authorization: `Bearer ${metricsToken}` },
    });
    t.is(response.status, 200);
    t.regex(response.headers.get("content-type") ?? "", /^text\/plain/);
    const text = await response.text();
    for (const protocol of ["rest", "grpc", "connect"]) {
      t.regex(
        text,
        new RegExp(
          `rpc_calls_total\\{rpc="referral.v1.CampaignsService/ListCampaigns",protocol="${protocol}",code="ok"\\} \\d+`,
        ),
      );
    }
    t.regex(text, /rpc_calls_total\{[^}]*code="not_found"\} 1/);
    t.regex(text, /rpc_duration_seconds_bucket\{/);
    t.regex(text, /rpc_in_flight 0/);
    t.regex(
      text,
      /store_operation_duration_seconds_count\{collection="customers",operation="findOne"\} \d+/,
    );
    t.regex(text, /webhook_queue_depth \d+/);
    t.regex(text, /webhook_oldest_pending_age_seconds \d+/);
    t.regex(text, /process_cpu_user_seconds_total/);
  },
);
