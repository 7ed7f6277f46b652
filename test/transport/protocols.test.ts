import { execFile } from "node:child_process";
import { promisify } from "node:util";
import type { DescMessage, Message } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-node";
import * as grpc from "@grpc/grpc-js";
import test from "ava";
import { CampaignsService } from "../../gen/referral/v1/campaigns_pb.js";
import { CheckpointsService } from "../../gen/referral/v1/checkpoints_pb.js";
import { CustomersService } from "../../gen/referral/v1/customers_pb.js";
import { ReferralsService } from "../../gen/referral/v1/referrals_pb.js";
import { CustomerSchema, Environment } from "../../gen/referral/v1/resources_pb.js";
import { WebhooksService } from "../../gen/referral/v1/webhooks_pb.js";
import { toPlain } from "../../src/contract/plain-codec.js";
import { connectClient, grpcCall, keys, rest, useServer } from "../helpers/server.js";

const run = promisify(execFile);
/** The `buf` of node_modules, run directly: `npx` would add a second or more to each call. */
const buf = (args: string[]) =>
  run(new URL("../../node_modules/.bin/buf", import.meta.url).pathname, args);
const server = useServer();

/** The REST JSON of a message, to compare gRPC and Connect results with REST. */
function json(schema: DescMessage, message: Message | undefined): unknown {
  return message ? toPlain(schema, message) : undefined;
}

async function grpcOk<T>(
  outcome: Promise<{ ok: true; message: T } | { ok: false; details: string }>,
) {
  const result = await outcome;
  if (!result.ok) throw new Error(`gRPC call failed: ${result.details}`);
  return result.message;
}

test.serial("IdentifyCustomer: REST, gRPC and Connect upsert the same customer", async (t) => {
  const body = {
    externalUserId: "same-user",
    name: "Ada",
    email: "ada@example.com",
    customProperties: { plan: "pro" },
  };
  // The secret key reads the stored customer back (a public key without a userHash would not).
  const viaRest = await rest(server, "POST", "/customers/identify", { key: keys.secret, body });
  t.is(viaRest.status, 201);
  t.is(viaRest.body.externalUserId, "same-user");
  t.is(viaRest.body.environment, "production");
  t.deepEqual(viaRest.body.customProperties, { plan: "pro" });
  t.regex(viaRest.body.referralCode, /^[2-9A-HJKMNP-Z]{8}$/);
  t.is(viaRest.body.referredBy, null);
  t.is(viaRest.body.deletedAt, null);

  const viaGrpc = await grpcOk(
    grpcCall(server, CustomersService.method.identifyCustomer, body, keys.secret),
  );
  const viaConnect = await connectClient(server, CustomersService, {
    key: keys.secret,
  }).identifyCustomer(body);
  const viaBinary = await connectClient(server, CustomersService, {
    key: keys.secret,
    binary: true,
  }).identifyCustomer(body);
  for (const response of [viaGrpc, viaConnect, viaBinary]) {
    const customer = json(CustomerSchema, response.customer) as Record<string, unknown>;
    t.is(customer.id, viaRest.body.id);
    t.is(customer.referralCode, viaRest.body.referralCode);
    t.deepEqual({ ...customer, updatedAt: null }, { ...viaRest.body, updatedAt: null });
  }
});

test.serial("GetCustomer and ListCustomers give the same results on every protocol", async (t) => {
  const list = await rest(server, "GET", "/customers?limit=5", { key: keys.secret });
  t.is(list.status, 200);
  t.like(list.body, { total: 1, limit: 5, offset: 0 });
  const id = list.body.data[0].id;
  const get = await rest(server, "GET", `/customers/${id}`, { key: keys.secret });
  t.is(get.status, 200);
  t.deepEqual(get.body, list.body.data[0]);

  const schema = CustomersService.method.listCustomers.output;
  const viaGrpc = await grpcOk(
    grpcCall(server, CustomersService.method.listCustomers, { limit: 5 }, keys.secret),
  );
  const viaConnect = await connectClient(server, CustomersService, {
    key: keys.secret,
  }).listCustomers({ limit: 5 });
  t.deepEqual(json(schema, viaGrpc), list.body);
  t.deepEqual(json(schema, viaConnect), list.body);

  const getSchema = CustomersService.method.getCustomer.output;
  const gotGrpc = await grpcOk(
    grpcCall(server, CustomersService.method.getCustomer, { id }, keys.secret),
  );
  t.deepEqual((json(getSchema, gotGrpc) as { customer: unknown }).customer, get.body);
});

