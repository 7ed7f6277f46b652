import test from "ava";
import type { Db } from "mongodb";
import { startServerClock } from "../../src/store/engine/server-clock.js";

// A server whose clock is `offsetMs` ahead of this machine's, answering after 20 ms.
function serverAhead(offsetMs: number): Db {
  return {
    async command() {
      await new Promise((resolve) => setTimeout(resolve, 20));
      return { localTime: new Date(Date.now() - 10 + offsetMs) };
    },
  } as unknown as Db;
}

test("the lease clock reads MongoDB's time, not this machine's", async (t) => {
  const hour = 3_600_000;
  const clock = await startServerClock(serverAhead(hour));
  t.teardown(() => clock.stop());
  const drift = clock.now().getTime() - Date.now() - hour;
  // Measured halfway through the round trip: within its length of the server's time.
  t.true(Math.abs(drift) < 50, `off by ${drift} ms`);
});

test("a server that reports no time leaves this machine's clock", async (t) => {
  const clock = await startServerClock({ command: async () => ({}) } as unknown as Db);
  t.teardown(() => clock.stop());
  t.true(Math.abs(clock.now().getTime() - Date.now()) < 5);
});
