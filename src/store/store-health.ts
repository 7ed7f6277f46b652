import type { Logger } from "pino";
import { storeUnavailableReason } from "./errors.js";
import type { Store } from "./store.js";

/**
 * Whether the store takes writes, and why not. Writes are refused (503,
 * `unavailable`) while the store fails them for a passing reason (a full
 * disk, a lock held too long, MongoDB out of reach) and while DATA_DIR's
 * free space is under its floor, so the disk never fills in the first place;
 * reads go on. A probe write each second (once DATA_DIR has 1 MiB free) finds
 * when writes work again, so the service recovers by itself when space returns.
 */
export interface StoreHealth {
  /** Why writes are refused now; undefined while the store takes them. */
  writesRefused(): string | undefined;
  /**
   * Tells of an error a write or a read met: when it is one of the store's
   * passing failures, writes are refused until a probe write succeeds, the
   * failure is logged (once a second at most, with a count) and its reason
   * returned; undefined for any other error, which the caller handles.
   */
  noteFailure(error: unknown): string | undefined;
  /** The store's disk, for the metrics: free bytes and the database's size (embedded engine). */
  diskUsage(): { freeBytes: number; storeBytes: number } | undefined;
  stop(): void;
}

/** How often the floor is checked and, while writes fail, a probe write is tried. */
const checkIntervalMs = 1000;

/**
 * The free space DATA_DIR needs before a probe write is tried after writes
 * failed. The probe writes one small row, which can fit in space the
 * database and its log already hold on a disk that a call's write (a row,
 * its indexes, the log's frames) no longer fits: readiness would turn back
 * while writes still fail, and back and forth each second.
 */
const roomToRetryWrites = 1024 * 1024;

export function startStoreHealth(deps: {
  store: Pick<Store, "probeWrite"> & {
    diskUsage?: () => { freeBytes: number; storeBytes: number };
  };
  /** DATA_DIR's free space under which writes are refused (MIN_FREE_DISK); 0 is no floor. */
  minFreeBytes: number;
  logger: Logger;
  /**
   * Told each time writes stop (why) or start (undefined) being taken
   * (readiness, gRPC health); also while starting, on a disk already
   * under its floor.
   */
  onChange(refused: string | undefined): void;
}): StoreHealth {
  const { logger } = deps;
  let failing: string | undefined;
  let lowOnDisk: string | undefined;
  let usage: { freeBytes: number; storeBytes: number } | undefined;
  let unreported = 0;
  let lastReportAt = 0;
  let probing = false;
  let refusedBefore = false;

  const report = (reason: string) => {
    logger.warn({ reason, failedWrites: unreported }, "the store refuses writes");
    unreported = 0;
    lastReportAt = Date.now();
  };
  const announce = () => {
    const refused = failing ?? lowOnDisk;
    if ((refused !== undefined) === refusedBefore) return;
    refusedBefore = refused !== undefined;
    if (refused === undefined) logger.info("the store takes writes again");
    deps.onChange(refused);
  };
  const readDisk = () => {
    if (!deps.store.diskUsage) return;
    try {
      usage = deps.store.diskUsage();
    } catch {
      usage = undefined;
      return;
    }
    const floor = deps.minFreeBytes;
    lowOnDisk =
      floor > 0 && usage.freeBytes < floor
        ? `DATA_DIR has ${mebibytes(usage.freeBytes)} free, under MIN_FREE_DISK (${mebibytes(floor)})`
        : undefined;
  };
  const check = async () => {
    readDisk();
    const roomless = usage !== undefined && usage.freeBytes < roomToRetryWrites;
    if (failing && !probing && !roomless) {
      probing = true;
      try {
        await deps.store.probeWrite();
        failing = undefined;
      } catch (error) {
        failing = storeUnavailableReason(error) ?? failing;
      } finally {
        probing = false;
      }
    }
    if (unreported > 0 && failing) report(failing);
    announce();
  };
  readDisk();
  announce();
  const timer = setInterval(() => void check(), checkIntervalMs);
  timer.unref();

  return {
    writesRefused: () => failing ?? lowOnDisk,
    noteFailure(error) {
      const reason = storeUnavailableReason(error);
      if (reason === undefined) return undefined;
      failing = reason;
      unreported += 1;
      if (Date.now() - lastReportAt >= checkIntervalMs) report(reason);
      announce();
      return reason;
    },
    diskUsage: () => usage,
    stop: () => clearInterval(timer),
  };
}

function mebibytes(bytes: number): string {
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}
