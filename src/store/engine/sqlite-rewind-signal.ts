/**
 * The two cells, in a shared `Int32Array`, by which the checkpoint worker
 * and the service's connection agree on a rewind of the write-ahead log
 * (see `sqlite-checkpointer.ts`).
 */
export const rewindSignal = {
  /** 1 while the worker wants the write lock to rewind the log. */
  wanted: 0,
  /** 1 while the service's connection waits, between transactions, for the rewind. */
  parked: 1,
} as const;
