import { setTimeout as sleep } from "node:timers/promises";
import {
  create,
  type DescMethod,
  fromBinary,
  type Message,
  type MessageInitShape,
  type MessageShape,
  toBinary,
} from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import * as grpc from "@grpc/grpc-js";
import test from "ava";
import { CustomersService } from "../../gen/referral/v1/customers_pb.js";
import { ReferralsService } from "../../gen/referral/v1/referrals_pb.js";
import { toPlain } from "../../src/contract/plain-codec.js";
import { type Caller, callerKey } from "../../src/services/context.js";
import { claimIdempotencyKey, updateIdempotencyOutcome } from "../../src/store/idempotency.js";
import { createSecretBox } from "../../src/store/secret-box.js";
import { queryPlansOf, type Store } from "../../src/store/store.js";
import {
  defaultIdempotencyTimes,
  idempotencyKeys,
  requestHashOf,
} from "../../src/transport/idempotency.js";
import { CallContext, createPipeline, type Rpc } from "../../src/transport/pipeline.js";
import { engineNames, storeTest } from "../helpers/engines.js";
import {
  connectClient,
  type Json,
  keys,
  rest,
  startServer,
  type TestServer,
} from "../helpers/server.js";

// Idempotency keys: over real servers (REST, gRPC, Connect), then the
// interceptor on its own over each storage engine, with an implementation
// the test holds and counts.

const noRateLimits = {
  RATE_LIMIT_PUBLIC: "off",
  RATE_LIMIT_SECRET: "off",
  RATE_LIMIT_ADMIN: "off",
};
const hour = 3_600_000;
const createReferral = ReferralsService.method.createReferral;

let customers = 0;

/** A CreateReferral request for a new referrer and a new referee (none yet when `identifyReferee` is false). */
async function newReferralRequest(
  server: TestServer,
  options: { identifyReferee?: boolean } = {},
): Promise<{ referralCode: string; refereeExternalUserId: string }> {
  customers += 1;
  const referrer = await rest(server, "POST", "/customers/identify", {
    key: keys.public,
    body: { externalUserId: `referrer-${customers}`, name: "Ada" },
  });
  const refereeExternalUserId = `referee-${customers}`;
  if (options.identifyReferee !== false) await identify(server, refereeExternalUserId);
  return { referralCode: referrer.body.referralCode, refereeExternalUserId };
}

function identify(server: TestServer, externalUserId: string) {
  return rest(server, "POST", "/customers/identify", {
    key: keys.public,
    body: { externalUserId, name: "Bob" },
  });
}

/** POST /referrals with an idempotency key. */
function restCreate(server: TestServer, body: object, idempotencyKey?: string) {
  return rest(server, "POST", "/referrals", {
    key: keys.public,
    body,
    headers: idempotencyKey ? { "idempotency-key": idempotencyKey } : {},
  });
}

/** What a gRPC or Connect call gave: the REST form of its result or its error, and the replay header. */
type WireResult =
  | { ok: true; body: Json; replayed: string | undefined }
  | {
      ok: false;
      code: Code;
      message: string;
      replayed: string | undefined;
      statusDetails: boolean;
    };

/** A unary gRPC call with an idempotency key in its metadata. */
function grpcWithKey<M extends DescMethod>(
  server: TestServer,
  method: M,
  request: MessageInitShape<M["input"]>,
  idempotencyKey: string,
): Promise<WireResult> {
  const client = new grpc.Client(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure());
  const metadata = new grpc.Metadata();
  metadata.set("authorization", keys.public);
  metadata.set("idempotency-key", idempotencyKey);
  return new Promise((resolve) => {
    let replayed: string | undefined;
    const call = client.makeUnaryRequest(
      `/${method.parent.typeName}/${method.name}`,
      (value: Message) => Buffer.from(toBinary(method.input, value)),
      (bytes: Buffer) => fromBinary(method.output, bytes),
      create(method.input, request),
      metadata,
      (error, response) => {
        client.close();
        if (error) {
          resolve({
            ok: false,
            code: error.code as number as Code,
            message: error.details,
            replayed: error.metadata.get("idempotent-replayed")[0] as string | undefined,
            statusDetails: error.metadata.get("grpc-status-details-bin").length > 0,
          });
        } else {
          resolve({ ok: true, body: restBodyOf(method, response as Message), replayed });
        }
      },
    );
    call.on("metadata", (received) => {
      replayed = received.get("idempotent-replayed")[0] as string | undefined;
    });
  });
}

