import test from "ava";
import { keys, rest, useServer } from "../helpers/server.js";

// The bench's operations suite compares the service with the same service
// built without its operations steps (`buildApp(config, { steps: withoutOperations })`):
// that variant must still serve every call, and must really leave the steps out,
// or the comparison measures nothing.

const metricsToken = "metrics-token-for-tests";
const lines: string[] = [];
const server = useServer({
  env: { LOG_LEVEL: "info", METRICS_TOKEN: metricsToken, RATE_LIMIT_PUBLIC: "2/1m" },
  logTo: { write: (line) => lines.push(line) },
  operations: false,
});

test.serial(
  "without the operations steps, calls are served, neither limited nor logged nor counted",
  async (t) => {
    lines.length = 0;
    for (let call = 0; call < 5; call++) {
      const response = await rest(server, "GET", "/campaigns", { key: keys.public });
      t.is(response.status, 200, "a limit of 2 calls refuses none");
      t.is(response.headers.get("x-request-id"), null);
      t.is(response.headers.get("ratelimit"), null);
    }
    // One key, two different requests: idempotency keys would refuse the second.
    for (const externalUserId of ["without-operations-1", "without-operations-2"]) {
      const identified = await rest(server, "POST", "/customers/identify", {
        key: keys.public,
        body: { externalUserId, name: "Ada" },
        headers: { "idempotency-key": "one-key-for-two-requests" },
      });
      t.is(identified.status, 201, "a new customer each time");
    }
    t.false(
      lines.some((line) => JSON.parse(line).msg === "call"),
      "no request log line",
    );
    const metrics = await fetch(`${server.baseUrl}/metrics`, {
      headers: { authorization: `Bearer ${metricsToken}` },
    });
    const text = await metrics.text();
    t.notRegex(text, /rpc_calls_total\{/, "no call counted");
    // The store's timings are the store's, not a step's: they stay.
    t.regex(text, /store_operation_duration_seconds_count\{/);
  },
);
