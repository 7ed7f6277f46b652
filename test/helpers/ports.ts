import { readFileSync } from "node:fs";
import { createServer } from "node:net";

/**
 * The first port the system hands out to a bind to port 0 and to outgoing
 * connections; Linux's default when the file cannot be read.
 */
function ephemeralLow(): number {
  try {
    const low = Number(
      readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0],
    );
    if (low) return low;
  } catch {
    // Not Linux: the default range.
  }
  return 32768;
}

const lowestPort = 20_000;
const handedOut = new Set<number>();

/**
 * A loopback port for a service a test starts later by its number (PORT=n).
 * A port the system picked for a probe (bind to 0, then close) can be taken
 * by another process of a parallel test run before the service binds it
 * (seen in CI); this one lies below the system's ephemeral range, where no
 * bind to port 0 and no outgoing connection lands, and nothing listened on
 * it when it was picked.
 */
export async function reservedPort(): Promise<number> {
  const low = ephemeralLow();
  const span = Math.max(1, low - lowestPort);
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = lowestPort + Math.floor(Math.random() * span);
    if (handedOut.has(port)) continue;
    if (await isFree(port)) {
      handedOut.add(port);
      return port;
    }
  }
  throw new Error(`no free port from ${lowestPort} below ${low}`);
}

function isFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = createServer();
    probe.once("error", () => resolve(false));
    probe.listen(port, "127.0.0.1", () => probe.close(() => resolve(true)));
  });
}