/** A Connect (JSON) call with an idempotency key in its headers. */
async function connectWithKey(
  server: TestServer,
  body: MessageInitShape<typeof createReferral.input>,
  idempotencyKey: string,
): Promise<WireResult> {
  let replayed: string | undefined;
  try {
    const response = await connectClient(server, ReferralsService, {
      key: keys.public,
    }).createReferral(body, {
      headers: { "idempotency-key": idempotencyKey },
      onHeader: (headers) => {
        replayed = headers.get("idempotent-replayed") ?? undefined;
      },
    });
    return { ok: true, body: restBodyOf(createReferral, response), replayed };
  } catch (error) {
    const connectError = ConnectError.from(error);
    return {
      ok: false,
      code: connectError.code,
      message: connectError.rawMessage,
      replayed: connectError.metadata.get("idempotent-replayed") ?? undefined,
      statusDetails: connectError.details.length > 0,
    };
  }
}

/** A response message as REST shows it (CreateReferral's REST body is its `referral`). */
function restBodyOf(method: DescMethod, message: Message): Json {
  const plain = toPlain(method.output, message) as Json;
  return method === createReferral ? plain.referral : plain;
}

async function refereeReferrals(server: TestServer, refereeExternalUserId: string) {
  const customer = await rest(server, "GET", `/customers?externalUserId=${refereeExternalUserId}`, {
    key: keys.secret,
  });
  const refereeId = customer.body.data[0].id;
  return (await rest(server, "GET", `/referrals?refereeId=${refereeId}`, { key: keys.secret }))
    .body;
}

/** Runs `body` against a server of its own, stopped afterwards. */
async function withServer(
  options: Parameters<typeof startServer>[0],
  body: (server: TestServer) => Promise<void>,
): Promise<void> {
  const server = await startServer({ ...options, env: { ...noRateLimits, ...options?.env } });
  try {
    await body(server);
  } finally {
    await server.stop();
  }
}

for (const engine of engineNames) {
  test(`${engine}: 50 concurrent retries of one CreateReferral with one key make one referral and 50 identical responses (REST)`, async (t) => {
    await withServer({ engine }, async (server) => {
      const body = await newReferralRequest(server);
      // Fifty open connections first, so the fifty calls arrive together.
      await Promise.all(
        Array.from({ length: 50 }, () => rest(server, "GET", "/campaigns", { key: keys.public })),
      );
      let aborted = 0;
      // As a client does: an ABORTED (409) answer means the first call is
      // still running, so it retries a moment later with the same key.
      const send = async () => {
        for (;;) {
          const response = await restCreate(server, body, `fifty-${engine}`);
          if (response.status !== 409) return response;
          t.is(response.body.code, "aborted");
          aborted += 1;
          await sleep(5);
        }
      };
      const responses = await Promise.all(Array.from({ length: 50 }, send));
      t.deepEqual(
        responses.map((response) => response.status),
        Array(50).fill(201),
      );
      for (const response of responses) t.deepEqual(response.body, responses[0]?.body);
      const ran = responses.filter(
        (response) => response.headers.get("idempotent-replayed") !== "true",
      );
      t.is(ran.length, 1, "one call ran; the others got its response replayed");
      t.is((await refereeReferrals(server, body.refereeExternalUserId)).total, 1);
      t.log(`${aborted} answers were ABORTED while the first ran, and retried`);
    });
  });
}

