import { create } from "@bufbuild/protobuf";
import { createContextValues, type HandlerContext } from "@connectrpc/connect";
import test from "ava";
import { CustomersService, GetCustomerRequestSchema } from "../../gen/referral/v1/customers_pb.js";
import type { Authenticator } from "../../src/services/authentication.js";
import { interceptors, withoutOperations } from "../../src/transport/interceptors.js";
import { type Call, createPipeline } from "../../src/transport/pipeline.js";
import type { RateLimits } from "../../src/transport/rate-limit.js";

/**
 * A cluster worker's reads: every call tells the store to look for the
 * writer's commits before anything reads (its key first), so it sees every
 * write acknowledged before it arrived. The reader's side is in
 * test/store/reader-versions.test.ts.
 */
test("each call looks for new commits before its key is authenticated", async (t) => {
  const steps: string[] = [];
  const authenticator: Authenticator = {
    authenticate: async () => {
      steps.push("authenticate");
      return undefined;
    },
    forget: () => {},
    isRevoked: async () => false,
  };
  const method = CustomersService.method.getCustomer;
  const pipeline = createPipeline(
    withoutOperations(
      interceptors({
        authenticator,
        log: () => {},
        observeCalls: (call, next) => next(call),
        rateLimits: {} as RateLimits,
        streamsByKey: (call, next) => next(call),
        idempotency: (call, next) => next(call),
        seeNewCommits: () => steps.push("look for commits"),
      }),
    ).map((step) => step.run),
  );
  const call = (): Call => ({
    rpc: {
      service: CustomersService,
      method,
      name: "CustomersService/GetCustomer",
      implementation: async () => {
        steps.push("implementation");
        return {};
      },
    },
    protocol: "rest",
    header: () => undefined,
    request: create(GetCustomerRequestSchema, { id: "cus_1" }),
    context: { values: createContextValues() } as HandlerContext,
    clientAddress: "127.0.0.1",
    responseHeaders: new Map(),
  });
  await pipeline(call());
  await pipeline(call());
  t.deepEqual(steps, [
    "look for commits",
    "authenticate",
    "implementation",
    "look for commits",
    "authenticate",
    "implementation",
  ]);
});
