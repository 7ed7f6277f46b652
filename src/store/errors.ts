import { MongoServerError } from "mongodb";

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
    (error instanceof MongoServerError && error.code === 11000)
  );
}
