import {
  create,
  type DescMessage,
  type DescMethod,
  type DescService,
  isMessage,
  type Message,
  type MessageInitShape,
} from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  type ContextKey,
  type ContextValues,
  type HandlerContext,
  type ServiceImpl,
} from "@connectrpc/connect";
import { codeOf, shuttingDownError } from "./errors.js";

/** How a call arrived. */
export type ProtocolName = "rest" | "grpc" | "connect" | "grpc-web";

/** One RPC: its descriptors and its one implementation. */
export interface Rpc {
  readonly service: DescService;
  readonly method: DescMethod;
  /** `Service/Method`, for logs. */
  readonly name: string;
  /**
   * A unary RPC's implementation resolves with its response; a
   * server-streaming one returns its responses as an async iterable (an
   * async generator), which the pipeline opens (see {@link ResponseStream}).
   */
  readonly implementation: (
    request: Message,
    context: HandlerContext,
  ) => Promise<MessageInitShape<DescMessage>> | AsyncIterable<MessageInitShape<DescMessage>>;
}

/** A service and its implementation, typed together (see {@link register}). */
export interface ServiceRegistration {
  readonly service: DescService;
  readonly rpcs: readonly Rpc[];
}

/**
 * Pairs a service with its implementation; the compiler checks they match.
 * Unary and server-streaming RPCs are served; the transports take no
 * client streams.
 */
export function register<S extends DescService>(
  service: S,
  implementation: ServiceImpl<S>,
): ServiceRegistration {
  const methods = implementation as unknown as Record<string, Rpc["implementation"] | undefined>;
  return {
    service,
    rpcs: service.methods.map((method) => {
      const handler = methods[method.localName];
      if (!handler) throw new Error(`${service.typeName}.${method.name} has no implementation`);
      if (method.methodKind !== "unary" && method.methodKind !== "server_streaming") {
        throw new Error(`${service.typeName}.${method.name} is ${method.methodKind}: not served`);
      }
      return {
        service,
        method,
        name: `${service.typeName}/${method.name}`,
        implementation: handler.bind(implementation),
      };
    }),
  };
}

/**
 * One call, whatever protocol brought it. Transports fill it and hand it to
 * the pipeline; they only decode and encode.
 */
export interface Call {
  readonly rpc: Rpc;
  readonly protocol: ProtocolName;
  /** A request header (gRPC metadata), by lower-case name. */
  header(name: string): string | undefined;
  /**
   * The request. Transports that decode after authentication (REST, gRPC)
   * leave it unset and give `decode`; Connect has decoded it already.
   */
  request?: Message;
  readonly decode?: () => Message;
  /** What the implementation receives; interceptors put the caller in its values. */
  readonly context: HandlerContext;
  /** The client's IP address, for limits and logs. */
  readonly clientAddress: string;
  /**
   * Headers (gRPC: metadata) the interceptors add to the response, whatever
   * its outcome: transports write them on success, and a failed call carries
   * them in its ConnectError's metadata.
   */
  readonly responseHeaders: Map<string, string>;
  /**
   * A server-streaming call's responses, set by the pipeline once the
   * implementation gave its first message (or ended without one). The
   * pipeline returns that first message, so the interceptors see the
   * opening as a unary call; the transport writes the stream after it.
   */
  responseStream?: ResponseStream;
}

/** Goes on with a call: the next interceptor, or the implementation. */
export type Next = (call: Call) => Promise<Message>;

/**
 * One step around every call; calls `next(call)` to go on. Listed in
 * `interceptors.ts`. `next` is fixed when the pipeline is built, so a call
 * allocates no closure per step.
 */
export type Interceptor = (call: Call, next: Next) => Promise<Message>;

/**
 * Watches calls without changing them (logs, metrics): told of each call as
 * it enters the pipeline, then of its outcome: the code word the caller
 * will see (`ok` on success) and the milliseconds it took. What it needs in
 * between it keeps on the call (a response header) or in its instruments,
 * so a call makes no closure per observer.
 */
export interface CallObserver {
  enter(call: Call): void;
  leave(call: Call, code: string, elapsedMs: number): void;
  /**
   * Told when the stream of a server-streaming call ends, after `leave` told
   * its opening (`ok`): the code it ended with (`canceled` when the client
   * went away, `unavailable` when the service drained), the milliseconds
   * since the call entered, and how many messages the transport read.
   */
  streamEnded?(call: Call, code: string, elapsedMs: number, messages: number): void;
}

/** The observing step, and how to tell the observers now of the outcomes they have yet to hear. */
export interface ObservedCalls {
  readonly step: Interceptor;
  settle(): void;
}

