import type { Document } from "mongodb";
import type { StoreCollection } from "./collection.js";
import { DuplicateKeyError, WriterLostError } from "./errors.js";

/**
 * The embedded store in a cluster: one process (the primary) writes the
 * SQLite file; every worker reads it through its own read-only connection
 * and sends each collection write, as the call it is (collection,
 * operation, arguments), to the writer, which runs it like one of its own
 * (same savepoint, same group commit, same counters) and answers once it is
 * committed. Services, repositories and jobs are the same code in both.
 */

/** The collection operations that write: the ones a worker forwards. */
export const writeOperations = [
  "insertOne",
  "insertMany",
  "updateOne",
  "updateMany",
  "findOneAndUpdate",
  "deleteOne",
  "deleteMany",
] as const;

export type WriteOperation = (typeof writeOperations)[number];

/** A write, or a whole-database step, sent to the writer. */
export type StoreCommand =
  | {
      readonly kind: "write";
      readonly collection: string;
      readonly operation: WriteOperation;
      readonly args: unknown[];
    }
  | { readonly kind: "probeWrite" }
  | { readonly kind: "forgetFreed" }
  | { readonly kind: "replaceStats"; readonly args: unknown[] };

/** A store command on the wire, numbered for its answer. */
export interface StoreRequest {
  readonly type: "store";
  readonly id: number;
  readonly command: StoreCommand;
}

/** The writer's answer to one {@link StoreRequest}. */
export interface StoreReply {
  readonly type: "store-reply";
  readonly id: number;
  readonly result?: unknown;
  readonly error?: SentError;
}

/** An error as it crosses processes: what the store's callers look at (name, codes). */
export interface SentError {
  readonly name: string;
  readonly message: string;
  readonly code?: unknown;
  readonly errcode?: unknown;
  readonly errstr?: unknown;
}

/** What a worker sends its requests through and hears replies from. */
export interface WriterLink {
  send(request: StoreRequest): void;
}

/**
 * A worker's side: numbers each command, sends it, and settles its promise
 * with the writer's reply. `pending` is what WRITE_QUEUE_LIMIT bounds here.
 */
export class ForwardedWrites {
  private nextId = 1;
  private readonly waiting = new Map<
    number,
    { resolve: (value: unknown) => void; reject: (error: unknown) => void }
  >();
  private lost: Error | undefined;
  private readonly answerListeners: (() => void)[] = [];

  constructor(private readonly link: WriterLink) {}

  /** `listener` is told of each answer before its waiter resumes: a commit lies behind it. */
  onAnswer(listener: () => void): void {
    this.answerListeners.push(listener);
  }

  /** Sends a command; resolves with what the writer's call resolved to. */
  run(command: StoreCommand): Promise<unknown> {
    if (this.lost) return Promise.reject(this.lost);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.link.send({ type: "store", id, command });
    });
  }

  /** Settles the command a reply answers. */
  settle(reply: StoreReply): void {
    const waiter = this.waiting.get(reply.id);
    if (!waiter) return;
    this.waiting.delete(reply.id);
    for (const listener of this.answerListeners) listener();
    if (reply.error) waiter.reject(receivedError(reply.error));
    else waiter.resolve(reply.result);
  }

  /**
   * The writer is gone: every command waiting fails (whether it was
   * committed is unknown to this process; a client retries with its
   * idempotency key), and so does every later one.
   */
  writerLost(): void {
    this.lost = new WriterLostError();
    for (const waiter of this.waiting.values()) waiter.reject(this.lost);
    this.waiting.clear();
  }

  /** Commands sent and not answered yet. */
  get pending(): number {
    return this.waiting.size;
  }
}

/**
 * A collection of a worker: reads on the worker's own connection (`local`,
 * its table of the file), writes sent to the writer under the table's name.
 */
export function forwardingCollection<T extends Document>(
  local: StoreCollection<T> & { readonly name: string },
  writes: ForwardedWrites,
): StoreCollection<T> {
  const forwarded = Object.fromEntries(
    writeOperations.map((operation) => [
      operation,
      (...args: unknown[]) =>
        writes.run({ kind: "write", collection: local.name, operation, args }),
    ]),
  );
  return {
    get version() {
      return local.version;
    },
    findOne: (filter, options) => local.findOne(filter, options),
    find: (filter, options) => local.find(filter, options),
    countDocuments: (filter, options) => local.countDocuments(filter, options),
    ...(local.countMany
      ? {
          countMany: (filters, limit) => local.countMany?.(filters, limit) as Promise<number[]>,
        }
      : {}),
    aggregate: (pipeline) => local.aggregate(pipeline),
    createIndex: (spec, options) => local.createIndex(spec, options),
    dropIndex: (name) => local.dropIndex(name),
    ...forwarded,
  } as StoreCollection<T>;
}

/**
 * The writer's side: runs one command on its collections and answers with
 * the result or the error as the worker's caller should see it.
 */
export async function answerStoreRequest(
  request: StoreRequest,
  run: (command: StoreCommand) => Promise<unknown>,
): Promise<StoreReply> {
  try {
    return { type: "store-reply", id: request.id, result: await run(request.command) };
  } catch (error) {
    return { type: "store-reply", id: request.id, error: sentError(error) };
  }
}

function sentError(error: unknown): SentError {
  const { name, message, code, errcode, errstr } = error as Record<string, unknown>;
  return {
    name: typeof name === "string" ? name : "Error",
    message: typeof message === "string" ? message : String(error),
    ...(code !== undefined ? { code } : {}),
    ...(errcode !== undefined ? { errcode } : {}),
    ...(errstr !== undefined ? { errstr } : {}),
  };
}

/** The error again, as the types the store's callers test for. */
function receivedError(sent: SentError): Error {
  if (sent.name === "DuplicateKeyError") return new DuplicateKeyError(sent.message);
  const error = new Error(sent.message);
  error.name = sent.name;
  return Object.assign(error, {
    ...(sent.code !== undefined ? { code: sent.code } : {}),
    ...(sent.errcode !== undefined ? { errcode: sent.errcode } : {}),
    ...(sent.errstr !== undefined ? { errstr: sent.errstr } : {}),
  });
}
