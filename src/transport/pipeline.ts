import {
  create,
  type DescMessage,
  type DescMethod,
  type DescService,
  isMessage,
  type Message,
  type MessageInitShape,
} from "@bufbuild/protobuf";
import type { ContextKey, ContextValues, HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { codeOf } from "./errors.js";

/** How a call arrived. */
export type ProtocolName = "rest" | "grpc" | "connect" | "grpc-web";

/** One RPC: its descriptors and its one implementation. */
export interface Rpc {
  readonly service: DescService;
  readonly method: DescMethod;
  /** `Service/Method`, for logs. */
  readonly name: string;
  readonly implementation: (
    request: Message,
    context: HandlerContext,
  ) => Promise<MessageInitShape<DescMessage>>;
}

/** A service and its implementation, typed together (see {@link register}). */
export interface ServiceRegistration {
  readonly service: DescService;
  readonly rpcs: readonly Rpc[];
}

/** Pairs a service with its implementation; the compiler checks they match. */
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
 * after it (see the README's bounds, *The operations steps*). Whoever reads
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

/** The pipeline: the interceptors in order, the implementation last. */
export function createPipeline(interceptors: readonly Interceptor[]): Pipeline {
  const implementation: Pipeline = async (call) => {
    const output = call.rpc.method.output;
    const result = await call.rpc.implementation(call.request as Message, call.context);
    return isMessage(result, output) ? result : create(output, result);
  };
  return interceptors.reduceRight<Pipeline>(
    (next, interceptor) => (call) => interceptor(call, next),
    implementation,
  );
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
