import type { DescMethod } from "@bufbuild/protobuf";
import { call, type Outcome, type Protocol } from "./callers.js";
import { contractServices } from "./contract.js";
import { type Json, keys, rest, type TestServer } from "./server.js";

const methods = (await contractServices()).flatMap((service) => service.methods);

/** An RPC of the contract by its name. */
export function rpc(name: string): DescMethod {
  const method = methods.find((m) => m.name === name);
  if (!method) throw new Error(`no RPC ${name}`);
  return method;
}

/**
 * The calls suites that make applications of their own send: the admin
 * API over REST (failing the test on an error), and an RPC by name on a
 * protocol, as it answered or its body when it must succeed.
 */
export function tenantCalls(server: TestServer) {
  const send = (protocol: Protocol, name: string, request: Json, key: string): Promise<Outcome> =>
    call(server, protocol, rpc(name), request, key);
  return {
    async admin(method: string, path: string, body?: unknown): Promise<Json> {
      const answer = await rest(server, method, path, { key: keys.admin, body });
      if (answer.status >= 300) {
        throw new Error(`${method} ${path}: ${JSON.stringify(answer.body)}`);
      }
      return answer.body;
    },
    send,
    async okBody(protocol: Protocol, name: string, request: Json, key: string): Promise<Json> {
      const outcome = await send(protocol, name, request, key);
      if (!outcome.ok) throw new Error(`${name}: ${outcome.code} ${outcome.message}`);
      return outcome.body;
    },
  };
}
