import { execFile } from "node:child_process";
import { promisify } from "node:util";
import test from "ava";
import { healthCheck, type OperationsServer, startService } from "./service.js";

/**
 * `grpc.health.v1` is listed by reflection and reports the server (`""`)
 * and each service by name; NOT_SERVING while draining is in drain.test.ts.
 */

const run = promisify(execFile);
let server: OperationsServer;

test.before(async () => {
  server = await startService();
});
test.after.always(async () => {
  await server?.stop();
});

// The `buf` of node_modules, run directly: `npx` would add a second or more to each call.
const bufCurl = (args: string[]) =>
  run(new URL("../../node_modules/.bin/buf", import.meta.url).pathname, [
    "curl",
    "--protocol",
    "grpc",
    "--http2-prior-knowledge",
    ...args,
  ]);

/** The reflection protocol buf curl asks (`--reflect-protocol`); v1, falling back to v1alpha, when unset. */
type ReflectProtocol = "grpc-v1" | "grpc-v1alpha" | undefined;
const reflectArgs = (reflect: ReflectProtocol) => (reflect ? ["--reflect-protocol", reflect] : []);

/** The services reflection lists, and buf curl's output for the message of an assertion. */
async function listedServices(baseUrl: string, reflect?: ReflectProtocol) {
  const { stdout } = await bufCurl([...reflectArgs(reflect), "--list-services", baseUrl]);
  return { services: stdout.trim().split("\n"), stdout };
}

/** Health's answer for `service`, called through reflection alone (buf curl reads its types there). */
async function checkedThroughReflection(
  baseUrl: string,
  service: string,
  reflect?: ReflectProtocol,
) {
  const { stdout } = await bufCurl([
    ...reflectArgs(reflect),
    "-d",
    JSON.stringify({ service }),
    `${baseUrl}/grpc.health.v1.Health/Check`,
  ]);
  return JSON.parse(stdout) as unknown;
}

test("reflection lists grpc.health.v1.Health beside the services, and describes it to call", async (t) => {
  const { services, stdout } = await listedServices(server.baseUrl);
  t.true(services.includes("grpc.health.v1.Health"), stdout);
  t.true(services.includes("referral.v1.CustomersService"), stdout);
  t.deepEqual(await checkedThroughReflection(server.baseUrl, "referral.v1.CustomersService"), {
    status: "SERVING",
  });
});

test("health reports the server and each service by name, and NOT_FOUND for others", async (t) => {
  t.is(await healthCheck(server.port, ""), "SERVING");
  for (const service of [
    "referral.v1.CustomersService",
    "referral.v1.ReferralsService",
    "referral.v1.RewardsService",
    "referral.v1.CheckpointsService",
    "referral.v1.CampaignsService",
    "referral.v1.WebhooksService",
    "referral.v1.AdminService",
  ]) {
    t.is(await healthCheck(server.port, service), "SERVING", service);
  }
  t.is(await healthCheck(server.port, "referral.v1.NoSuchService"), 5, "NOT_FOUND");
});

test("both reflection versions answer as a server's first calls, at once: reflection is built on the first", async (t) => {
  const fresh = await startService();
  try {
    const listed = await Promise.all(
      (["grpc-v1", "grpc-v1alpha"] as const).map((version) =>
        listedServices(fresh.baseUrl, version),
      ),
    );
    for (const { services, stdout } of listed) {
      t.true(services.includes("referral.v1.CustomersService"), stdout);
      t.true(services.includes("grpc.health.v1.Health"), stdout);
    }
    // Described through the older version alone, then called.
    t.deepEqual(
      await checkedThroughReflection(fresh.baseUrl, "referral.v1.RewardsService", "grpc-v1alpha"),
      { status: "SERVING" },
    );
  } finally {
    await fresh.stop();
  }
});
