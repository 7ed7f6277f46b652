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
  type ContextValues,
  createContextValues,
  type HandlerContext,
  type ServiceImpl,
} from "@connectrpc/connect";
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

/** One step around every call; calls `next` to go on. Listed in `interceptors.ts`. */
export type Interceptor = (call: Call, next: () => Promise<Message>) => Promise<Message>;

/**
 * Watches calls without changing them (logs, metrics): told of each call as
 * it enters the pipeline, it returns what to do with the outcome: the code
 * word the caller will see (`ok` on success) and the milliseconds it took.
 */
export type CallObserver = (call: Call) => (code: string, elapsedMs: number) => void;

/**
 * The step that tells the observers of every outcome, whatever it is. One
 * step for all of them, so a call is timed once and wrapped once.
 */
export function observeCalls(observers: readonly CallObserver[]): Interceptor {
  return async (call, next) => {
    const reports = observers.map((observe) => observe(call));
    const started = performance.now();
    let code = "ok";
    try {
      return await next();
    } catch (error) {
      code = codeOf(error);
      throw error;
    } finally {
      const elapsedMs = performance.now() - started;
      for (const report of reports) report(code, elapsedMs);
    }
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
    (next, interceptor) => (call) => interceptor(call, () => next(call)),
    implementation,
  );
}

/**
 * The HandlerContext of a call that did not come through the Connect router
 * (REST, grpc-js). Services read only its values, so headers and the signal
 * are made when first asked for, not on every call.
 */
export class CallContext implements HandlerContext {
  readonly values: ContextValues = createContextValues();
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
