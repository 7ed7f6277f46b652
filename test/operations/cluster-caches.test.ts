import { request } from "node:http";
import test from "ava";
import { type Json, keys, useServer } from "../helpers/server.js";

/**
 * With WORKERS=2 what each worker keeps in memory (authenticated keys, an
 * application's campaigns, customers' views) follows the writes made
 * through the other: each call here opens its own connection, which the
 * cluster hands to the workers in turn, so the write and the reads after it
 * meet both workers, and every read after the write sees it.
 */

const server = useServer({ workers: 2 });

/** One REST call on a connection of its own. */
function call(
  method: string,
  path: string,
  key: string,
  body?: unknown,
): Promise<{ status: number; body: Json }> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const outgoing = request(
      `${server.baseUrl}${path}`,
      {
        method,
        agent: false,
        headers: {
          authorization: key,
          ...(payload ? { "content-type": "application/json" } : {}),
        },
      },
      (response) => {
        let text = "";
        response.on("data", (chunk: Buffer) => {
          text += chunk;
        });
        response.on("end", () =>
          resolve({ status: response.statusCode ?? 0, body: text ? JSON.parse(text) : null }),
        );
      },
    );
    outgoing.on("error", reject);
    outgoing.end(payload);
  });
}

const everyWorker = 6;

async function newApplication(name: string): Promise<{ id: string; secretKey: string }> {
  const created = await call("POST", "/admin/applications", keys.admin, { name });
  return { id: created.body.application.id, secretKey: created.body.secretKey };
}

test("a key revoked through one worker is refused by every worker on the next call", async (t) => {
  const application = await newApplication("Keys");
  for (let index = 0; index < everyWorker; index++) {
    t.is((await call("GET", "/customers", application.secretKey)).status, 200, "used and cached");
  }
  const listed = await call("GET", `/admin/applications/${application.id}/api-keys`, keys.admin);
  const secret = listed.body.find((key: Json) => key.kind === "secret");
  await call("POST", `/admin/api-keys/${secret.id}/revoke`, keys.admin);
  for (let index = 0; index < everyWorker; index++) {
    t.is((await call("GET", "/customers", application.secretKey)).status, 401);
  }
});

test("a campaign renamed through one worker is listed renamed by every worker", async (t) => {
  const application = await newApplication("Campaigns");
  const created = await call(
    "POST",
    `/admin/applications/${application.id}/campaigns`,
    keys.admin,
    { name: "Spring", environment: "production", isLive: true, isDefault: true },
  );
  const names = async () =>
    (
      (await call("GET", "/campaigns?environment=production", application.secretKey)).body as Json[]
    ).map((campaign) => campaign.name);
  for (let index = 0; index < everyWorker; index++) t.deepEqual(await names(), ["Spring"]);
  await call("PATCH", `/admin/campaigns/${created.body.id}?updateMask=name`, keys.admin, {
    name: "Summer",
  });
  for (let index = 0; index < everyWorker; index++) t.deepEqual(await names(), ["Summer"]);
});

test("a customer changed through one worker is read changed by every worker", async (t) => {
  const identified = await call("POST", "/customers/identify", keys.public, {
    externalUserId: "cache-worker-1",
    name: "Ada",
  });
  const id = identified.body.id as string;
  for (let index = 0; index < everyWorker; index++) {
    t.is((await call("GET", `/customers/${id}`, keys.secret)).body.name, "Ada");
  }
  // A change of an existing customer: the secret key (a public key needs a userHash).
  await call("POST", "/customers/identify", keys.secret, {
    externalUserId: "cache-worker-1",
    name: "Grace",
  });
  for (let index = 0; index < everyWorker; index++) {
    t.is((await call("GET", `/customers/${id}`, keys.secret)).body.name, "Grace");
  }
});