/**
 * The step that tells the observers of every outcome, whatever it is. One
 * step for all of them, so a call is timed once and wrapped once. A call
 * enters the observers at once (its request id is a response header), but
 * leaves them only after the responses of this turn of the event loop are
 * written: logging and counting a call need not delay its response, and on
 * a busy machine a microsecond before the response costs more than one
 * after it (see *Operations* in docs/performance.md). Whoever reads
 * what the observers keep (a metrics scrape, the shutdown) settles first.
 */
export function observeCalls(observers: readonly CallObserver[]): ObservedCalls {
  // The outcomes waiting, in parallel arrays: no object per call.
  const calls: Call[] = [];
  const codes: string[] = [];
  const elapsed: number[] = [];
  let scheduled: NodeJS.Immediate | undefined;
  const settle = () => {
    if (scheduled) clearImmediate(scheduled);
    scheduled = undefined;
    try {
      for (let index = 0; index < calls.length; index++) {
        for (const observer of observers) {
          observer.leave(calls[index] as Call, codes[index] as string, elapsed[index] as number);
        }
      }
    } finally {
      calls.length = 0;
      codes.length = 0;
      elapsed.length = 0;
    }
  };
  const leave = (call: Call, code: string, started: number) => {
    calls.push(call);
    codes.push(code);
    elapsed.push(performance.now() - started);
    scheduled ??= setImmediate(settle);
  };
  return {
    settle,
    step: async (call, next) => {
      for (const observer of observers) observer.enter(call);
      const started = performance.now();
      try {
        const response = await next(call);
        leave(call, "ok", started);
        call.responseStream?.whenEnded((code, messages) => {
          // The opening is told first, so a stream is never seen to end before it opened.
          settle();
          const elapsedMs = performance.now() - started;
          for (const observer of observers) observer.streamEnded?.(call, code, elapsedMs, messages);
        });
        return response;
      } catch (error) {
        leave(call, codeOf(error), started);
        throw error;
      }
    },
  };
}

/** Runs a call through the interceptors, then its implementation. */
export type Pipeline = (call: Call) => Promise<Message>;

/**
 * The pipeline: the interceptors in order, the implementation last. A
 * server-streaming implementation is opened (see {@link openStream}), so
 * the interceptors run once, around the opening.
 */
export function createPipeline(interceptors: readonly Interceptor[]): Pipeline {
  const streams: OpenStreams = { open: new Set(), draining: false };
  const implementation: Pipeline = async (call) => {
    const { method } = call.rpc;
    if (method.methodKind === "server_streaming") return openStream(call, streams);
    const result = await (call.rpc.implementation(call.request as Message, call.context) as Promise<
      MessageInitShape<DescMessage>
    >);
    return isMessage(result, method.output) ? result : create(method.output, result);
  };
  const pipeline = interceptors.reduceRight<Pipeline>(
    (next, interceptor) => (call) => interceptor(call, next),
    implementation,
  );
  streamsOfPipeline.set(pipeline, streams);
  return pipeline;
}

/** The streams a pipeline serves now, so that a drain can end them. */
interface OpenStreams {
  readonly open: Set<ResponseStream>;
  /** Set by {@link endStreams}: no stream opens any more. */
  draining: boolean;
}

const streamsOfPipeline = new WeakMap<Pipeline, OpenStreams>();

/**
 * The drain: ends every stream the pipeline serves, on every protocol, with
 * UNAVAILABLE (a client retries elsewhere; an export cut short must not
 * look complete), and refuses to open new ones.
 */
export function endStreams(pipeline: Pipeline): void {
  const streams = streamsOfPipeline.get(pipeline);
  if (!streams) return;
  streams.draining = true;
  for (const stream of [...streams.open]) stream.end(shuttingDownError());
}

/**
 * Starts a server-streaming implementation and waits for its first message,
 * which the pipeline returns like a unary response (an empty message when
 * the stream has none); the stream goes on the call. An error before the
 * first message is the call's error. The implementation's signal aborts
 * when the client goes away and when the stream is ended (a drain).
 */
async function openStream(call: Call, streams: OpenStreams): Promise<Message> {
  if (streams.draining) throw shuttingDownError();
  const output = call.rpc.method.output;
  const ending = new AbortController();
  const signal = AbortSignal.any([call.context.signal, ending.signal]);
  // The call's context with that signal: everything else is read through to it.
  const context = Object.create(call.context, { signal: { value: signal } }) as HandlerContext;
  const responses = call.rpc.implementation(call.request as Message, context) as AsyncIterable<
    MessageInitShape<DescMessage>
  >;
  const stream = new ResponseStream(
    output,
    responses[Symbol.asyncIterator](),
    ending,
    signal,
    streams.open,
  );
  const first = await stream.start();
  // REST and gRPC send what the implementation set on its context's
  // response headers (a Content-Disposition) with the interceptors'
  // headers; connect-es sends its own context's.
  if (call.context instanceof CallContext) {
    for (const [name, value] of call.context.implementationHeaders()) {
      call.responseHeaders.set(name, value);
    }
  }
  call.responseStream = stream;
  return first ?? create(output);
}

