import test from "ava";
import { keys, rest, startServer } from "../helpers/server.js";

test("data written before a restart is read back after it, and provisioning runs once", async (t) => {
  const first = await startServer();
  const identified = await rest(first, "POST", "/customers/identify", {
    key: keys.public,
    body: { externalUserId: "persisted", name: "Pat", customProperties: { tier: "gold" } },
  });
  t.is(identified.status, 201);
  t.truthy(first.app.demo, "the first start provisions the demo tenant");
  await first.stop({ keepData: true });

  const second = await startServer({ dataDir: first.dataDir });
  try {
    t.is(second.app.demo, undefined, "a restart provisions nothing");
    const read = await rest(second, "GET", `/customers/${identified.body.id}`, {
      key: keys.secret,
    });
    t.is(read.status, 200);
    t.deepEqual(read.body, identified.body);
    const campaigns = await rest(second, "GET", "/campaigns", { key: keys.public });
    t.is(campaigns.body.length, 2);
  } finally {
    await second.stop();
  }
});

test("a second process on the same data directory is refused", async (t) => {
  const first = await startServer();
  try {
    const error = await t.throwsAsync(() => startServer({ dataDir: first.dataDir }));
    t.regex(error?.message ?? "", /single writer/);
  } finally {
    await first.stop();
  }
});
