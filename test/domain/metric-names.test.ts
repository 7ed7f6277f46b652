import test from "ava";
import { metric, metricOf } from "../../src/domain/stats.js";

// Metric names are built where the counters move and read back where the
// reports add them up: what one builds, the other reads.

test("every metric name reads back as what it was built from", (t) => {
  t.deepEqual(metricOf(metric.identified), { kind: "identified" });
  t.deepEqual(metricOf(metric.created), { kind: "created" });
  t.deepEqual(metricOf(metric.reached("accepted")), { kind: "reached", status: "accepted" });
  t.deepEqual(metricOf(metric.cohortAccepted), { kind: "cohortAccepted" });
  t.deepEqual(metricOf(metric.conversionBin(42)), { kind: "conversionBin", bin: 42 });
  t.deepEqual(metricOf(metric.checkpoint("purchase")), { kind: "checkpoint", name: "purchase" });
  t.deepEqual(metricOf(metric.grants("approved", "usd")), {
    kind: "grants",
    status: "approved",
    currency: "usd",
  });
  t.deepEqual(metricOf(metric.grantsMinor("capped", null)), {
    kind: "grantsMinor",
    status: "capped",
    currency: null,
  });
  t.deepEqual(metricOf(metric.committedMinor("eur")), { kind: "committedMinor", currency: "eur" });
  t.deepEqual(metricOf(metric.committed("eur")), { kind: "committed", currency: "eur" });
  t.deepEqual(metricOf(metric.committed(null)), { kind: "committed", currency: null });
});

test("a checkpoint's name keeps its colons", (t) => {
  t.deepEqual(metricOf(metric.checkpoint("plan:pro:yearly")), {
    kind: "checkpoint",
    name: "plan:pro:yearly",
  });
});

test("a name no counter has reads as nothing", (t) => {
  t.is(metricOf("unknown"), null);
  t.is(metricOf("unknown:thing"), null);
});
