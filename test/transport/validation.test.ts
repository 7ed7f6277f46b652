import { fromBinary } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import { Code } from "@connectrpc/connect";
import test from "ava";
import { BadRequestSchema } from "../../gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../../gen/google/rpc/status_pb.js";
import { CheckpointsService } from "../../gen/referral/v1/checkpoints_pb.js";
import { CustomersService } from "../../gen/referral/v1/customers_pb.js";
import { ReferralsService } from "../../gen/referral/v1/referrals_pb.js";
import { connectClient, grpcCall, keys, rest, useServer } from "../helpers/server.js";

const server = useServer();

async function customerCount(): Promise<number> {
  return (await rest(server, "GET", "/customers", { key: keys.secret })).body.total;
}

const restCases: Array<[string, string, unknown, string]> = [
  ["/customers/identify", "missing externalUserId", { name: "Ada" }, "externalUserId"],
  ["/customers/identify", "missing name", { externalUserId: "u" }, "name"],
  ["/customers/identify", "blank name", { externalUserId: "u", name: "  " }, "name"],
  ["/customers/identify", "name of wrong type", { externalUserId: "u", name: 7 }, "name"],
  [
    "/customers/identify",
    "externalUserId of wrong type",
    { externalUserId: true, name: "A" },
    "externalUserId",
  ],
  [
    "/customers/identify",
    "bad email",
    { externalUserId: "u", name: "A", email: "not-an-email" },
    "email",
  ],
  [
    "/customers/identify",
    "bad environment word",
    { externalUserId: "u", name: "A", environment: "staging" },
    "environment",
  ],
  [
    "/customers/identify",
    "customProperties not an object",
    { externalUserId: "u", name: "A", customProperties: [1] },
    "customProperties",
  ],
  ["/customers/identify", "oversize name", { externalUserId: "u", name: "x".repeat(300) }, "name"],
  [
    "/customers/identify",
    "oversize customProperties",
    { externalUserId: "u", name: "A", customProperties: { big: "x".repeat(17000) } },
    "customProperties",
  ],
  [
    "/customers/identify",
    "unknown body field",
    { externalUserId: "u", name: "A", nickname: "x" },
    "nickname",
  ],
  ["/referrals", "missing referralCode", { refereeExternalUserId: "u" }, "referralCode"],
  ["/referrals", "missing referee", { referralCode: "ABCDEFGH" }, "refereeId"],
  ["/referrals", "referralCode of wrong type", { referralCode: 1, refereeId: "x" }, "referralCode"],
  ["/checkpoints/ingest", "missing name", { externalUserId: "u", environment: "test" }, "name"],
  [
    "/checkpoints/ingest",
    "missing externalUserId",
    { name: "n", environment: "test" },
    "externalUserId",
  ],
  ["/checkpoints/ingest", "missing environment", { name: "n", externalUserId: "u" }, "environment"],
];

for (const [path, name, body, field] of restCases) {
  test.serial(`REST ${path}: ${name} is 400 naming ${field} and changes nothing`, async (t) => {
    const before = await customerCount();
    const response = await rest(server, "POST", path, { key: keys.secret, body });
    t.is(response.status, 400);
    t.is(response.body.code, "invalid_argument");
    t.true(response.body.message.startsWith(field), response.body.message);
    t.is(response.body.details[0]?.field, field);
    t.is(await customerCount(), before);
  });
}

test.serial(
  "REST query parameters: unknown, wrong type and bad enum words are 400 naming them",
  async (t) => {
    for (const [query, field] of [
      ["?colour=red", "colour"],
      ["?limit=ten", "limit"],
      ["?limit=1000", "limit"],
      ["?offset=-1", "offset"],
      ["?environment=staging", "environment"],
    ]) {
      const response = await rest(server, "GET", `/customers${query}`, { key: keys.secret });
      t.is(response.status, 400, query);
      t.is(response.body.details[0]?.field, field, query);
    }
    const status = await rest(server, "GET", "/referrals?status=done", { key: keys.secret });
    t.is(status.status, 400);
    t.is(status.body.details[0].field, "status");
    const flag = await rest(server, "GET", "/campaigns?isLive=yes", { key: keys.public });
    t.is(flag.status, 400);
    t.is(flag.body.details[0].field, "isLive");
    const snake = await rest(server, "GET", "/campaigns?is_live=true&sort_order=asc", {
      key: keys.public,
    });
    t.is(snake.status, 200);
  },
);