const streamDone: IteratorReturnResult<undefined> = { done: true, value: undefined };

/**
 * The responses of a server-streaming call, for its transport to write:
 * the first message (read while the call was in the pipeline), then the
 * implementation's next ones as the transport asks for them, so a slow
 * client slows the implementation down. A read that fails throws the
 * implementation's error, as the pipeline's error step makes it.
 *
 * When the implementation's signal aborts (the client went away, or
 * {@link end}), the stream ends at once, even while the implementation
 * waits: the read in progress throws CANCELED (or the error it was ended
 * with). However it ends, the implementation is returned, which runs its
 * `finally` blocks (once it wakes from the abort, if it was waiting).
 */
export class ResponseStream implements AsyncIterableIterator<Message> {
  /** The first message, if any: REST's Content-Type of a body comes from it. */
  first: Message | undefined;
  /** The first read, until the transport takes it. */
  private head: IteratorResult<Message> | undefined;
  /** The read in progress, settled by the implementation or by a stop, whichever comes first. */
  private pending: PendingRead | undefined;
  private outcome: { code: string; stoppedBy?: ConnectError } | undefined;
  private messages = 0;
  private normalise: (error: unknown) => unknown = (error) => error;
  private endListeners: ((code: string, messages: number) => void)[] = [];

  constructor(
    private readonly output: DescMessage,
    private readonly responses: AsyncIterator<MessageInitShape<DescMessage>>,
    private readonly ending: AbortController,
    signal: AbortSignal,
    private readonly openStreams: Set<ResponseStream>,
  ) {
    openStreams.add(this);
    if (signal.aborted) this.stop(signal.reason);
    else signal.addEventListener("abort", () => this.stop(signal.reason), { once: true });
  }

  /** Reads the first message (undefined when there is none); throws what the implementation threw before it. */
  async start(): Promise<Message | undefined> {
    try {
      this.head = await this.pull();
    } catch (error) {
      this.finish(codeOf(error));
      throw error;
    }
    this.first = this.head.done ? undefined : this.head.value;
    return this.first;
  }

  async next(): Promise<IteratorResult<Message>> {
    let result = this.head;
    this.head = undefined;
    if (this.outcome?.stoppedBy) throw this.outcome.stoppedBy;
    if (!result) {
      try {
        result = await this.pull();
      } catch (error) {
        const normalised = this.normalise(error);
        this.finish(codeOf(normalised));
        throw normalised;
      }
    }
    if (result.done) this.finish("ok");
    else this.messages++;
    return result;
  }

