import type * as MongoDriver from "mongodb";

/**
 * The MongoDB driver's error classes, known once a MongoDB store loaded the
 * driver (`recognizeDriverErrors`). The embedded store never loads it (it
 * took a tenth of every process's start), and before it is loaded no error
 * of the driver can exist.
 */
let driver:
  | Pick<
      typeof MongoDriver,
      | "MongoNetworkError"
      | "MongoNotConnectedError"
      | "MongoServerError"
      | "MongoServerSelectionError"
      | "MongoTopologyClosedError"
    >
  | undefined;

/** Called by the MongoDB store as it loads the driver. */
export function recognizeDriverErrors(loaded: typeof MongoDriver): void {
  driver = loaded;
}

/** The embedded engine's unique-index violation, MongoDB's error 11000. */
export class DuplicateKeyError extends Error {
  readonly code = 11000;
  constructor(message: string) {
    super(message);
    this.name = "DuplicateKeyError";
  }
}

/** True for a unique-index violation on either engine. */
export function isDuplicateKeyError(error: unknown): boolean {
  return (
    error instanceof DuplicateKeyError ||
    (driver !== undefined && error instanceof driver.MongoServerError && error.code === 11000)
  );
}

/** SQLite's primary result codes that mean "not now", not "never" (the low byte of an extended code). */
const sqliteUnavailable: ReadonlyMap<number, string> = new Map([
  [13, "the disk is full"], // SQLITE_FULL
  [10, "the disk failed a read or write"], // SQLITE_IOERR (a full disk shows as this too)
  [5, "the database was locked past its timeout"], // SQLITE_BUSY
  [6, "the database was locked past its timeout"], // SQLITE_LOCKED
]);

/**
 * Why the store cannot take a write now, when `error` says so: a full disk,
 * a disk error, a lock held past its timeout, MongoDB unreachable; undefined
 * for any other error (a bug, a broken invariant), which stays internal.
 */
export function storeUnavailableReason(error: unknown): string | undefined {
  if (!(error instanceof Error)) return undefined;
  const { code, errcode } = error as { code?: unknown; errcode?: unknown };
  if (code === "ERR_SQLITE_ERROR" && typeof errcode === "number") {
    return sqliteUnavailable.get(errcode & 0xff);
  }
  if (code === "ENOSPC") return "the disk is full";
  if (error instanceof WriterLostError) return "the store's writer stopped";
  if (
    driver !== undefined &&
    (error instanceof driver.MongoNetworkError ||
      error instanceof driver.MongoServerSelectionError ||
      error instanceof driver.MongoNotConnectedError ||
      error instanceof driver.MongoTopologyClosedError)
  ) {
    return "MongoDB is unreachable";
  }
  return error.cause === undefined ? undefined : storeUnavailableReason(error.cause);
}

/** A cluster's worker lost its writer (the primary process is gone): nothing more is written. */
export class WriterLostError extends Error {
  constructor() {
    super("the store's writer process is gone");
    this.name = "WriterLostError";
  }
}

/** A database file could not be opened or read; names the file. */
export class StoreOpenError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "StoreOpenError";
  }
}
