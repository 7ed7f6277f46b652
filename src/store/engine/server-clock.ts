import type { Db } from "mongodb";

/**
 * MongoDB's clock, read from this process: the server's time (`hello`'s
 * `localTime`) less this machine's, measured at start and again every
 * minute, halfway through each round trip. Leases taken and compared in
 * it mean the same moment on every machine, whatever their own clocks say.
 */
export interface ServerClock {
  now(): Date;
  stop(): void;
}

const remeasureMs = 60_000;

export async function startServerClock(db: Db): Promise<ServerClock> {
  let offsetMs = await measureOffset(db);
  const timer = setInterval(() => {
    measureOffset(db).then(
      (measured) => {
        offsetMs = measured;
      },
      // Unreachable for now: the last offset stands.
      () => {},
    );
  }, remeasureMs);
  timer.unref();
  return {
    now: () => new Date(Date.now() + offsetMs),
    stop: () => clearInterval(timer),
  };
}

async function measureOffset(db: Db): Promise<number> {
  const sent = Date.now();
  const { localTime } = (await db.command({ hello: 1 })) as { localTime?: Date };
  const received = Date.now();
  if (!(localTime instanceof Date)) return 0;
  return localTime.getTime() - (sent + received) / 2;
}
