import { Code, ConnectError } from "@connectrpc/connect";
import test, { type ExecutionContext } from "ava";
import { CustomersService } from "../../gen/referral/v1/customers_pb.js";
import { findCustomerByExternalId } from "../../src/store/customers.js";
import {
  burstsUntilMixed,
  identifyOverGrpc,
  identifyOverRest,
  type QueuedOutcome,
} from "../helpers/queued-writes.js";
import {
  closeGrpcClient,
  connectClient,
  type HttpVersion,
  keys,
  rest,
  startServer,
  type TestServer,
} from "../helpers/server.js";

/**
 * WRITE_QUEUE_LIMIT: while that many writes wait for the embedded writer's
 * commit, a call that would write is refused whole before it runs,
 * `unavailable` on every protocol (REST 503 with `Retry-After: 1`), and
 * changes nothing. With a limit of 1, every call of a turn after the first
 * that wrote is refused: a burst of calls decoded in one turn (many streams
 * on one HTTP/2 connection, or requests on connections already open) is
 * mostly refused.
 */

const burst = 200;

/**
 * A service that admits no write call while one write waits for a commit.
 * Its own background writes (the demo provisioning, the webhook workers'
 * claims) are never refused: it starts on a new directory.
 */
async function startWithQueueOfOne(t: ExecutionContext): Promise<TestServer> {
  const server = await startServer({ env: { WRITE_QUEUE_LIMIT: "1" } });
  t.teardown(async () => {
    closeGrpcClient(server);
    await server.stop();
  });
  return server;
}

/**
 * Checks that the store holds exactly the customers of the calls that
 * succeeded; says how many were refused.
 */
async function checkStored(
  t: ExecutionContext,
  server: TestServer,
  outcomes: readonly QueuedOutcome[],
) {
  const refused = outcomes.filter((outcome) => !outcome.ok).length;
  const store = server.app.store;
  const [application] = await store.system.applications.find({}).toArray();
  const tenant = {
    organizationId: application?.organizationId ?? "",
    applicationId: application?._id ?? "",
  };
  const wrong: string[] = [];
  for (const outcome of outcomes) {
    const found = await findCustomerByExternalId(
      store.system,
      tenant,
      "production",
      outcome.externalUserId,
    );
    if (outcome.ok !== (found !== null)) {
      wrong.push(
        `${outcome.externalUserId} ${outcome.ok ? "succeeded but is missing" : "was refused but exists"}`,
      );
    }
  }
  t.deepEqual(wrong, []);
  // Back-pressure is no failure of the store: the service stays ready.
  const ready = await rest(server, "GET", "/readyz");
  t.is(ready.status, 200);
  return refused;
}

/** A REST burst: every answer a 201 or a 503 `unavailable` with `Retry-After: 1`. */
function restBurst(
  t: ExecutionContext,
  server: TestServer,
  prefix: string,
  httpVersion: HttpVersion,
): Promise<QueuedOutcome[]> {
  return Promise.all(
    Array.from({ length: burst }, (_, index) =>
      identifyOverRest(t, server, `${prefix}_${index}`, httpVersion),
    ),
  );
}

test("a REST burst over one HTTP/2 connection: 201 or 503 with Retry-After: 1, and only the 201s are stored", async (t) => {
  const server = await startWithQueueOfOne(t);
  const outcomes = await burstsUntilMixed(t, (round) =>
    restBurst(t, server, `rest_h2_${round}`, "2"),
  );
  const refused = await checkStored(t, server, outcomes);
  t.log(`${refused} of ${outcomes.length} refused`);
});

test("a REST burst over HTTP/1.1 connections already open: 201 or 503, and only the 201s are stored", async (t) => {
  const server = await startWithQueueOfOne(t);
  // The connections open first, so the burst's requests arrive together.
  await Promise.all(
    Array.from({ length: burst }, () => rest(server, "GET", "/campaigns", { key: keys.public })),
  );
  const outcomes = await burstsUntilMixed(t, (round) =>
    restBurst(t, server, `rest_h1_${round}`, "1.1"),
  );
  const refused = await checkStored(t, server, outcomes);
  t.log(`${refused} of ${outcomes.length} refused`);
});

test("a gRPC burst: OK or UNAVAILABLE (14) with retry-after, and only the OKs are stored", async (t) => {
  const server = await startWithQueueOfOne(t);
  const grpcBurst = (round: number) =>
    Promise.all(
      Array.from({ length: burst }, (_, index) =>
        identifyOverGrpc(t, server, `grpc_${round}_${index}`),
      ),
    );
  const outcomes = await burstsUntilMixed(t, grpcBurst);
  const refused = await checkStored(t, server, outcomes);
  t.log(`${refused} of ${outcomes.length} refused`);
});

test("a Connect burst over HTTP/2: success or unavailable with retry-after, and only the successes are stored", async (t) => {
  const server = await startWithQueueOfOne(t);
  const client = connectClient(server, CustomersService, { key: keys.public, httpVersion: "2" });
  const connectBurst = (round: number) =>
    Promise.all(
      Array.from({ length: burst }, async (_, index): Promise<QueuedOutcome> => {
        const externalUserId = `connect_${round}_${index}`;
        try {
          await client.identifyCustomer({ externalUserId, name: "Queued" });
          return { externalUserId, ok: true };
        } catch (error) {
          const connectError = ConnectError.from(error);
          t.is(connectError.code, Code.Unavailable, connectError.rawMessage);
          t.is(connectError.metadata.get("retry-after"), "1");
          return { externalUserId, ok: false };
        }
      }),
    );
  const outcomes = await burstsUntilMixed(t, connectBurst);
  const refused = await checkStored(t, server, outcomes);
  t.log(`${refused} of ${outcomes.length} refused`);
});
