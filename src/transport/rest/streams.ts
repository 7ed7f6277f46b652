import type { ServerResponse } from "node:http";
import { type Http2ServerResponse, constants as http2Constants } from "node:http2";
import type { Message } from "@bufbuild/protobuf";
import type { FastifyReply } from "fastify";
import type { HttpBody } from "../../../gen/google/api/httpbody_pb.js";
import { type ErrorLogger, restErrorJson, toConnectError } from "../errors.js";
import type { Call } from "../pipeline.js";
import type { HttpRoute } from "./http-rules.js";
import { restJsonFromResponse } from "./transcode.js";

/** How often a quiet event stream sends a comment, so proxies and clients do not take it for dead. */
export const eventStreamKeepAliveMs = 15_000;

/**
 * The response a stream is written to: Node's HTTP/1.1 one, or over HTTP/2
 * the compatibility layer's, which has the same methods (and a `stream`).
 */
type RawResponse = ServerResponse;

/**
 * Writes the stream of a server-streaming call the pipeline opened, with
 * the call's response headers and those Fastify holds (CORS's): an RPC
 * returning `google.api.HttpBody` as the bytes of its chunks, any other as
 * Server-Sent Events. Fastify is told the response is taken (`hijack`), as
 * it would otherwise wait for the whole body.
 */
export async function sendStream(
  reply: FastifyReply,
  call: Call,
  route: HttpRoute,
  log: ErrorLogger,
): Promise<void> {
  const stream = call.responseStream;
  if (!stream) throw new Error(`${call.rpc.name}: the pipeline opened no stream`);
  reply.hijack();
  const response = reply.raw;
  const headers: Record<string, string | number | string[]> = {};
  for (const [name, value] of Object.entries(reply.getHeaders())) {
    if (value !== undefined) headers[name] = value;
  }
  for (const [name, value] of call.responseHeaders) headers[name] = value;
  const output = call.rpc.method.output;
  const body = output.typeName === "google.api.HttpBody";
  if (body) {
    // The implementation says what it streams; a stream with no chunk is empty bytes.
    headers["content-type"] = (stream.first as HttpBody | undefined)?.contentType || octetStream;
  } else {
    headers["content-type"] = "text/event-stream";
    headers["cache-control"] = "no-cache";
  }
  response.writeHead(200, headers);
  if (reply.request.method === "HEAD") {
    stream.end();
    response.end();
    return;
  }
  if (body) return writeBody(response, stream as AsyncIterable<HttpBody>);
  await writeEvents(response, stream, {
    json: (message) => restJsonFromResponse(output, route, message) ?? "{}",
    errorJson: (error) => restErrorJson(toConnectError(error, call.rpc.name, log)),
    keepAliveMs: eventStreamKeepAliveMs,
  });
}

const octetStream = "application/octet-stream";

/**
 * Server-Sent Events: each message as a `data:` line of its JSON (one line:
 * JSON text escapes its line breaks), a `: keep-alive` comment every
 * `keepAliveMs`, and an error that ends the stream as an `error` event.
 * The response's headers are written already.
 */
export async function writeEvents(
  response: RawResponse,
  messages: AsyncIterable<Message>,
  options: {
    json: (message: Message) => string;
    errorJson: (error: unknown) => string;
    keepAliveMs: number;
  },
): Promise<void> {
  const writer = responseWriter(response);
  const keepAlive = setInterval(() => void writer.write(": keep-alive\n\n"), options.keepAliveMs);
  try {
    for await (const message of messages) await writer.write(`data: ${options.json(message)}\n\n`);
  } catch (error) {
    await writer.write(`event: error\ndata: ${options.errorJson(error)}\n\n`);
  } finally {
    clearInterval(keepAlive);
  }
  response.end();
}

/**
 * The bytes of each chunk as they come. A body has no place for an error:
 * one after the start cuts the response short (HTTP/2: the stream is reset;
 * HTTP/1.1: the connection is half-closed, after what was written but
 * before the last chunk), so the client sees a failed transfer, never a
 * complete-looking body.
 */
async function writeBody(response: RawResponse, chunks: AsyncIterable<HttpBody>): Promise<void> {
  const writer = responseWriter(response);
  try {
    for await (const chunk of chunks) {
      if (chunk.data.byteLength > 0) await writer.write(chunk.data);
    }
  } catch {
    // Node (24.22 on) gathers a tick's writes in the response and hands them
    // to the connection on the next tick: cut before that, and the client
    // would get neither the headers nor the rows, only a closed connection.
    await writer.flushed();
    if ("stream" in response) {
      (response as unknown as Http2ServerResponse).stream.close(
        http2Constants.NGHTTP2_INTERNAL_ERROR,
      );
    } else {
      // A FIN, not a reset: destroying a socket with input still unread
      // makes Linux send RST, and a client may then drop rows it had
      // received but not read yet.
      response.socket?.end();
    }
    return;
  }
  response.end();
}

/**
 * Writes to a response, waiting while it asks to (a slow client holds the
 * stream back rather than filling memory); once the response is closed
 * (the client went away), writes are dropped. `flushed` waits until what
 * was written has left the response for its connection.
 */
function responseWriter(response: RawResponse) {
  let closed = false;
  /** Writes whose data the response still holds; one callback counts them down. */
  let unflushed = 0;
  let onFlushed: (() => void) | undefined;
  const flushedOne = () => {
    unflushed--;
    if (unflushed === 0) onFlushed?.();
  };
  response.once("close", () => {
    closed = true;
    onFlushed?.();
  });
  return {
    write(chunk: string | Uint8Array): Promise<void> | undefined {
      if (closed) return undefined;
      unflushed++;
      if (response.write(chunk, flushedOne)) return undefined;
      return new Promise((resolve) => {
        const done = () => {
          response.off("drain", done);
          response.off("close", done);
          resolve();
        };
        response.on("drain", done);
        response.on("close", done);
      });
    },
    flushed(): Promise<void> {
      if (closed || unflushed === 0) return Promise.resolve();
      return new Promise((resolve) => {
        onFlushed = resolve;
      });
    },
  };
}
