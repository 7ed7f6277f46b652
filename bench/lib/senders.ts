import { Agent, request as httpRequest } from "node:http";
import { type ClientHttp2Session, connect as http2Connect } from "node:http2";
import type { Send } from "./drive.js";

/** One HTTP request of a scenario; path, headers and body may differ per request number. */
export interface HttpRequestSpec {
  readonly method: "GET" | "POST";
  readonly path: (i: number) => string;
  readonly headers: Readonly<Record<string, string>>;
  /**
   * Headers of request `i` on top of `headers`, when they differ per
   * request (a share link's visitor: its User-Agent and client address).
   */
  readonly headersOf?: (i: number) => Readonly<Record<string, string>>;
  readonly body?: (i: number) => string;
  /**
   * The status a successful answer has (a share link answers 302); any 2xx
   * when unset. Every other status counts as a failure.
   */
  readonly okStatus?: number;
}

/** Whether `status` is the answer `spec` counts as a success. */
export function succeeded(spec: HttpRequestSpec, status: number): boolean {
  return spec.okStatus === undefined ? status >= 200 && status < 300 : status === spec.okStatus;
}

/**
 * A sender over HTTP/1.1 keep-alive connections (at most `connections`
 * open), opened before it is returned: otherwise the first requests of a
 * measured run each wait for a new connection, and at 32 connections that
 * start-up burst alone was most of an open-loop run's slowest 1%.
 */
export async function http1Sender(
  origin: string,
  spec: HttpRequestSpec,
  connections: number,
): Promise<{ send: Send; close(): void }> {
  const url = new URL(origin);
  const agent = new Agent({ keepAlive: true, maxSockets: connections });
  await Promise.all(
    Array.from(
      { length: connections },
      () =>
        new Promise<void>((resolve, reject) => {
          // /healthz: no key, no store, no rate limit; the socket stays in the agent's pool.
          const request = httpRequest(
            { agent, host: url.hostname, port: url.port, path: "/healthz" },
            (response) => response.resume().on("end", resolve),
          );
          request.on("error", reject);
          request.end();
        }),
    ),
  );
  const send: Send = (i) =>
    new Promise((resolve) => {
      const body = spec.body?.(i);
      const headers: Record<string, string | number> = { ...spec.headers, ...spec.headersOf?.(i) };
      if (body !== undefined) headers["content-length"] = Buffer.byteLength(body);
      const request = httpRequest(
        {
          agent,
          host: url.hostname,
          port: url.port,
          method: spec.method,
          path: spec.path(i),
          headers,
        },
        (response) => {
          response.resume();
          response.on("end", () => {
            const status = response.statusCode ?? 0;
            resolve(succeeded(spec, status) ? true : `http ${status}`);
          });
          response.on("error", () => resolve("socket"));
        },
      );
      request.on("error", () => resolve("socket"));
      request.end(body);
    });
  return { send, close: () => agent.destroy() };
}

/** One gRPC call of a scenario: the method path and the message bytes of request `i`. */
export interface GrpcRequestSpec {
  readonly path: string;
  readonly metadata: Readonly<Record<string, string>>;
  readonly message: (i: number) => Uint8Array;
}

/** The gRPC length-prefixed frame of one uncompressed message. */
export function grpcFrame(message: Uint8Array): Buffer {
  const frame = Buffer.alloc(5 + message.length);
  frame.writeUInt32BE(message.length, 1);
  frame.set(message, 5);
  return frame;
}

/** The outcome of one gRPC call: its status and the response message bytes. */
export interface GrpcReply {
  readonly status: number;
  readonly message: Buffer;
}

/**
 * gRPC over HTTP/2 prior-knowledge sessions, calls spread over the sessions
 * round robin. A call succeeds on HTTP 200 with grpc-status 0 (in the
 * trailers, or in the headers of a trailers-only answer). `send` keeps to
 * the fewest listeners and discards the body: every listener and buffer
 * per call costs the generator a third of its rate.
 */
export async function grpcSender(
  origin: string,
  spec: GrpcRequestSpec,
  sessionCount: number,
): Promise<{ send: Send; call(i: number): Promise<GrpcReply>; close(): void }> {
  const sessions: ClientHttp2Session[] = await Promise.all(
    Array.from(
      { length: sessionCount },
      () =>
        new Promise<ClientHttp2Session>((resolve, reject) => {
          const session = http2Connect(origin);
          session.once("connect", () => resolve(session));
          session.once("error", reject);
        }),
    ),
  );
  const headers = {
    ":method": "POST",
    ":path": spec.path,
    "content-type": "application/grpc",
    te: "trailers",
    ...spec.metadata,
  };
  let turn = 0;
  const open = (i: number, onStatus: (status: number) => void) => {
    const session = sessions[turn++ % sessions.length] as ClientHttp2Session;
    const stream = session.request(headers);
    const read = (fields: Record<string, unknown>) => {
      if (fields["grpc-status"] !== undefined) onStatus(Number(fields["grpc-status"]));
    };
    stream.on("response", (fields) => {
      if (fields[":status"] !== 200) onStatus(Code.Unknown);
      else read(fields);
    });
    stream.on("trailers", read);
    stream.on("error", () => onStatus(Code.Unavailable));
    stream.end(grpcFrame(spec.message(i)));
    return stream;
  };
  return {
    send: (i) =>
      new Promise((resolve) => {
        let status = -1;
        const stream = open(i, (value) => {
          if (status === -1) status = value;
        });
        stream.on("close", () => resolve(status === 0 ? true : `grpc ${status}`));
        stream.resume();
      }),
    call: (i) =>
      new Promise((resolve) => {
        let status = -1;
        const chunks: Buffer[] = [];
        const stream = open(i, (value) => {
          if (status === -1) status = value;
        });
        stream.on("data", (chunk: Buffer) => chunks.push(chunk));
        stream.on("close", () => {
          const body = Buffer.concat(chunks);
          resolve({ status, message: body.length >= 5 ? body.subarray(5) : Buffer.alloc(0) });
        });
      }),
    close: () => {
      for (const session of sessions) session.close();
    },
  };
}

// The gRPC status codes the sender reports itself.
const Code = { Unknown: 2, Unavailable: 14 } as const;
