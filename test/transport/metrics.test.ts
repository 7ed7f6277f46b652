import test from "ava";
import { createMetrics } from "../../src/transport/metrics.js";

// The registry on its own: what a scrape shows when the store fails a read.

test("a store read that fails leaves the gauges' last values; the scrape answers every series", async (t) => {
  const metrics = createMetrics();
  let fail = false;
  metrics.watchDeliveryQueue(async () => {
    if (fail)
      throw Object.assign(new Error("database or disk is full"), { code: "ERR_SQLITE_ERROR" });
    return { pending: 7, oldestDueAt: null };
  });
  metrics.watchDisk(() => (fail ? undefined : { freeBytes: 4096, storeBytes: 8192 }));
  metrics.watchCommits(
    () => ({ groups: 3, writes: 5 }),
    () => 2,
  );
  const gauges = (text: string) =>
    Object.fromEntries(
      text
        .split("\n")
        .filter((line) =>
          /^(webhook_queue_depth|store_disk_free_bytes|store_size_bytes|store_write_queue) /.test(
            line,
          ),
        )
        .map((line) => line.split(" ") as [string, string]),
    );
  const expected = {
    webhook_queue_depth: "7",
    store_disk_free_bytes: "4096",
    store_size_bytes: "8192",
    store_write_queue: "2",
  };
  t.deepEqual(gauges(await metrics.registry.metrics()), expected);
  fail = true;
  t.deepEqual(
    gauges(await metrics.registry.metrics()),
    expected,
    "the last values, not a failed scrape",
  );
});
