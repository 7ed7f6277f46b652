import { create, type DescMethod, type Message, toBinary } from "@bufbuild/protobuf";
import test from "ava";
import fc from "fast-check";
import { AdminService } from "../../gen/referral/v1/admin_pb.js";
import { CampaignsService, SortOrder } from "../../gen/referral/v1/campaigns_pb.js";
import { CheckpointsService } from "../../gen/referral/v1/checkpoints_pb.js";
import { CustomersService } from "../../gen/referral/v1/customers_pb.js";
import { ReferralsService } from "../../gen/referral/v1/referrals_pb.js";
import { Environment, ReferralStatus } from "../../gen/referral/v1/resources_pb.js";
import { RewardsService } from "../../gen/referral/v1/rewards_pb.js";
import { WebhooksService } from "../../gen/referral/v1/webhooks_pb.js";
import { FieldError, toPlain } from "../../src/contract/plain-codec.js";
import { httpRouteOf } from "../../src/transport/rest/http-rules.js";
import {
  type RestRequestParts,
  requestReader,
  restFromResponse,
  restJsonFromResponse,
} from "../../src/transport/rest/transcode.js";
import { arbitraryMessage } from "../helpers/arbitrary-messages.js";

/**
 * The REST transcoding compiled per route: the response JSON is the plain
 * form (or its `response_body` field) stringified, and requests read path,
 * query and body as the annotation says.
 */

const services = [
  AdminService,
  CampaignsService,
  CheckpointsService,
  CustomersService,
  ReferralsService,
  RewardsService,
  WebhooksService,
];
const annotated = services.flatMap((service) =>
  service.methods.flatMap((method) => {
    const route = httpRouteOf(method);
    return route ? [{ method, route }] : [];
  }),
);

test("every REST response body is the plain form, or its response_body field, as JSON", (t) => {
  t.true(annotated.length > 20);
  for (const { method, route } of annotated) {
    fc.assert(
      fc.property(arbitraryMessage(method.output, { lossy: true }), (response) => {
        const plain = toPlain(method.output, response);
        const expected = route.responseBody ? plain[route.responseBody.jsonName] : plain;
        t.deepEqual(restFromResponse(method.output, route, response), expected);
        t.is(restJsonFromResponse(method.output, route, response), JSON.stringify(expected));
      }),
      { numRuns: 20 },
    );
  }
});

function read(method: DescMethod, parts: Partial<RestRequestParts>): Message {
  const route = httpRouteOf(method);
  if (!route) throw new Error(`${method.name} has no route`);
  return requestReader(method.input, route)({ params: {}, query: {}, body: undefined, ...parts });
}

function readError(method: DescMethod, parts: Partial<RestRequestParts>) {
  try {
    read(method, parts);
    return undefined;
  } catch (error) {
    if (!(error instanceof FieldError)) throw error;
    return `${error.field}: ${error.description}`;
  }
}

/** Messages compare by their bytes: the same fields set to the same values. */
function same(t: { deepEqual(a: unknown, b: unknown): void }, method: DescMethod) {
  return (actual: Message, init: Record<string, unknown>) =>
    t.deepEqual(
      toBinary(method.input, actual),
      toBinary(method.input, create(method.input, init as never)),
    );
}

test("query parameters: either name, typed values, enum words, repeated fields", (t) => {
  const listCustomers = CustomersService.method.listCustomers;
  same(t, listCustomers)(
    read(listCustomers, {
      query: { limit: "2", offset: "10", environment: "test", external_user_id: "u1" },
    }),
    { limit: 2, offset: 10, environment: Environment.TEST, externalUserId: "u1" },
  );
  const listCampaigns = CampaignsService.method.listCampaigns;
  same(t, listCampaigns)(
    read(listCampaigns, { query: { isLive: "true", is_default: "false", sortOrder: "asc" } }),
    { isLive: true, isDefault: false, sortOrder: SortOrder.ASC },
  );
  const updateCampaign = AdminService.method.updateCampaign;
  same(t, updateCampaign)(
    read(updateCampaign, {
      params: { id: "cmp_1" },
      query: { update_mask: ["name", "isLive"] },
      body: { name: "New" },
    }),
    { id: "cmp_1", updateMask: ["name", "isLive"], campaign: { name: "New" } },
  );
  same(t, updateCampaign)(
    read(updateCampaign, { params: { id: "cmp_1" }, query: { updateMask: "name" } }),
    { id: "cmp_1", updateMask: ["name"] },
  );
});

test("query parameters: unknown, repeated where single, untyped, and fields they may not set", (t) => {
  const listCustomers = CustomersService.method.listCustomers;
  t.is(
    readError(listCustomers, { query: { nickname: "x" } }),
    "nickname: is not a known query parameter",
  );
  t.is(readError(listCustomers, { query: { limit: ["1", "2"] } }), "limit: must be given once");
  t.is(readError(listCustomers, { query: { limit: "ten" } }), "limit: must be an integer");
  t.is(
    readError(listCustomers, { query: { environment: "mars" } }),
    "environment: must be one of: production, test",
  );
  t.is(
    readError(CampaignsService.method.listCampaigns, { query: { isLive: "yes" } }),
    "isLive: must be a boolean",
  );
  const updateCampaign = AdminService.method.updateCampaign;
  // The body field and the path variable are not query parameters.
  t.is(
    readError(updateCampaign, { params: { id: "c" }, query: { campaign: "x" } }),
    "campaign: is not a known query parameter",
  );
  t.is(
    readError(updateCampaign, { params: { id: "c" }, query: { id: "d" } }),
    "id: is not a known query parameter",
  );
  const getCustomer = CustomersService.method.getCustomer;
  t.is(
    readError(getCustomer, { params: { id: "c" }, query: { id: "d" } }),
    "id: is not a known query parameter",
  );
});

test("bodies: the whole request or one field; path variables win; no query beside a whole body", (t) => {
  const updateStatus = ReferralsService.method.updateReferralStatus;
  same(t, updateStatus)(
    read(updateStatus, { params: { id: "ref_1" }, body: { id: "ref_2", status: "accepted" } }),
    { id: "ref_1", status: ReferralStatus.ACCEPTED },
  );
  t.is(
    readError(updateStatus, { params: { id: "ref_1" }, query: { reason: "x" }, body: {} }),
    "reason: is not a known query parameter",
  );
  t.is(readError(updateStatus, { params: { id: "r" }, body: [] }), "body: must be a JSON object");
  t.is(
    readError(updateStatus, { params: { id: "r" }, body: { status: "gone" } }),
    "status: must be one of: pending, flagged, accepted, rejected, reversed",
  );
  const createCampaign = AdminService.method.createCampaign;
  t.is(
    readError(createCampaign, { params: { application_id: "app_1" }, body: { rewards: [null] } }),
    "campaign.rewards[0]: must not be null",
  );
  same(t, createCampaign)(
    read(createCampaign, { params: { application_id: "app_1" }, body: { name: "C" } }),
    { applicationId: "app_1", campaign: { name: "C" } },
  );
});
