import { spawn } from "node:child_process";
import test, { type ExecutionContext } from "ava";
import { Webhook } from "standardwebhooks";
import { runListen } from "../../src/cli/listen.js";
import { startReceiver } from "../helpers/receiver.js";
import { asUsersRunIt, type Json, keys, rest, startServer, useServer } from "../helpers/server.js";
import { eventually } from "../helpers/wait.js";

/**
 * `npm run admin -- listen` against a real server: the endpoint it registers,
 * the deliveries it prints verified (and forwards), the endpoint deleted when
 * it stops, by an abort in process and by SIGINT to the CLI.
 */
const server = useServer({ ...asUsersRunIt, env: { WEBHOOK_ALLOW_PRIVATE: "true" } });
const root = new URL("../../", import.meta.url).pathname;

/**
 * `listen` in this process, stopped by `stop()` (or when the test ends);
 * `output` holds what it printed.
 */
function listen(t: ExecutionContext, ...args: string[]) {
  const output: string[] = [];
  const controller = new AbortController();
  const exited = runListen(
    ["--url", server.baseUrl, "--key", keys.secret, ...args],
    (text) => output.push(text),
    controller.signal,
  );
  t.teardown(() => {
    controller.abort();
    return exited;
  });
  return {
    output,
    exited,
    /** Resolves with the first printed block matching `pattern` (or that `pick` returns). */
    waitFor: (pattern: RegExp | ((text: string) => string | undefined)) =>
      waitFor(() =>
        typeof pattern === "function"
          ? output.map(pattern).find((text) => text !== undefined)
          : output.find((text) => pattern.test(text)),
      ),
    stop: () => {
      controller.abort();
      return exited;
    },
  };
}

async function waitFor<T>(found: () => T | undefined, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = found();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`not seen in ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const webhooks = async (): Promise<Json[]> =>
  (await rest(server, "GET", "/webhooks", { key: keys.secret })).body;

async function identify(externalUserId: string, environment = "test"): Promise<Json> {
  const response = await rest(server, "POST", "/customers/identify", {
    key: keys.public,
    body: { externalUserId, name: externalUserId, environment },
  });
  if (response.status >= 300) throw new Error(JSON.stringify(response.body));
  return response.body;
}

test.serial("prints each delivery verified, and deletes its endpoint when stopped", async (t) => {
  const session = listen(t, "--events", "customer.created,referral.created");
  const ready = await session.waitFor(/^Ready/);
  const [, webhookId, url] =
    /webhook (whk_\S+) delivers production and test events to (\S+) /.exec(ready) ?? [];
  t.regex(url ?? "", /^http:\/\/127\.0\.0\.1:\d+\/$/);
  t.regex(ready, /Signing secret: whsec_/);
  const [endpoint] = await webhooks();
  t.is(endpoint.id, webhookId);
  t.is(endpoint.url, url);
  t.is(endpoint.environment, null, "both environments, as the README's calls use production");
  t.deepEqual(endpoint.eventTypes, ["customer.created", "referral.created"]);
  t.regex(endpoint.description, /^npm run admin -- listen on /);

  for (const environment of ["production", "test"]) {
    const customer = await identify(`listen-alice-${environment}`, environment);
    const delivery = await session.waitFor((text) =>
      text.includes(`"id": "${customer.id}"`) ? text : undefined,
    );
    const [heading = "", ...payload] = delivery.split("\n");
    t.regex(
      heading,
      /^\d{4}-\d\d-\d\dT\S+Z {2}customer\.created {2}evt_\S+ {2}signature verified$/,
    );
    const event = JSON.parse(payload.join("\n"));
    t.is(event.type, "customer.created");
    t.is(event.data.environment, environment);
  }

  t.is(await session.stop(), 0);
  t.regex(session.output.at(-1) ?? "", new RegExp(`^Deleted webhook ${webhookId}\\.$`));
  t.deepEqual(await webhooks(), [], "the endpoint is gone");
});

test.serial(
  "--forward-to passes each delivery on, signed, and answers with its status",
  async (t) => {
    const target = await startReceiver();
    t.teardown(() => target.close());
    target.respond = () => 202;
    const session = listen(t, "--forward-to", `${target.url}/hook`);
    const ready = await session.waitFor(/^Ready/);
    const secret = /Signing secret: (\S+)/.exec(ready)?.[1] ?? "";
    t.regex(ready, new RegExp(`Forwarding each delivery to ${target.url}/hook`));

    await identify("listen-bob");
    const forwarded = await session.waitFor(/-> \S+: 202$/);
    t.regex(forwarded, /customer\.created {2}evt_\S+ {2}signature verified/);
    await target.waitFor((received) => received.length > 0);
    const [request] = target.received;
    t.is(request?.path, "/hook");
    const headers = request?.headers as Record<string, string>;
    t.notThrows(() => new Webhook(secret).verify(request?.body ?? "", headers), "still verifies");
    const [endpoint] = await webhooks();
    // The attempt is recorded once the service has listen's answer, which
    // listen sends after printing its line: wait for it, not for the line.
    const attempt = await eventually("the attempt recorded", async () => {
      const deliveries = await rest(server, "GET", `/webhooks/${endpoint.id}/deliveries`, {
        key: keys.secret,
      });
      return deliveries.body.data[0]?.attempts[0];
    });
    t.is(attempt.statusCode, 202, "the service got the target's status");

    t.is(await session.stop(), 0);
    t.deepEqual(await webhooks(), []);
  },
);

test.serial(
  "a server refusing loopback URLs gets an error naming WEBHOOK_ALLOW_PRIVATE",
  async (t) => {
    const strict = await startServer();
    t.teardown(() => strict.stop());
    const output: string[] = [];
    const code = await runListen(["--url", strict.baseUrl, "--key", keys.secret], (text) =>
      output.push(text),
    );
    t.is(code, 1);
    t.deepEqual(output, [
      "error: the service refuses webhook URLs on loopback, where listen receives; start it with " +
        "`npm run dev`, or with WEBHOOK_ALLOW_PRIVATE=true (on a development machine only) " +
        `(${strict.baseUrl})`,
    ]);
    const listed = await rest(strict, "GET", "/webhooks", { key: keys.secret });
    t.deepEqual(listed.body, []);
  },
);

test.serial("the CLI deletes its endpoint on SIGINT", async (t) => {
  const child = spawn(
    process.execPath,
    ["--import", "tsx", "src/cli/admin.ts", "listen", "--url", server.baseUrl],
    { cwd: root, env: { ...process.env, SK: keys.secret } },
  );
  t.teardown(() => {
    if (child.exitCode === null) child.kill("SIGKILL");
  });
  let stdout = "";
  child.stdout.on("data", (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.on("exit", resolve));
  await waitFor(() => (stdout.includes("Ctrl-C deletes") ? true : undefined), 30_000);
  t.is((await webhooks()).length, 1);
  child.kill("SIGINT");
  t.is(await exited, 0);
  t.regex(stdout, /\nDeleted webhook whk_\S+\.\n$/);
  t.deepEqual(await webhooks(), []);
});
