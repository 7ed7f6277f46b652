import test from "ava";
import type { EnvironmentName } from "../../src/domain/tenancy.js";
import { customerIdentified } from "../../src/events/events.js";
import { startReceiver } from "../helpers/receiver.js";
import { keys, rest, useServer } from "../helpers/server.js";

/**
 * On the embedded engine a write keeps its events in its outbox only when an
 * enabled endpoint of its environment exists (src/store/webhook-audience.ts):
 * without one, the relay would visit each document only to empty its
 * outbox. What an endpoint receives is unchanged: the events of changes made
 * after it was created, in its environment.
 */
const server = useServer({ env: { WEBHOOK_ALLOW_PRIVATE: "true" } });

/**
 * Identifies through the tenant's store, which answers with the document
 * as the write left it: before the relay can have emptied its outbox.
 */
async function outboxAfterIdentify(externalUserId: string, environment: EnvironmentName) {
  const demo = server.app.demo;
  if (!demo) throw new Error("no demo tenant");
  const store = server.app.store.forTenant({
    organizationId: demo.organizationId,
    applicationId: demo.applicationId,
  });
  const at = new Date();
  const newId = `cus_audience_${externalUserId}`;
  const doc = await store.customers.identify(
    { externalUserId, name: externalUserId, environment },
    { newId, at, outbox: [customerIdentified(newId, at)] },
  );
  return { outbox: doc.outbox?.length ?? 0, pending: doc.outboxPending === true };
}

const none = { outbox: 0, pending: false };
const one = { outbox: 1, pending: true };

test.serial(
  "a write keeps its events only while an endpoint of its environment listens",
  async (t) => {
    t.deepEqual(await outboxAfterIdentify("before", "test"), none, "no endpoint yet");

    const receiver = await startReceiver();
    try {
      const created = await rest(server, "POST", "/webhooks", {
        key: keys.secret,
        body: { url: `${receiver.url}/audience`, environment: "test" },
      });
      t.is(created.status, 201);
      t.deepEqual(
        await outboxAfterIdentify("production", "production"),
        none,
        "another environment",
      );
      t.deepEqual(await outboxAfterIdentify("first", "test"), one, "the first write after it");

      const identified = await rest(server, "POST", "/customers/identify", {
        key: keys.public,
        body: { externalUserId: "over-rest", name: "R", environment: "test" },
      });
      await receiver.waitFor((received) =>
        received.some((request) => JSON.parse(request.body).data.id === identified.body.id),
      );

      const disabled = await rest(server, "PATCH", `/webhooks/${created.body.webhook.id}`, {
        key: keys.secret,
        body: { enabled: false },
      });
      t.is(disabled.status, 200);
      t.deepEqual(await outboxAfterIdentify("after", "test"), none, "a disabled endpoint");
    } finally {
      await receiver.close();
    }
  },
);
