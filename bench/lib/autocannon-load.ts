import autocannon from "autocannon";
import { LatencyRecorder, type LoadResult, loadResult } from "./measure.js";
import { type HttpRequestSpec, succeeded } from "./senders.js";

/**
 * A closed-loop HTTP/1.1 run with autocannon: `connections` keep-alive
 * connections, each sending its next request when the last one answered.
 * A request that differs per request number (a body, or headers of its
 * own) is built in `setupRequest`, its path with it; with `limit`, the run
 * stops once that many requests were handed out (seeded referees ran out).
 * A success is a 2xx answer, or the spec's `okStatus`.
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
  const { body, headersOf } = spec;
  const instance = autocannon({
    url: origin,
    connections: options.connections,
    duration: options.seconds,
    requests: [
      {
        method: spec.method,
        // Each connection loops over one request; what differs is rebuilt for each.
        path: spec.path(0),
        headers: { ...spec.headers },
        ...(body || headersOf
          ? {
              setupRequest: (request) => {
                const i = next++;
                if (options.limit !== undefined && i >= options.limit && !exhausted) {
                  exhausted = true;
                  // Stopping from inside autocannon's own loop is not safe.
                  setImmediate(() => instance.stop());
                }
                // The few requests still in flight after the stop repeat the last one.
                const index = options.limit === undefined ? i : Math.min(i, options.limit - 1);
                return {
                  ...request,
                  path: spec.path(index),
                  ...(headersOf ? { headers: { ...request.headers, ...headersOf(index) } } : {}),
                  ...(body ? { body: body(index) } : {}),
                };
              },
            }
          : {}),
      },
    ],
  });
  // autocannon's own histogram keeps whole milliseconds; keep microseconds.
  instance.on("response", (_client, statusCode, _bytes, responseTime) => {
    if (succeeded(spec, statusCode)) {
      ok++;
      latency.recordMs(responseTime);
    }
  });
  const result = await instance;
  const failures: Record<string, number> = {};
  for (const [status, { count }] of Object.entries(result.statusCodeStats)) {
    if (!succeeded(spec, Number(status))) failures[`http ${status}`] = Number(count);
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