test("a retry over gRPC and Connect replays the first response instead of running again", async (t) => {
  await withServer({}, async (server) => {
    const body = await newReferralRequest(server);
    const first = await restCreate(server, body, "cross-protocol");
    t.is(first.status, 201);
    t.is(first.headers.get("idempotent-replayed"), null, "the first call is not a replay");
    t.is(first.body.status, "pending");
    // A second run would now answer with the rejected referral.
    const review = await rest(server, "PATCH", `/referrals/${first.body.id}`, {
      key: keys.secret,
      body: { status: "rejected" },
    });
    t.is(review.body.status, "rejected");

    const viaGrpc = await grpcWithKey(server, createReferral, body, "cross-protocol");
    t.deepEqual(viaGrpc, { ok: true, body: first.body, replayed: "true" });
    const viaConnect = await connectWithKey(server, body, "cross-protocol");
    t.deepEqual(viaConnect, { ok: true, body: first.body, replayed: "true" });
    const viaRest = await restCreate(server, body, "cross-protocol");
    t.is(viaRest.status, 201);
    t.deepEqual(viaRest.body, first.body);
    t.is(viaRest.headers.get("idempotent-replayed"), "true");

    const withoutKey = await restCreate(server, body);
    t.is(withoutKey.body.status, "rejected", "without the key the call runs");
  });
});

test("the same key with a different request is INVALID_ARGUMENT on every protocol and runs nothing", async (t) => {
  await withServer({}, async (server) => {
    const body = await newReferralRequest(server);
    t.is((await restCreate(server, body, "reused")).status, 201);
    const other = await newReferralRequest(server);

    const viaRest = await restCreate(server, other, "reused");
    t.is(viaRest.status, 400);
    t.is(viaRest.body.code, "invalid_argument");
    t.regex(viaRest.body.message, /different request/);
    const viaGrpc = await grpcWithKey(server, createReferral, other, "reused");
    t.like(viaGrpc, { ok: false, code: Code.InvalidArgument });
    const viaConnect = await connectWithKey(server, other, "reused");
    t.like(viaConnect, { ok: false, code: Code.InvalidArgument });
    const otherRpc = await rest(server, "POST", "/customers/identify", {
      key: keys.public,
      body: { externalUserId: "someone", name: "Eve" },
      headers: { "idempotency-key": "reused" },
    });
    t.is(otherRpc.status, 400, "another RPC under the key is another request");
    t.is((await refereeReferrals(server, other.refereeExternalUserId)).total, 0);
  });
});

test("a retry while the first call runs is ABORTED on every protocol (REST 409), then replays its response", async (t) => {
  await withServer({}, async (server) => {
    const body = await newReferralRequest(server);
    // The first call is made slow by holding its referral insert until the
    // retries have been answered (the services read the collection's
    // methods at call time, so this reaches them).
    const referrals = server.app.store.system.referrals;
    const insertOne = referrals.insertOne;
    let entered: () => void = () => {};
    const inside = new Promise<void>((resolve) => {
      entered = resolve;
    });
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    referrals.insertOne = async (...args) => {
      entered();
      await held;
      return insertOne.apply(referrals, args);
    };
    try {
      const first = restCreate(server, body, "slow");
      await inside;
      const viaRest = await restCreate(server, body, "slow");
      t.is(viaRest.status, 409);
      t.is(viaRest.body.code, "aborted");
      t.like(await grpcWithKey(server, createReferral, body, "slow"), {
        ok: false,
        code: Code.Aborted,
      });
      t.like(await connectWithKey(server, body, "slow"), { ok: false, code: Code.Aborted });
      release();
      const finished = await first;
      t.is(finished.status, 201);
      const retry = await restCreate(server, body, "slow");
      t.is(retry.status, 201);
      t.deepEqual(retry.body, finished.body);
      t.is(retry.headers.get("idempotent-replayed"), "true");
    } finally {
      release();
      referrals.insertOne = insertOne;
    }
  });
});