test.serial(
  "CreateReferral, ListReferrals and IngestCheckpoint agree across protocols",
  async (t) => {
    const referrer = await rest(server, "GET", "/customers", { key: keys.secret });
    const code = referrer.body.data[0].referralCode;
    await rest(server, "POST", "/customers/identify", {
      key: keys.public,
      body: { externalUserId: "friend", name: "Bob" },
    });

    const body = { referralCode: code, refereeExternalUserId: "friend" };
    const viaRest = await rest(server, "POST", "/referrals", { key: keys.public, body });
    t.is(viaRest.status, 201);
    t.is(viaRest.body.status, "pending");
    t.deepEqual(viaRest.body.suspectedFrauds, []);
    t.false("environment" in viaRest.body, "the create response has no environment");

    const schema = ReferralsService.method.createReferral.output;
    const viaGrpc = await grpcOk(
      grpcCall(server, ReferralsService.method.createReferral, body, keys.public),
    );
    const viaConnect = await connectClient(server, ReferralsService, {
      key: keys.public,
    }).createReferral(body);
    t.deepEqual((json(schema, viaGrpc) as { referral: unknown }).referral, viaRest.body);
    t.deepEqual((json(schema, viaConnect) as { referral: unknown }).referral, viaRest.body);

    const list = await rest(server, "GET", "/referrals?status=pending", { key: keys.secret });
    t.is(list.status, 200);
    t.is(list.body.total, 1);
    t.is(list.body.data[0].environment, "production");
    const listSchema = ReferralsService.method.listReferrals.output;
    const listGrpc = await grpcOk(
      grpcCall(server, ReferralsService.method.listReferrals, { status: 1 }, keys.secret),
    );
    t.deepEqual(json(listSchema, listGrpc), list.body);
    const accepted = await rest(server, "GET", "/referrals?status=accepted", { key: keys.secret });
    t.is(accepted.body.total, 0);

    const friend = await rest(server, "GET", "/customers?externalUserId=friend", {
      key: keys.secret,
    });
    t.like(friend.body.data[0], {
      referredById: viaRest.body.referrerId,
      referredByReferralId: viaRest.body.id,
    });
    t.is(friend.body.data[0].referredBy.referralCode, undefined);
    t.is(friend.body.data[0].referredBy.id, viaRest.body.referrerId);
    const referrerAfter = await rest(server, "GET", `/customers/${viaRest.body.referrerId}`, {
      key: keys.secret,
    });
    t.is(referrerAfter.body.visitedReferralsCount, 1);

    const checkpoint = { name: "signup", externalUserId: "friend", environment: "production" };
    const ingested = await rest(server, "POST", "/checkpoints/ingest", {
      key: keys.public,
      body: checkpoint,
    });
    t.is(ingested.status, 201);
    t.deepEqual(ingested.body, { success: true });
    const grpcCheckpoint = { ...checkpoint, environment: Environment.PRODUCTION };
    const ingestedGrpc = await grpcOk(
      grpcCall(server, CheckpointsService.method.ingestCheckpoint, grpcCheckpoint, keys.public),
    );
    t.true(ingestedGrpc.success);
    const ingestedConnect = await connectClient(server, CheckpointsService, {
      key: keys.public,
    }).ingestCheckpoint(grpcCheckpoint);
    t.true(ingestedConnect.success);
  },
);

test.serial("ListCampaigns is a bare array on REST and the same campaigns elsewhere", async (t) => {
  const list = await rest(
    server,
    "GET",
    "/campaigns?environment=test&is_live=true&sortBy=createdAt&sortOrder=asc",
    { key: keys.public },
  );
  t.is(list.status, 200);
  t.true(Array.isArray(list.body));
  t.is(list.body.length, 1);
  const [campaign] = list.body;
  t.like(campaign, {
    environment: "test",
    isLive: true,
    isDefault: true,
    proposedRewardTrigger: "purchase",
  });
  t.deepEqual(campaign.platforms, ["mobile", "web"]);
  t.deepEqual(
    campaign.rewards.map((r: { party: string }) => r.party),
    ["referrer", "referee"],
  );
  t.deepEqual(
    campaign.emails.map((e: { type: string }) => e.type),
    ["referrer:reward", "invitee:reward"],
  );
  t.is(campaign.rewards[0].payoutAmount, 20);
  t.is(campaign.rewards[0].discountAmount, null);
  t.is(campaign.faqs.length, 2);

  const viaGrpc = await grpcOk(
    grpcCall(
      server,
      CampaignsService.method.listCampaigns,
      { environment: Environment.TEST, isLive: true },
      keys.public,
    ),
  );
  t.deepEqual(json(CampaignsService.method.listCampaigns.output, viaGrpc), {
    campaigns: list.body,
  });
  const viaConnect = await connectClient(server, CampaignsService, {
    key: keys.public,
  }).listCampaigns({ environment: Environment.TEST });
  t.deepEqual(json(CampaignsService.method.listCampaigns.output, viaConnect), {
    campaigns: list.body,
  });

  const both = await rest(server, "GET", "/campaigns?sortOrder=desc", { key: keys.public });
  t.is(both.body.length, 2);
  const defaults = await rest(server, "GET", "/campaigns?isDefault=false", { key: keys.public });
  t.deepEqual(defaults.body, []);
});

