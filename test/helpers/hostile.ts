import { connect } from "node:http2";
import { Code } from "@connectrpc/connect";
import { codeToHttpStatus } from "@connectrpc/connect/protocol-connect";
import { checkRestResponse } from "./openapi.js";
import type { TestServer } from "./server.js";

/**
 * What only a server's insides would write, never to be found in a response:
 * stack frames, source paths, JavaScript error names, and the words of the
 * JSON and protobuf parsers, the decompressor and the storage engines.
 */
export const internalText =
  /\n\s+at |\bat \S+ \(|file:\/\/|node_modules|\/src\/|\.[cm]?[jt]s:\d+|premature EOF|Unexpected (token|end|non-whitespace)|JSON at position|Maximum call stack|parse binary|cannot decode|decompression failed|incorrect header check|unexpected end of file|TypeError|RangeError|ReferenceError|SyntaxError|is not a function|Cannot read propert|SQLITE|sqlite|constraint failed|Mongo|BSON|internal error/;

/** The response of a raw HTTP/1.1 request: status, headers and the body's text. */
export interface RawResponse {
  readonly status: number;
  readonly headers: Headers;
  readonly body: Uint8Array;
  readonly text: string;
}

/**
 * POSTs bytes to a path with fetch, as no typed client would, giving up
 * after `timeoutMs` (a hang fails the caller's test).
 */
export async function postRaw(
  server: TestServer,
  path: string,
  options: {
    contentType: string;
    /** Left out for GET. */
    body?: Uint8Array | string;
    key?: string;
    headers?: Record<string, string>;
    method?: string;
    timeoutMs?: number;
  },
): Promise<RawResponse> {
  const headers: Record<string, string> = {
    "content-type": options.contentType,
    ...options.headers,
  };
  if (options.key !== undefined) headers.authorization = options.key;
  const response = await fetch(`${server.baseUrl}${path}`, {
    method: options.method ?? "POST",
    headers,
    body: options.body,
    signal: AbortSignal.timeout(options.timeoutMs ?? 5000),
  });
  const body = new Uint8Array(await response.arrayBuffer());
  const text = Buffer.from(body).toString("utf8");
  // Raw bytes to a REST path still get an answer the OpenAPI document describes.
  checkRestResponse({
    method: options.method ?? "POST",
    path,
    status: response.status,
    contentType: response.headers.get("content-type"),
    body: text,
  });
  return {
    status: response.status,
    headers: response.headers,
    body,
    text,
  };
}

/** A message in gRPC-Web's envelope, which is gRPC's too (flags 0: uncompressed data). */
export function grpcWebFrame(message: Uint8Array, flags = 0): Uint8Array {
  const framed = Buffer.alloc(5 + message.byteLength);
  framed[0] = flags;
  framed.writeUInt32BE(message.byteLength, 1);
  framed.set(message, 5);
  return framed;
}

/**
 * The status of a gRPC-Web response: from the headers of a trailers-only
 * response, or from the trailer envelope at the end of the body.
 */
export function grpcWebStatus(response: RawResponse): { code: Code; message: string } {
  let trailers = response.headers;
  if (!trailers.has("grpc-status")) {
    trailers = new Headers();
    const body = Buffer.from(response.body);
    for (let at = 0; at + 5 <= body.length; ) {
      const flags = body[at] as number;
      const length = body.readUInt32BE(at + 1);
      if (flags & 0x80) {
        for (const line of body
          .subarray(at + 5, at + 5 + length)
          .toString("utf8")
          .split("\r\n")) {
          const colon = line.indexOf(":");
          if (colon > 0) trailers.set(line.slice(0, colon).trim(), line.slice(colon + 1).trim());
        }
      }
      at += 5 + length;
    }
  }
  const status = trailers.get("grpc-status");
  if (status === null)
    throw new Error(`no grpc-status in a gRPC-Web response (${response.status})`);
  return {
    code: Number(status) as Code,
    message: decodeURIComponent(trailers.get("grpc-message") ?? ""),
  };
}

/** True for a code Connect's table answers with a 5xx (internal, unknown, unavailable, ...). */
export function isServerErrorCode(code: Code | 0): boolean {
  return code !== 0 && code !== Code.Canceled && codeToHttpStatus(code) >= 500;
}

/**
 * POSTs bytes to a gRPC method over HTTP/2 as they are, unframed unless the
 * caller framed them (no gRPC client would send most of what tests send
 * here), and reads the status from the headers or trailers.
 */
export async function postGrpcRaw(
  server: TestServer,
  path: string,
  options: { body: Uint8Array; key?: string; headers?: Record<string, string> },
): Promise<{ code: number; message: string }> {
  const session = connect(`http://127.0.0.1:${server.port}`);
  try {
    return await new Promise((resolve, reject) => {
      const stream = session.request({
        ":method": "POST",
        ":path": path,
        "content-type": "application/grpc",
        te: "trailers",
        ...(options.key ? { authorization: options.key } : {}),
        ...options.headers,
      });
      let status: { code: number; message: string } | undefined;
      const read = (headers: Record<string, unknown>) => {
        if (headers["grpc-status"] === undefined) return;
        status = {
          code: Number(headers["grpc-status"]),
          message: decodeURIComponent(String(headers["grpc-message"] ?? "")),
        };
      };
      stream.on("response", read);
      stream.on("trailers", read);
      stream.on("data", () => {});
      stream.on("error", reject);
      stream.on("close", () =>
        status ? resolve(status) : reject(new Error(`no grpc-status on ${path}`)),
      );
      stream.setTimeout(5_000, () => stream.close());
      stream.end(options.body);
    });
  } finally {
    session.close();
  }
}
