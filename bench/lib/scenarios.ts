import {
  create,
  type DescMessage,
  type DescMethod,
  type MessageInitShape,
  toBinary,
  toJsonString,
} from "@bufbuild/protobuf";
import { CampaignsService } from "../../gen/referral/v1/campaigns_pb.js";
import { CheckpointsService } from "../../gen/referral/v1/checkpoints_pb.js";
import { CustomersService } from "../../gen/referral/v1/customers_pb.js";
import { ReferralsService } from "../../gen/referral/v1/referrals_pb.js";
import { Environment } from "../../gen/referral/v1/resources_pb.js";
import { userHashOf } from "../../src/domain/identity.js";
import {
  type BenchFraudPolicy,
  benchEnvironment,
  benchKeys,
  type PendingCampaign,
  referralCodeOf,
  type SeededData,
} from "./seed.js";
import type { GrpcRequestSpec, HttpRequestSpec } from "./senders.js";

/** The three ways the contract is served. */
export type Protocol = "rest" | "grpc" | "connect";

/** One RPC as a load generator sends it, request `i` on every protocol. */
export interface Scenario {
  readonly name: string;
  readonly method: DescMethod;
  /** The request message of call `i` (gRPC and Connect). */
  readonly message: (i: number) => MessageInitShape<DescMessage>;
  /** The same call in REST terms: the path and JSON body of call `i`. */
  readonly rest: {
    readonly method: "GET" | "POST";
    readonly path: (i: number) => string;
    readonly body?: (i: number) => unknown;
  };
  /** The API key: secret for reads, public for the writes apps make. */
  readonly key: string;
  /** Every call is the same bytes, so they are encoded once. */
  readonly constant?: boolean;
}

/** The gRPC path of a method: `/package.Service/Method`. */
export function rpcPath(method: DescMethod): string {
  return `/${method.parent.typeName}/${method.name}`;
}

/** The scenario as a REST request. */
export function restRequest(scenario: Scenario): HttpRequestSpec {
  const { body } = scenario.rest;
  return {
    method: scenario.rest.method,
    path: scenario.rest.path,
    headers: {
      authorization: scenario.key,
      ...(body ? { "content-type": "application/json" } : {}),
    },
    ...(body ? { body: memo(scenario, (i) => JSON.stringify(body(i))) } : {}),
  };
}

/** The scenario as a gRPC call. */
export function grpcRequest(scenario: Scenario): GrpcRequestSpec {
  const input = scenario.method.input;
  return {
    path: rpcPath(scenario.method),
    metadata: { authorization: scenario.key },
    message: memo(scenario, (i) => toBinary(input, create(input, scenario.message(i)))),
  };
}

/** The scenario as a Connect unary call with the JSON codec (connect-web's default). */
export function connectRequest(scenario: Scenario): HttpRequestSpec {
  const input = scenario.method.input;
  return {
    method: "POST",
    path: () => rpcPath(scenario.method),
    headers: {
      authorization: scenario.key,
      "content-type": "application/json",
      "connect-protocol-version": "1",
    },
    body: memo(scenario, (i) => toJsonString(input, create(input, scenario.message(i)))),
  };
}

function memo<T>(scenario: Scenario, make: (i: number) => T): (i: number) => T {
  if (!scenario.constant) return make;
  const value = make(0);
  return () => value;
}

/** GetCustomer, ListCampaigns and ListCustomers on the seeded data. */
export function readScenarios(seeded: SeededData): Scenario[] {
  const id = seeded.sampleCustomerId;
  return [
    {
      name: "GetCustomer",
      method: CustomersService.method.getCustomer,
      message: () => ({ id }),
      rest: { method: "GET", path: () => `/customers/${id}` },
      key: benchKeys.secret,
      constant: true,
    },
    {
      name: "ListCampaigns",
      method: CampaignsService.method.listCampaigns,
      message: () => ({}),
      rest: { method: "GET", path: () => "/campaigns" },
      key: benchKeys.secret,
      constant: true,
    },
    {
      name: "ListCustomers",
      method: CustomersService.method.listCustomers,
      message: () => ({ limit: 20 }),
      rest: { method: "GET", path: () => "/customers?limit=20" },
      key: benchKeys.secret,
      constant: true,
    },
  ];
}

/** The write scenarios; each names the seeded pool its requests consume. */
export type WriteKind =
  | "identify-new"
  | "identify-new-verified"
  | "identify-existing"
  | "create-referral"
  | "create-referral-no-policy"
  | "create-referral-full-policy"
  | "trigger-checkpoint"
  | "trigger-checkpoint-rewards";

/** Every write kind, in report order. */
export const writeKinds: readonly WriteKind[] = [
  "identify-new",
  "identify-new-verified",
  "identify-existing",
  "create-referral",
  "create-referral-no-policy",
  "create-referral-full-policy",
  "trigger-checkpoint",
  "trigger-checkpoint-rewards",
];