test.serial("gRPC-Web (HTTP/1.1) serves the same campaigns as REST", async (t) => {
  const transport = createGrpcWebTransport({
    baseUrl: server.baseUrl,
    httpVersion: "1.1",
    interceptors: [
      (next) => (request) => {
        request.header.set("authorization", keys.public);
        return next(request);
      },
    ],
  });
  const viaGrpcWeb = await createClient(CampaignsService, transport).listCampaigns({});
  const viaRest = await rest(server, "GET", "/campaigns", { key: keys.public });
  t.deepEqual(json(CampaignsService.method.listCampaigns.output, viaGrpcWeb), {
    campaigns: viaRest.body,
  });
});

test.serial("ListWebhooks is a bare array on REST, empty until endpoints exist", async (t) => {
  const list = await rest(server, "GET", "/webhooks", { key: keys.secret });
  t.is(list.status, 200);
  t.deepEqual(list.body, []);
  const viaGrpc = await grpcOk(
    grpcCall(server, WebhooksService.method.listWebhooks, {}, keys.secret),
  );
  t.deepEqual(viaGrpc.webhooks, []);
  const viaConnect = await connectClient(server, WebhooksService, {
    key: keys.secret,
  }).listWebhooks({});
  t.deepEqual(viaConnect.webhooks, []);
});

test.serial("health over gRPC and HTTP, readiness of the store", async (t) => {
  t.deepEqual((await rest(server, "GET", "/healthz")).body, { status: "ok" });
  t.deepEqual((await rest(server, "GET", "/readyz")).body, { status: "ok" });
  // grpc.health.v1.HealthCheckResponse: field 1 (status) = 1 (SERVING).
  const status = await new Promise<Buffer>((resolve, reject) => {
    const client = new grpc.Client(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure());
    client.makeUnaryRequest(
      "/grpc.health.v1.Health/Check",
      (value: Buffer) => value,
      (bytes: Buffer) => bytes,
      Buffer.alloc(0),
      (error, response) => {
        client.close();
        if (error) reject(error);
        else resolve(response as Buffer);
      },
    );
  });
  t.deepEqual([...status], [0x08, 0x01]);
});

test.serial("buf curl through gRPC reflection reaches every service", async (t) => {
  const { stdout: services } = await buf([
    "curl",
    "--protocol",
    "grpc",
    "--http2-prior-knowledge",
    "--list-services",
    server.baseUrl,
  ]);
  for (const name of [
    "CustomersService",
    "ReferralsService",
    "RewardsService",
    "CheckpointsService",
    "CampaignsService",
    "WebhooksService",
    "AdminService",
  ]) {
    t.true(services.includes(`referral.v1.${name}`), name);
  }
  const calls: Array<[string, unknown, string]> = [
    ["CustomersService/ListCustomers", { limit: 1 }, keys.secret],
    ["ReferralsService/ListReferrals", {}, keys.secret],
    ["RewardsService/ListRewardGrants", {}, keys.secret],
    [
      "CheckpointsService/IngestCheckpoint",
      { name: "visit", externalUserId: "friend", environment: "ENVIRONMENT_PRODUCTION" },
      keys.public,
    ],
    ["CampaignsService/ListCampaigns", {}, keys.public],
    ["WebhooksService/ListWebhooks", {}, keys.secret],
    ["AdminService/ListApplications", {}, keys.admin],
  ];
  const answers = await Promise.all(
    calls.map(([path, body, key]) =>
      buf([
        "curl",
        "--protocol",
        "grpc",
        "--http2-prior-knowledge",
        "-H",
        `authorization: ${key}`,
        "-d",
        JSON.stringify(body),
        `${server.baseUrl}/referral.v1.${path}`,
      ]),
    ),
  );
  calls.forEach(([path], i) => {
    t.notThrows(() => JSON.parse(answers[i]?.stdout ?? ""), path);
  });
  const { stdout } = await buf([
    "curl",
    "--schema",
    "proto",
    "--protocol",
    "connect",
    "-H",
    `authorization: ${keys.public}`,
    `${server.baseUrl}/referral.v1.CampaignsService/ListCampaigns`,
  ]);
  t.is(JSON.parse(stdout).campaigns.length, 2);
});