test.serial(
  "REST framing: invalid JSON 400, wrong content type 415, empty JSON body is {}, unknown route 404, wrong method 405",
  async (t) => {
    const invalid = await rest(server, "POST", "/customers/identify", {
      key: keys.public,
      rawBody: "{nope",
    });
    t.is(invalid.status, 400);
    t.is(invalid.body.code, "invalid_argument");
    const text = await rest(server, "POST", "/customers/identify", {
      key: keys.public,
      rawBody: "x",
      contentType: "text/plain",
    });
    t.is(text.status, 415);
    const empty = await rest(server, "POST", "/customers/identify", {
      key: keys.public,
      rawBody: "",
    });
    t.is(empty.status, 400);
    t.is(empty.body.details[0].field, "externalUserId");
    const missing = await rest(server, "GET", "/nowhere", { key: keys.secret });
    t.is(missing.status, 404);
    t.deepEqual(Object.keys(missing.body), ["code", "message", "details"]);
    const method = await rest(server, "DELETE", "/customers", { key: keys.secret });
    t.is(method.status, 405);
    t.is(method.headers.get("allow"), "GET");
    t.deepEqual(Object.keys(method.body), ["code", "message", "details"]);
  },
);

test.serial("REST NOT_FOUND: unknown customer, referral code, referee, campaign", async (t) => {
  t.is((await rest(server, "GET", "/customers/cus_missing", { key: keys.secret })).status, 404);
  await rest(server, "POST", "/customers/identify", {
    key: keys.public,
    body: { externalUserId: "r", name: "R" },
  });
  t.is(
    (
      await rest(server, "POST", "/referrals", {
        key: keys.public,
        body: { referralCode: "ZZZZZZZZ", refereeExternalUserId: "r" },
      })
    ).status,
    404,
  );
  t.is(
    (
      await rest(server, "POST", "/checkpoints/ingest", {
        key: keys.public,
        body: { name: "n", externalUserId: "ghost", environment: "production" },
      })
    ).status,
    404,
  );
  const code = (await rest(server, "GET", "/customers?externalUserId=r", { key: keys.secret })).body
    .data[0].referralCode;
  const campaign = await rest(server, "POST", "/referrals", {
    key: keys.public,
    body: { referralCode: code, refereeExternalUserId: "r", campaignId: "cmp_missing" },
  });
  t.is(campaign.status, 404);
  t.regex(campaign.body.message, /campaign/);
});

test.serial(
  "gRPC: missing fields are INVALID_ARGUMENT with a BadRequest detail naming the field",
  async (t) => {
    const cases = [
      [CustomersService.method.identifyCustomer, { name: "Ada" }, "externalUserId"],
      [CustomersService.method.identifyCustomer, { externalUserId: "u" }, "name"],
      [
        CustomersService.method.identifyCustomer,
        { externalUserId: "u", name: "A", email: "bad" },
        "email",
      ],
      [ReferralsService.method.createReferral, { refereeId: "x" }, "referralCode"],
      [
        CheckpointsService.method.ingestCheckpoint,
        { name: "n", externalUserId: "u" },
        "environment",
      ],
      [CustomersService.method.listCustomers, { limit: 101 }, "limit"],
      [CustomersService.method.getCustomer, {}, "id"],
    ] as const;
    for (const [method, request, field] of cases) {
      const outcome = await grpcCall(server, method as never, request as never, keys.secret);
      t.false(outcome.ok);
      if (outcome.ok) continue;
      t.is(outcome.code, Code.InvalidArgument, field);
      t.true(outcome.details.startsWith(field), outcome.details);
      const [statusBytes] = outcome.metadata.get("grpc-status-details-bin") as Buffer[];
      const status = fromBinary(StatusSchema, statusBytes as Buffer);
      const [detail] = status.details;
      const badRequest = detail && anyUnpack(detail, BadRequestSchema);
      t.is(badRequest?.fieldViolations[0]?.field, field);
    }
  },
);

test.serial("gRPC: an unknown enum number is INVALID_ARGUMENT", async (t) => {
  const outcome = await grpcCall(
    server,
    CustomersService.method.listCustomers,
    { environment: 9 as never },
    keys.secret,
  );
  t.false(outcome.ok);
  if (!outcome.ok) t.is(outcome.code, Code.InvalidArgument);
});

test.serial("Connect: the same error, code and field detail", async (t) => {
  const client = connectClient(server, CustomersService, { key: keys.public });
  const error = await t.throwsAsync(() => client.identifyCustomer({ externalUserId: "u" }));
  const connectError = error as unknown as import("@connectrpc/connect").ConnectError;
  t.is(connectError.code, Code.InvalidArgument);
  t.is(connectError.findDetails(BadRequestSchema)[0]?.fieldViolations[0]?.field, "name");
});
