import { drive } from "./drive.js";
import type { LoadResult } from "./measure.js";
import { type HttpRequestSpec, http1Sender } from "./senders.js";

/**
 * One call, one request at a time on one kept-alive connection: `warmupSeconds`
 * unrecorded, then `seconds` measured. Requests are numbered across both, so
 * a spec whose requests differ (new customers) never sends one twice.
 */
export async function timeOneAtATime(
  origin: string,
  spec: HttpRequestSpec,
  shape: { readonly seconds: number; readonly warmupSeconds: number },
): Promise<LoadResult> {
  const sender = await http1Sender(origin, spec, 1);
  let sent = 0;
  const send = () => sender.send(sent++);
  try {
    if (shape.warmupSeconds > 0) {
      await drive(send, { seconds: shape.warmupSeconds, concurrency: 1 });
    }
    return await drive(send, { seconds: shape.seconds, concurrency: 1 });
  } finally {
    sender.close();
  }
}

/**
 * The time of a single request (`spec`'s request 0) on a connection opened
 * before the clock starts, in milliseconds; throws when it fails.
 */
export async function timeOneRequest(origin: string, spec: HttpRequestSpec): Promise<number> {
  const sender = await http1Sender(origin, spec, 1);
  try {
    const started = performance.now();
    const outcome = await sender.send(0);
    const ms = performance.now() - started;
    if (outcome !== true) throw new Error(`${spec.method} ${spec.path(0)}: ${outcome}`);
    return ms;
  } finally {
    sender.close();
  }
}