  /** The transport stops reading (a `for await` left early): the stream is cancelled. */
  async return(): Promise<IteratorResult<Message>> {
    this.end();
    return streamDone;
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  /**
   * Ends the stream now: CANCELED, or `error`, which its client is told
   * (the drain's UNAVAILABLE, a revoked key's UNAUTHENTICATED).
   */
  end(error?: ConnectError): void {
    this.ending.abort(error ?? cancelled());
  }

  /** Set by the pipeline's error step: how the implementation's errors after the start leave. */
  normaliseErrorsWith(normalise: (error: unknown) => unknown): void {
    this.normalise = normalise;
  }

  /**
   * Calls `listener` once the stream has ended, however it ends, with its
   * code and the messages read.
   */
  whenEnded(listener: (code: string, messages: number) => void): void {
    if (this.outcome) listener(this.outcome.code, this.messages);
    else this.endListeners.push(listener);
  }

  private pull(): Promise<IteratorResult<Message>> {
    const { outcome } = this;
    if (outcome) {
      return outcome.stoppedBy ? Promise.reject(outcome.stoppedBy) : Promise.resolve(streamDone);
    }
    return new Promise((resolve, reject) => {
      const pending = { reject };
      this.pending = pending;
      this.responses.next().then(
        (result) => {
          if (this.pending !== pending) return; // stopped: the read was answered then
          this.pending = undefined;
          try {
            resolve(
              result.done
                ? streamDone
                : { done: false, value: messageOf(this.output, result.value) },
            );
          } catch (error) {
            reject(error);
          }
        },
        (error: unknown) => {
          if (this.pending !== pending) return;
          this.pending = undefined;
          reject(error);
        },
      );
    });
  }

  private stop(reason: unknown): void {
    if (this.outcome) return;
    // What `end` was given is the service's word; the client's signal is told apart.
    const ended = this.ending.signal.aborted && reason === this.ending.signal.reason;
    const error = ended && reason instanceof ConnectError ? reason : stopError(reason);
    this.finish(codeOf(error), error);
    const { pending } = this;
    this.pending = undefined;
    pending?.reject(error);
  }

  private finish(code: string, stoppedBy?: ConnectError): void {
    if (this.outcome) return;
    this.outcome = stoppedBy ? { code, stoppedBy } : { code };
    this.openStreams.delete(this);
    // Returning a generator that is done already changes nothing.
    this.responses.return?.().catch((error: unknown) => this.normalise(error));
    for (const listener of this.endListeners) listener(code, this.messages);
    this.endListeners = [];
  }
}

interface PendingRead {
  reject(error: unknown): void;
}

function messageOf(schema: DescMessage, value: MessageInitShape<DescMessage>): Message {
  return isMessage(value, schema) ? value : create(schema, value);
}

function cancelled(): ConnectError {
  return new ConnectError("the call was cancelled", Code.Canceled);
}

/**
 * Why a stream stopped early, as its client, if still there, is told: the
 * drain's UNAVAILABLE and connect-es's deadline are kept; anything else is
 * the client going away.
 */
function stopError(reason: unknown): ConnectError {
  const kept =
    reason instanceof ConnectError &&
    (reason.code === Code.Unavailable || reason.code === Code.DeadlineExceeded);
  return kept ? reason : cancelled();
}

/**
 * A call as REST and grpc-js hand it to the pipeline, one object per call:
 * what every transport fills alike. Each transport says how it reads a
 * header, its client's address and its request.
 */
export abstract class TransportCall implements Call {
  readonly responseHeaders = new Map<string, string>();
  readonly context: CallContext;
  request?: Message;
  responseStream?: ResponseStream;

  constructor(
    readonly rpc: Rpc,
    readonly protocol: ProtocolName,
    requestMethod: string,
    url: string,
    readRequestHeader: () => Headers,
  ) {
    this.context = new CallContext(rpc.method, protocol, requestMethod, url, readRequestHeader);
  }

  abstract get clientAddress(): string;
  abstract header(name: string): string | undefined;
  abstract decode(): Message;
}

/**
 * The HandlerContext of a call that did not come through the Connect router
 * (REST, grpc-js). Services read only its values, so headers and the signal
 * are made when first asked for, not on every call.
 */
export class CallContext implements HandlerContext {
  readonly values: ContextValues = new CallValues();
  readonly service: DescService;
  private controller: AbortController | undefined;
  private headers: { request?: Headers; response?: Headers; trailer?: Headers } = {};

  constructor(
    readonly method: DescMethod,
    readonly protocolName: ProtocolName,
    readonly requestMethod: string,
    readonly url: string,
    private readonly readRequestHeader: () => Headers,
  ) {
    this.service = method.parent;
  }

  get signal(): AbortSignal {
    this.controller ??= new AbortController();
    return this.controller.signal;
  }

  /** Aborts `signal` (the client went away). */
  abort(): void {
    this.controller?.abort();
  }

  timeoutMs(): number | undefined {
    return undefined;
  }

  get requestHeader(): Headers {
    this.headers.request ??= this.readRequestHeader();
    return this.headers.request;
  }

  get responseHeader(): Headers {
    this.headers.response ??= new Headers();
    return this.headers.response;
  }

  /** What the implementation set on `responseHeader`: nothing unless it asked for it. */
  implementationHeaders(): Iterable<[string, string]> {
    return this.headers.response ?? [];
  }

  get responseTrailer(): Headers {
    this.headers.trailer ??= new Headers();
    return this.headers.trailer;
  }
}

/**
 * A call's context values (Connect's `ContextValues`), in a Map made on
 * first write: Connect's own object literal carries three new methods and
 * gains a property per value on every call.
 */
class CallValues implements ContextValues {
  private entries: Map<symbol, unknown> | undefined;

  get<T>(key: ContextKey<T>): T {
    const entries = this.entries;
    return entries?.has(key.id) ? (entries.get(key.id) as T) : key.defaultValue;
  }

  set<T>(key: ContextKey<T>, value: T): this {
    this.entries ??= new Map();
    this.entries.set(key.id, value);
    return this;
  }

  delete(key: ContextKey<unknown>): this {
    this.entries?.delete(key.id);
    return this;
  }
}
