import autocannon from "autocannon";
import { LatencyRecorder, type LoadResult, loadResult } from "./measure.js";
import type { HttpRequestSpec } from "./senders.js";

/**
 * A closed-loop HTTP/1.1 run with autocannon: `connections` keep-alive
 * connections, each sending its next request when the last one answered.
 * A per-request body is built in `setupRequest`; with `limit`, the run stops
 * once that many bodies were handed out (seeded referees ran out).
 */
export async function autocannonLoad(
  origin: string,
  spec: HttpRequestSpec,
  options: { connections: number; seconds: number; limit?: number },
): Promise<LoadResult> {
  const latency = new LatencyRecorder();
  let ok = 0;
  let next = 0;
  let exhausted = false;
  const { body } = spec;
  const instance = autocannon({
    url: origin,
    connections: options.connections,
    duration: options.seconds,
    requests: [
      {
        method: spec.method,
        // Each connection loops over one request; only its body varies.
        path: spec.path(0),
        headers: { ...spec.headers },
        ...(body
          ? {
              setupRequest: (request) => {
                const i = next++;
                if (options.limit !== undefined && i >= options.limit && !exhausted) {
                  exhausted = true;
                  // Stopping from inside autocannon's own loop is not safe.
                  setImmediate(() => instance.stop());
                }
                // The few requests still in flight after the stop repeat the last body.
                const index = options.limit === undefined ? i : Math.min(i, options.limit - 1);
                return { ...request, body: body(index) };
              },
            }
          : {}),
      },
    ],
  });
  // autocannon's own histogram keeps whole milliseconds; keep microseconds.
  instance.on("response", (_client, statusCode, _bytes, responseTime) => {
    if (statusCode >= 200 && statusCode < 300) {
      ok++;
      latency.recordMs(responseTime);
    }
  });
  const result = await instance;
  const failures: Record<string, number> = {};
  for (const [status, { count }] of Object.entries(result.statusCodeStats)) {
    if (!status.startsWith("2")) failures[`http ${status}`] = Number(count);
  }
  if (result.errors > 0) failures.socket = result.errors;
  return loadResult(
    {
      ok,
      failures,
      seconds: result.duration,
      exhausted,
    },
    latency,
  );
}