const grpcEnvironment = benchEnvironment === "test" ? Environment.TEST : Environment.PRODUCTION;

/**
 * A write scenario. `tag` keeps the new customers of one run apart from
 * another's; `customers` is the seeded base (identify-existing cycles
 * through it, create-referral's referrers come from it).
 */
export function writeScenario(kind: WriteKind, seeded: SeededData, tag: string): Scenario {
  const base = seeded.customers;
  switch (kind) {
    case "identify-new":
    case "identify-new-verified":
    case "identify-existing": {
      const externalUserId = (i: number) =>
        kind === "identify-existing" ? `c-${i % base}` : `n-${tag}-${i}`;
      return postScenario(
        kind,
        CustomersService.method.identifyCustomer,
        "/customers/identify",
        (i) => ({
          externalUserId: externalUserId(i),
          name: `Bench Customer ${i}`,
          email: `${externalUserId(i)}@example.com`,
          // An app changes an existing customer with its backend's userHash
          // (docs/trust.md); identify-new-verified signs new ones, to weigh its cost.
          ...(kind === "identify-new"
            ? {}
            : { userHash: userHashOf(benchKeys.identity, externalUserId(i)) }),
        }),
      );
    }
    case "create-referral":
      // Referee `p-<i>` was seeded without a referral; the referrers take turns.
      return postScenario(kind, ReferralsService.method.createReferral, "/referrals", (i) => ({
        referralCode: referralCodeOf(i % base),
        refereeExternalUserId: `p-${i}`,
      }));
    case "create-referral-no-policy":
    case "create-referral-full-policy":
      // The same, from the backend with the end user's address (see
      // `fraudPolicyOf`): the addresses spread over many networks, as a
      // program's users do, where the load generator's own connection is
      // one address.
      return {
        ...postScenario(kind, ReferralsService.method.createReferral, "/referrals", (i) => ({
          referralCode: referralCodeOf(i % base),
          refereeExternalUserId: `p-${i}`,
          context: { ip: spreadAddress(i) },
        })),
        key: benchKeys.secret,
      };
    case "trigger-checkpoint":
    case "trigger-checkpoint-rewards":
      // Referee `t-<i>` has a pending referral in a campaign of its own (without
      // rewards, or with two: see `pendingCampaignOf`); its trigger converts it.
      // Sent by the backend with the secret key, as integrations do (docs/trust.md):
      // its grants follow their approval, where an app's would wait for confirmation.
      return {
        ...postScenario(
          kind,
          CheckpointsService.method.ingestCheckpoint,
          "/checkpoints/ingest",
          (i) => ({ name: seeded.rewardTrigger, externalUserId: `t-${i}` }),
        ),
        key: benchKeys.secret,
      };
  }
}

/** A write an app makes (public key): the same fields on every protocol, plus the environment. */
function postScenario(
  name: string,
  method: DescMethod,
  path: string,
  fields: (i: number) => Record<string, unknown>,
): Scenario {
  return {
    name,
    method,
    message: (i) => ({ ...fields(i), environment: grpcEnvironment }),
    rest: {
      method: "POST",
      path: () => path,
      body: (i) => ({ ...fields(i), environment: benchEnvironment }),
    },
    key: benchKeys.public,
  };
}

/** Which seeded pool a write kind consumes, one entry per request; none for identifies. */
export function poolOf(kind: WriteKind): "referees" | "pendingReferees" | undefined {
  if (kind.startsWith("create-referral")) return "referees";
  if (kind === "trigger-checkpoint" || kind === "trigger-checkpoint-rewards") {
    return "pendingReferees";
  }
  return undefined;
}

/**
 * The `i`th end user's address: each of 65,536 requests in a row on a /24
 * network of its own (an odd multiplier permutes them), scattered.
 */
function spreadAddress(i: number): string {
  const network = (i * 40_503) % 65_536;
  return `10.${network >> 8}.${network & 255}.${(i >> 16) % 256}`;
}

/**
 * The fraud policy of the campaign a write kind's referrals go to:
 * create-referral runs the environment's default rules, the two others a
 * policy of every rule and one of none, so they weigh what the policy costs
 * (both sent by the backend with the end user's address, so the evidence
 * has networks to count).
 */
export function fraudPolicyOf(kind: WriteKind): BenchFraudPolicy | undefined {
  if (kind === "create-referral-full-policy") return "full";
  if (kind === "create-referral-no-policy") return "none";
  return undefined;
}

/**
 * The rewards of the campaign a write kind's pending referrals are in:
 * `trigger-checkpoint` converts in a campaign without rewards,
 * `trigger-checkpoint-rewards` in one with a reward per party (the
 * referrer's limited to 5 a month), so the two measure what grants cost.
 */
export function pendingCampaignOf(kind: WriteKind): PendingCampaign | undefined {
  if (kind === "trigger-checkpoint") return "none";
  if (kind === "trigger-checkpoint-rewards") return "two-rewards";
  return undefined;
}
