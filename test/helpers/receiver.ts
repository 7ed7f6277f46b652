import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";

/** One request a receiver got. */
export interface ReceivedRequest {
  readonly path: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

/** A webhook receiver on loopback that records requests and answers as told. */
export interface Receiver {
  readonly url: string;
  readonly received: ReceivedRequest[];
  /** The status to answer a request with; 200 unless set. `"hang"` never answers. */
  respond: (request: ReceivedRequest, index: number) => number | "hang";
  /** Resolves once `predicate` holds for the received requests (polls; fails after `timeoutMs`). */
  waitFor(
    predicate: (received: ReceivedRequest[]) => boolean,
    timeoutMs?: number,
    /** What is missing, for the failure's message. */
    describe?: (received: ReceivedRequest[]) => string,
  ): Promise<void>;
  close(): Promise<void>;
}

/** Starts a receiver on 127.0.0.1 and an ephemeral port. */
export async function startReceiver(): Promise<Receiver> {
  const received: ReceivedRequest[] = [];
  const hanging = new Set<() => void>();
  const receiver: Receiver = {
    url: "",
    received,
    respond: () => 200,
    async waitFor(predicate, timeoutMs = 10_000, describe) {
      const deadline = Date.now() + timeoutMs;
      while (!predicate(received)) {
        if (Date.now() > deadline) {
          const detail = describe ? `: ${describe(received)}` : "";
          throw new Error(
            `receiver: condition not met in ${timeoutMs} ms (${received.length} requests)${detail}`,
          );
        }
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    },
    async close() {
      for (const release of hanging) release();
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
  const server: Server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", () => {
      const entry = {
        path: request.url ?? "/",
        headers: request.headers,
        body: Buffer.concat(chunks).toString("utf8"),
      };
      received.push(entry);
      const status = receiver.respond(entry, received.length - 1);
      if (status === "hang") {
        hanging.add(() => response.destroy());
        return;
      }
      response.writeHead(status).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  (receiver as { url: string }).url = `http://127.0.0.1:${port}`;
  return receiver;
}
