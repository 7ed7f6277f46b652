import type { ExecutionContext } from "ava";
import { CustomersService } from "../../gen/referral/v1/customers_pb.js";
import { grpcCall, type HttpVersion, keys, rest, type TestServer } from "./server.js";

/**
 * Identifies sent while WRITE_QUEUE_LIMIT may refuse them: each is served,
 * or refused as `unavailable` with `Retry-After: 1` (anything else fails
 * the test), and says which.
 */
export interface QueuedOutcome {
  readonly externalUserId: string;
  readonly ok: boolean;
}

/** One identify over REST: 201, or 503 `unavailable` with `Retry-After: 1`. */
export async function identifyOverRest(
  t: ExecutionContext,
  server: TestServer,
  externalUserId: string,
  httpVersion: HttpVersion,
): Promise<QueuedOutcome> {
  const answer = await rest(server, "POST", "/customers/identify", {
    key: keys.public,
    body: { externalUserId, name: "Queued" },
    httpVersion,
  });
  if (answer.status === 201) return { externalUserId, ok: true };
  t.is(answer.status, 503, JSON.stringify(answer.body));
  t.is(answer.body.code, "unavailable");
  t.is(answer.headers.get("retry-after"), "1");
  return { externalUserId, ok: false };
}

/** One identify over gRPC: OK, or UNAVAILABLE (14) with `retry-after: 1`. */
export async function identifyOverGrpc(
  t: ExecutionContext,
  server: TestServer,
  externalUserId: string,
): Promise<QueuedOutcome> {
  const outcome = await grpcCall(
    server,
    CustomersService.method.identifyCustomer,
    { externalUserId, name: "Queued" },
    keys.public,
  );
  if (outcome.ok) return { externalUserId, ok: true };
  t.is(outcome.code as number, 14, outcome.details);
  t.deepEqual(outcome.metadata.get("retry-after"), ["1"]);
  return { externalUserId, ok: false };
}

/**
 * Sends bursts (`send(round)`) until the calls so far include a refused
 * one and a served one, at most 5: a turn's one place in the queue may go
 * to a background write (the webhook workers claim deliveries every
 * second), and calls read in different turns may all be served. A burst
 * none of which was refused would prove nothing: that fails the test.
 */
export async function burstsUntilMixed(
  t: ExecutionContext,
  send: (round: number) => Promise<QueuedOutcome[]>,
): Promise<QueuedOutcome[]> {
  const outcomes: QueuedOutcome[] = [];
  const mixed = () =>
    outcomes.some((outcome) => outcome.ok) && outcomes.some((outcome) => !outcome.ok);
  for (let round = 0; round < 5 && !mixed(); round++) outcomes.push(...(await send(round)));
  t.true(
    outcomes.some((outcome) => !outcome.ok),
    "some calls were refused",
  );
  t.true(
    outcomes.some((outcome) => outcome.ok),
    "some were served",
  );
  return outcomes;
}
