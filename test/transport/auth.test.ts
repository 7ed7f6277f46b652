import type { DescMethod } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import test from "ava";
import { AdminService } from "../../gen/referral/v1/admin_pb.js";
import { CampaignsService } from "../../gen/referral/v1/campaigns_pb.js";
import { CheckpointsService } from "../../gen/referral/v1/checkpoints_pb.js";
import { CustomersService } from "../../gen/referral/v1/customers_pb.js";
import { Access } from "../../gen/referral/v1/options_pb.js";
import { ReferralsService } from "../../gen/referral/v1/referrals_pb.js";
import { RewardsService } from "../../gen/referral/v1/rewards_pb.js";
import { WebhooksService } from "../../gen/referral/v1/webhooks_pb.js";
import { methodAccess } from "../../src/contract/options.js";
import { httpRouteOf } from "../../src/transport/rest/http-rules.js";
import {
  closeGrpcClient,
  grpcCall,
  keys,
  rest,
  startServer,
  useServer,
} from "../helpers/server.js";

const server = useServer();
let revokedKey: string;

test.serial.before(async () => {
  const created = await rest(server, "POST", "/admin/applications", {
    key: keys.admin,
    body: { name: "Revoked app" },
  });
  revokedKey = created.body.secretKey;
  const listed = await rest(
    server,
    "GET",
    `/admin/applications/${created.body.application.id}/api-keys`,
    {
      key: keys.admin,
    },
  );
  const secret = listed.body.find((k: { kind: string }) => k.kind === "secret");
  const revoked = await rest(server, "POST", `/admin/api-keys/${secret.id}/revoke`, {
    key: keys.admin,
  });
  if (revoked.status !== 200) throw new Error("revoke failed");
});

const tenantMethods: DescMethod[] = [
  CustomersService,
  ReferralsService,
  RewardsService,
  CheckpointsService,
  CampaignsService,
  WebhooksService,
].flatMap((service) => service.methods);

/** A REST path for a method, with any path variable filled in. */
function restPathOf(method: DescMethod): { verb: string; path: string } {
  const route = httpRouteOf(method);
  if (!route) throw new Error(`${method.name} has no REST route`);
  return { verb: route.verb, path: route.template.replace(/\{[^}]+\}/g, "some-id") };
}

const publicMethods = new Set([
  "IdentifyCustomer",
  // An app shows a user their own share links, with its backend's userHash (docs/links.md).
  "ListShareLinks",
  "CreateReferral",
  "IngestCheckpoint",
  "ListCampaigns",
  // The routes the Flock mobile SDKs call with the app's public key.
  "GetLiveCampaign",
  "PingCampaign",
  "ListCampaignCheckpoints",
]);

test("the contract marks exactly the spec's and the SDKs' public RPCs as public", (t) => {
  const marked = tenantMethods.filter((m) => methodAccess(m) === Access.PUBLIC).map((m) => m.name);
  t.deepEqual(new Set(marked), publicMethods);
});

for (const method of tenantMethods) {
  const isPublic = publicMethods.has(method.name);
  test(`${method.name}: no key, wrong key, revoked key, ${isPublic ? "public" : "secret-only"}`, async (t) => {
    const { verb, path } = restPathOf(method);
    const cases: Array<[string, string | undefined, number, Code | undefined]> = [
      ["no key", undefined, 401, Code.Unauthenticated],
      ["wrong key", "sk_not_a_key", 401, Code.Unauthenticated],
      ["revoked key", revokedKey, 401, Code.Unauthenticated],
      ["Bearer wrong key", "Bearer sk_not_a_key", 401, Code.Unauthenticated],
      ["public key", keys.public, isPublic ? 0 : 403, isPublic ? undefined : Code.PermissionDenied],
      ["secret key", keys.secret, 0, undefined],
      ["Bearer secret key", `Bearer ${keys.secret}`, 0, undefined],
    ];
    for (const [name, key, status, code] of cases) {
      const viaRest = await rest(server, verb, path, {
        key,
        body: verb === "GET" ? undefined : {},
      });
      const viaGrpc = await grpcCall(server, method, {}, key);
      if (code === undefined) {
        // Authorized: whatever the outcome, it is not an auth error.
        t.false([401, 403].includes(viaRest.status), `${name} REST ${viaRest.status}`);
        t.false(
          !viaGrpc.ok && [Code.Unauthenticated, Code.PermissionDenied].includes(viaGrpc.code),
          `${name} gRPC`,
        );
      } else {
        t.is(viaRest.status, status, `${name} REST`);
        t.is(
          viaRest.body.code,
          code === Code.Unauthenticated ? "unauthenticated" : "permission_denied",
        );
        t.false(viaGrpc.ok, `${name} gRPC`);
        if (!viaGrpc.ok) t.is(viaGrpc.code, code, `${name} gRPC code`);
      }
    }
  });
}

test("admin RPCs refuse API keys and accept only ADMIN_TOKEN", async (t) => {
  for (const key of [undefined, keys.secret, keys.public, "wrong"]) {
    const viaRest = await rest(server, "GET", "/admin/applications", { key });
    t.is(viaRest.status, 401);
    const viaGrpc = await grpcCall(server, AdminService.method.listApplications, {}, key);
    t.false(viaGrpc.ok);
    if (!viaGrpc.ok) t.is(viaGrpc.code, Code.Unauthenticated);
  }
  const ok = await rest(server, "GET", "/admin/applications", { key: keys.admin });
  t.is(ok.status, 200);
  t.is(ok.body.length, 2);
});

test("the admin API is disabled without ADMIN_TOKEN", async (t) => {
  const other = await startServer({ env: { ADMIN_TOKEN: "" } });
  try {
    const viaRest = await rest(other, "GET", "/admin/applications", { key: keys.admin });
    t.is(viaRest.status, 403);
    t.regex(viaRest.body.message, /ADMIN_TOKEN/);
  } finally {
    closeGrpcClient(other);
    await other.stop();
  }
});
