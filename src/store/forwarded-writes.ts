import type { Document } from "mongodb";
import type { JointWrite, StoreCollection } from "./collection.js";
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
  | { readonly kind: "together"; readonly writes: readonly JointWrite[] }
  | { readonly kind: "probeWrite" }
  | { readonly kind: "forgetFreed" }
  | { readonly kind: "replaceStats"; readonly args: unknown[] };

/** A store command, numbered for its answer. */
export interface StoreRequest {
  readonly id: number;
  readonly command: StoreCommand;
}

/**
 * The commands a worker's calls gave in one turn of its event loop, in one
 * message: a message costs the writer's loop more (a write, a read, a
 * deserialization) than the command in it, and the commands of one turn
 * share the writer's next commit anyway.
 */
export interface StoreRequests {
  readonly type: "store";
  readonly requests: readonly StoreRequest[];
}

/** The writer's answer to one {@link StoreRequest}. */
export interface StoreReply {
  readonly id: number;
  readonly result?: unknown;
  readonly error?: SentError;
}

/** The answers one commit gave a worker, in one message (see {@link StoreRequests}). */
export interface StoreReplies {
  readonly type: "store-reply";
  readonly replies: readonly StoreReply[];
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
  send(requests: StoreRequests): void;
}

/**
 * A worker's side: numbers each command, sends those of a turn together,
 * and settles each promise with the writer's reply. `pending` is what
 * WRITE_QUEUE_LIMIT bounds here.
 */
export class ForwardedWrites {
  private nextId = 1;
  /** The commands of this turn, sent as it ends (`setImmediate`: after every call the turn's I/O started). */
  private outgoing: StoreRequest[] = [];
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
      this.outgoing.push({ id, command });
      if (this.outgoing.length === 1) setImmediate(this.sendOutgoing);
    });
  }

  private readonly sendOutgoing = () => {
    const requests = this.outgoing;
    this.outgoing = [];
    if (requests.length > 0) this.link.send({ type: "store", requests });
  };

  /** Settles the commands a message of replies answers. */
  settle(message: StoreReplies): void {
    let answered = false;
    for (const reply of message.replies) {
      const waiter = this.waiting.get(reply.id);
      if (!waiter) continue;
      this.waiting.delete(reply.id);
      // Once per message: every reply in it lies behind the same commits.
      if (!answered) for (const listener of this.answerListeners) listener();
      answered = true;
      if (reply.error) waiter.reject(receivedError(reply.error));
      else waiter.resolve(reply.result);
    }
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
    return { id: request.id, result: await run(request.command) };
  } catch (error) {
    return { id: request.id, error: sentError(error) };
  }
}

/**
 * The writer's answers, gathered per worker and sent once the commit that
 * settled them has settled all it holds (`process.nextTick`, after the
 * promise jobs a commit's answers run as): one message per worker and
 * commit rather than one per write.
 */
export class StoreReplyBatches<Worker> {
  private readonly gathered = new Map<Worker, StoreReply[]>();

  constructor(private readonly send: (worker: Worker, message: StoreReplies) => void) {}

  add(worker: Worker, reply: StoreReply): void {
    if (this.gathered.size === 0) process.nextTick(this.sendGathered);
    const replies = this.gathered.get(worker);
    if (replies) replies.push(reply);
    else this.gathered.set(worker, [reply]);
  }

  private readonly sendGathered = () => {
    for (const [worker, replies] of this.gathered)
      this.send(worker, { type: "store-reply", replies });
    this.gathered.clear();
  };
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
