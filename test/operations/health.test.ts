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

test("reflection lists grpc.health.v1.Health beside the services, and describes it to call", async (t) => {
  const { stdout } = await bufCurl(["--list-services", server.baseUrl]);
  const services = stdout.trim().split("\n");
  t.true(services.includes("grpc.health.v1.Health"), stdout);
  t.true(services.includes("referral.v1.CustomersService"), stdout);
  // Through reflection alone: buf curl reads the request and response types from it.
  const { stdout: checked } = await bufCurl([
    "-d",
    '{"service":"referral.v1.CustomersService"}',
    `${server.baseUrl}/grpc.health.v1.Health/Check`,
  ]);
  t.deepEqual(JSON.parse(checked), { status: "SERVING" });
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
      ["grpc-v1", "grpc-v1alpha"].map((version) =>
        bufCurl(["--reflect-protocol", version, "--list-services", fresh.baseUrl]),
      ),
    );
    for (const { stdout } of listed) {
      const services = stdout.trim().split("\n");
      t.true(services.includes("referral.v1.CustomersService"), stdout);
      t.true(services.includes("grpc.health.v1.Health"), stdout);
    }
    // Described through the older version alone, then called.
    const { stdout: checked } = await bufCurl([
      "--reflect-protocol",
      "grpc-v1alpha",
      "-d",
      '{"service":"referral.v1.RewardsService"}',
      `${fresh.baseUrl}/grpc.health.v1.Health/Check`,
    ]);
    t.deepEqual(JSON.parse(checked), { status: "SERVING" });
  } finally {
    await fresh.stop();
  }
});