test("a key expires after 24 hours: a retry then runs again", async (t) => {
  let offsetMs = 0;
  await withServer({ clock: () => new Date(Date.now() + offsetMs) }, async (server) => {
    const body = await newReferralRequest(server);
    const first = await restCreate(server, body, "expiring");
    t.is(first.status, 201);
    await rest(server, "PATCH", `/referrals/${first.body.id}`, {
      key: keys.secret,
      body: { status: "rejected" },
    });
    await rest(server, "POST", "/customers/identify", {
      key: keys.public,
      body: { externalUserId: "other-key-holder", name: "Ann" },
      headers: { "idempotency-key": "expiring-too" },
    });

    offsetMs = 24 * hour - 60_000;
    const stillKept = await restCreate(server, body, "expiring");
    t.is(stillKept.headers.get("idempotent-replayed"), "true");
    t.is(stillKept.body.status, "pending");

    offsetMs = 24 * hour + 1000;
    const again = await restCreate(server, body, "expiring");
    t.is(again.status, 201);
    t.is(again.headers.get("idempotent-replayed"), null, "the expired key ran again");
    t.is(again.body.status, "rejected");
    const replayed = await restCreate(server, body, "expiring");
    t.is(replayed.headers.get("idempotent-replayed"), "true", "and the key holds the new outcome");
    t.deepEqual(replayed.body, again.body);

    // The embedded engine has no TTL index: keyed calls sweep expired keys.
    const expired = await server.app.store.system.idempotencyKeys.countDocuments({
      expiresAt: { $lte: new Date(Date.now() + offsetMs) },
    });
    t.is(expired, 0, "the expired keys are removed");
  });
});

test("an error outcome is replayed on every protocol, details included", async (t) => {
  await withServer({}, async (server) => {
    const body = await newReferralRequest(server, { identifyReferee: false });
    const first = await restCreate(server, body, "failing");
    t.is(first.status, 404);
    await identify(server, body.refereeExternalUserId);

    const viaRest = await restCreate(server, body, "failing");
    t.is(viaRest.status, 404);
    t.deepEqual(viaRest.body, first.body);
    t.is(viaRest.headers.get("idempotent-replayed"), "true");
    t.deepEqual(await grpcWithKey(server, createReferral, body, "failing"), {
      ok: false,
      code: Code.NotFound,
      message: first.body.message,
      replayed: "true",
      statusDetails: false,
    });
    t.like(await connectWithKey(server, body, "failing"), {
      ok: false,
      code: Code.NotFound,
      message: first.body.message,
      replayed: "true",
    });
    t.is((await restCreate(server, body)).status, 201, "without the key the call runs");

    const invalid = { externalUserId: "nameless" };
    const refused = await rest(server, "POST", "/customers/identify", {
      key: keys.public,
      body: invalid,
      headers: { "idempotency-key": "invalid" },
    });
    t.is(refused.status, 400);
    t.true(refused.body.details.length > 0, "a field violation");
    const refusedAgain = await rest(server, "POST", "/customers/identify", {
      key: keys.public,
      body: invalid,
      headers: { "idempotency-key": "invalid" },
    });
    t.deepEqual(refusedAgain.body, refused.body);
    t.is(refusedAgain.headers.get("idempotent-replayed"), "true");
    t.like(
      await grpcWithKey(server, CustomersService.method.identifyCustomer, invalid, "invalid"),
      {
        ok: false,
        code: Code.InvalidArgument,
        replayed: "true",
        statusDetails: true,
      },
    );
  });
});

