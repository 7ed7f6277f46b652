/**
 * The webhook receiver as a process of its own (forked by the bench), so
 * receiving events competes with neither the load generator nor the
 * service's event loop: answers 204 at once and counts distinct events.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import type { ReceiverCommand, ReceiverStats } from "./lib/receiver.js";

let seen = new Set<string>();
let duplicates = 0;
let lastAt = 0;
let byType: Record<string, number> = {};

const server = createServer((request, response) => {
  const chunks: Buffer[] = [];
  request.on("data", (chunk: Buffer) => chunks.push(chunk));
  request.on("end", () => {
    response.writeHead(204).end();
    const id = String(request.headers["webhook-id"] ?? "");
    if (seen.has(id)) {
      duplicates++;
      return;
    }
    seen.add(id);
    lastAt = performance.timeOrigin + performance.now();
    try {
      const type = (JSON.parse(Buffer.concat(chunks).toString("utf8")) as { type?: string }).type;
      byType[String(type)] = (byType[String(type)] ?? 0) + 1;
    } catch {
      byType.unreadable = (byType.unreadable ?? 0) + 1;
    }
  });
});

process.on("message", (command: ReceiverCommand) => {
  if (command === "reset") {
    seen = new Set();
    duplicates = 0;
    lastAt = 0;
    byType = {};
  }
  const stats: ReceiverStats = { events: seen.size, duplicates, lastAt, byType };
  process.send?.(stats);
});

server.listen(0, "127.0.0.1", () => {
  process.send?.({ port: (server.address() as AddressInfo).port });
});