test("reads ignore the key; a malformed key is refused", async (t) => {
  await withServer({}, async (server) => {
    for (let attempt = 0; attempt < 2; attempt++) {
      const read = await rest(server, "GET", "/customers", {
        key: keys.secret,
        headers: { "idempotency-key": "a-read" },
      });
      t.is(read.status, 200);
      t.is(read.headers.get("idempotent-replayed"), null);
    }
    const body = await newReferralRequest(server);
    const tooLong = await restCreate(server, body, "k".repeat(256));
    t.is(tooLong.status, 400);
    t.regex(tooLong.body.message, /Idempotency-Key/);
  });
});

test("keys are per tenant, and the admin API's writes take them too; responses are stored sealed", async (t) => {
  await withServer({}, async (server) => {
    const createApplication = () =>
      rest(server, "POST", "/admin/applications", {
        key: keys.admin,
        body: { name: "Idempotent app" },
        headers: { "idempotency-key": "shared-key" },
      });
    const created = await createApplication();
    t.is(created.status, 201);
    const again = await createApplication();
    t.deepEqual(again.body, created.body, "the same application and keys");
    t.is(again.headers.get("idempotent-replayed"), "true");
    const applications = await rest(server, "GET", "/admin/applications", { key: keys.admin });
    t.is(
      applications.body.filter((application: Json) => application.name === "Idempotent app").length,
      1,
    );
    const stored = await server.app.store.system.idempotencyKeys.findOne({
      tenantId: "admin",
      key: "shared-key",
    });
    const outcome = (stored?.outcome ?? {}) as { responseSealed?: string };
    t.regex(outcome.responseSealed ?? "", /^v1\./, "the response is sealed");
    t.false(JSON.stringify(stored).includes(created.body.secretKey), "no key in clear");

    // The same key in two applications: two requests, both run.
    const identifyWith = (key: string, externalUserId: string) =>
      rest(server, "POST", "/customers/identify", {
        key,
        body: { externalUserId, name: "Cy" },
        headers: { "idempotency-key": "shared-key" },
      });
    const inNewApp = await identifyWith(created.body.secretKey, "new-app-user");
    t.is(inNewApp.status, 201);
    const inDemoApp = await identifyWith(keys.public, "demo-app-user");
    t.is(inDemoApp.status, 201);
    t.is(inDemoApp.headers.get("idempotent-replayed"), null);
    t.is((await identifyWith(created.body.secretKey, "another-user")).status, 400);
  });
});

// The interceptor alone, on each engine: the implementation is the test's,
// so it counts its runs and holds one while retries arrive.

const secretBox = createSecretBox(Buffer.alloc(32, 3));

/** A CreateReferral pipeline of the interceptor alone, its implementation given. */
function keyedPipeline(
  store: Store,
  clock: () => Date,
  implementation: () => Promise<MessageInitShape<typeof createReferral.output>>,
) {
  const rpc: Rpc = {
    service: ReferralsService,
    method: createReferral,
    name: `${ReferralsService.typeName}/${createReferral.name}`,
    implementation: implementation as Rpc["implementation"],
  };
  const pipeline = createPipeline([idempotencyKeys({ store, clock, log: () => {}, secretBox })]);
  return async (
    tenantId: string,
    idempotencyKey: string,
    request: MessageInitShape<typeof createReferral.input> = { referralCode: "CODE2345" },
  ): Promise<{ response: MessageShape<typeof createReferral.output>; replayed: boolean }> => {
    const context = new CallContext(createReferral, "grpc", "POST", "/", () => new Headers());
    const caller = { tenant: { organizationId: "org_test", applicationId: tenantId } };
    context.values.set(callerKey, caller as Caller);
    const responseHeaders = new Map<string, string>();
    const response = await pipeline({
      rpc,
      protocol: "grpc",
      clientAddress: "127.0.0.1",
      responseHeaders,
      header: (name) => (name === "idempotency-key" ? idempotencyKey : undefined),
      request: create(createReferral.input, request),
      context,
    });
    return {
      response: response as MessageShape<typeof createReferral.output>,
      replayed: responseHeaders.get("idempotent-replayed") === "true",
    };
  };
}

/** An implementation that counts its runs and answers with the run's number. */
function countedImplementation() {
  const counter = {
    runs: 0,
    implementation: async () => {
      counter.runs += 1;
      return { referral: { id: `ref_run_${counter.runs}` } };
    },
  };
  return counter;
}

async function codeOf(promise: Promise<unknown>): Promise<Code | "ok"> {
  try {
    await promise;
    return "ok";
  } catch (error) {
    return ConnectError.from(error).code;
  }
}

for (const engine of engineNames) {
  storeTest(
    engine,
    "a call holds its key: a retry meanwhile is ABORTED, later ones replay it",
    async (t, store) => {
      let runs = 0;
      let release: () => void = () => {};
      const held = new Promise<void>((resolve) => {
        release = resolve;
      });
      let entered: () => void = () => {};
      const inside = new Promise<void>((resolve) => {
        entered = resolve;
      });
      const call = keyedPipeline(
        store,
        () => new Date(),
        async () => {
          runs += 1;
          entered();
          await held;
          return { referral: { id: "ref_first" } };
        },
      );
      const first = call("app_a", "k1");
      await inside;
      t.is(await codeOf(call("app_a", "k1")), Code.Aborted);
      release();
      t.is((await first).response.referral?.id, "ref_first");
      const retry = await call("app_a", "k1");
      t.true(retry.replayed);
      t.is(retry.response.referral?.id, "ref_first");
      t.is(runs, 1);
    },
  );

  storeTest(
    engine,
    "a call that died holding a key frees it when its lease ends",
    async (t, store) => {
      const start = new Date();
      let now = start;
      const counter = countedImplementation();
      const call = keyedPipeline(store, () => now, counter.implementation);
      const request = { referralCode: "CODE2345" };
      const rpc = {
        name: `${ReferralsService.typeName}/${createReferral.name}`,
        method: createReferral,
      };
      const requestHash = requestHashOf(rpc, create(createReferral.input, request));
      // An instance claims the key, then dies before finishing.
      const dead = await claimIdempotencyKey(
        store.system,
        "app_a",
        { key: "k1", rpc: rpc.name, requestHash },
        start,
        defaultIdempotencyTimes,
      );
      t.is(dead.kind, "run");
      now = new Date(start.getTime() + defaultIdempotencyTimes.leaseMs - 1000);
      t.is(await codeOf(call("app_a", "k1", request)), Code.Aborted, "while the lease lasts");
      now = new Date(start.getTime() + defaultIdempotencyTimes.leaseMs);
      const takenOver = await call("app_a", "k1", request);
      t.false(takenOver.replayed);
      t.is(counter.runs, 1);
      if (dead.kind === "run") {
        const late = await updateIdempotencyOutcome(
          store.system,
          dead.record,
          { code: "internal", message: "late", details: [] },
          now,
        );
        t.false(late, "the dead call's outcome no longer counts");
      }
      const retry = await call("app_a", "k1", request);
      t.true(retry.replayed);
      t.is(retry.response.referral?.id, "ref_run_1");
    },
  );

  storeTest(engine, "a key is kept 24 hours", async (t, store) => {
    const start = new Date();
    let now = start;
    const counter = countedImplementation();
    const call = keyedPipeline(store, () => now, counter.implementation);
    await call("app_a", "k1");
    now = new Date(start.getTime() + 24 * hour - 1);
    t.true((await call("app_a", "k1")).replayed);
    now = new Date(start.getTime() + 24 * hour);
    const again = await call("app_a", "k1");
    t.false(again.replayed);
    t.is(again.response.referral?.id, "ref_run_2");
    t.is(counter.runs, 2);
  });

  storeTest(engine, "an expired key is claimed anew, whatever it held", async (t, store) => {
    const start = new Date();
    const times = defaultIdempotencyTimes;
    const request = {
      key: "k1",
      rpc: "referral.v1.ReferralsService/CreateReferral",
      requestHash: "a",
    };
    const first = await claimIdempotencyKey(store.system, "app_a", request, start, times);
    if (first.kind !== "run") return t.fail("the first claim runs");
    const outcome = { code: "not_found", message: "gone", details: [] };
    t.true(await updateIdempotencyOutcome(store.system, first.record, outcome, start));
    const other = { ...request, requestHash: "b" };
    const justBefore = new Date(start.getTime() + times.expiryMs - 1);
    t.like(await claimIdempotencyKey(store.system, "app_a", request, justBefore, times), {
      kind: "replay",
      outcome,
    });
    t.is(
      (await claimIdempotencyKey(store.system, "app_a", other, justBefore, times)).kind,
      "mismatch",
    );
    const expired = new Date(start.getTime() + times.expiryMs);
    const again = await claimIdempotencyKey(store.system, "app_a", other, expired, times);
    t.is(again.kind, "run", "once expired, the key is new, for any request");
    t.is(await store.system.idempotencyKeys.countDocuments({ tenantId: "app_a", key: "k1" }), 1);
  });

  storeTest(
    engine,
    "refusals are replayed; failures a retry may not meet again are not kept",
    async (t, store) => {
      let runs = 0;
      let failWith: ConnectError | Error | undefined = new ConnectError(
        "no such code",
        Code.NotFound,
      );
      const call = keyedPipeline(
        store,
        () => new Date(),
        async () => {
          runs += 1;
          if (failWith) throw failWith;
          return { referral: { id: `ref_run_${runs}` } };
        },
      );
      for (let attempt = 0; attempt < 2; attempt++) {
        const error = await call("app_a", "refused").catch((caught) => ConnectError.from(caught));
        t.like(error, { code: Code.NotFound, rawMessage: "no such code" });
      }
      t.is(runs, 1, "the refusal was replayed");

      failWith = new ConnectError("the store is down", Code.Unavailable);
      t.is(await codeOf(call("app_a", "unavailable")), Code.Unavailable);
      failWith = new Error("a bug");
      await t.throwsAsync(call("app_a", "unexpected"), { message: "a bug" });
      failWith = undefined;
      t.is((await call("app_a", "unavailable")).response.referral?.id, "ref_run_4");
      t.is((await call("app_a", "unexpected")).response.referral?.id, "ref_run_5");
      t.is(runs, 5, "both ran again");
    },
  );

  storeTest(engine, "keys are per tenant", async (t, store) => {
    const counter = countedImplementation();
    const call = keyedPipeline(store, () => new Date(), counter.implementation);
    await call("app_a", "k1", { referralCode: "AAAA2345" });
    const other = await call("app_b", "k1", { referralCode: "BBBB2345" });
    t.false(other.replayed);
    t.is(counter.runs, 2);
    t.is(await codeOf(call("app_a", "k1", { referralCode: "BBBB2345" })), Code.InvalidArgument);
  });
}

storeTest("embedded", "expired keys are swept, and every query uses an index", async (t, store) => {
  const start = new Date();
  let now = start;
  const counter = countedImplementation();
  const call = keyedPipeline(store, () => now, counter.implementation);
  for (const key of ["k1", "k2", "k3"]) await call("app_a", key);
  now = new Date(start.getTime() + 25 * hour);
  await call("app_a", "k4");
  await call("app_a", "k5");
  t.is(await store.system.idempotencyKeys.countDocuments({ expiresAt: { $lte: now } }), 0);
  const plans = queryPlansOf(store).filter((plan) => plan.collection === "idempotencyKeys");
  t.true(plans.length >= 3);
  for (const plan of plans) {
    t.deepEqual(
      plan.plan.filter((step) => /^SCAN /.test(step)),
      [],
      `${plan.sql}: ${plan.plan.join("; ")}`,
    );
  }
});
