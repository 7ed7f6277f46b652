import { connect as connectHttp2 } from "node:http2";
import type { Socket } from "node:net";
import test from "ava";
import { closesWithin, type OperationsServer, openSocket, startService } from "./service.js";

/**
 * A slow or silent client cannot hold a connection: raw sockets that send
 * nothing, half a preface, a header line at a time or a body a byte at a
 * time are closed by the limit that applies, configured short here.
 */

const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/** An empty SETTINGS frame: length 0, type 0x4, no flags, stream 0. */
const emptySettingsFrame = Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]);

let short: OperationsServer;
let idle: OperationsServer;
let pinging: OperationsServer;
let capped: OperationsServer;

test.before(async () => {
  [short, idle, pinging, capped] = await Promise.all([
    startService({
      env: {
        PREFACE_TIMEOUT: "300ms",
        HTTP_HEADERS_TIMEOUT: "600ms",
        HTTP_REQUEST_TIMEOUT: "1s",
        HTTP_KEEP_ALIVE_TIMEOUT: "200ms",
        HTTP2_MAX_CONCURRENT_STREAMS: "7",
      },
    }),
    startService({ env: { HTTP_IDLE_TIMEOUT: "300ms", HTTP2_IDLE_TIMEOUT: "400ms" } }),
    startService({ env: { HTTP2_KEEPALIVE_TIME: "200ms", HTTP2_KEEPALIVE_TIMEOUT: "200ms" } }),
    startService({ env: { MAX_CONNECTIONS: "2" } }),
  ]);
});

test.after.always(async () => {
  await Promise.all([short, idle, pinging, capped].map((server) => server?.stop()));
});

/** Writes `chunks` one every `everyMs` until the socket closes; resolves with how many went. */
function trickle(socket: Socket, chunks: string[], everyMs: number): Promise<number> {
  return new Promise((resolve) => {
    let sent = 0;
    const timer = setInterval(() => {
      if (socket.destroyed || sent === chunks.length) {
        clearInterval(timer);
        resolve(sent);
        return;
      }
      socket.write(chunks[sent++] as string);
    }, everyMs);
  });
}

/** Everything received so far, as text. */
function collect(socket: Socket): () => string {
  let text = "";
  socket.on("data", (chunk: Buffer) => {
    text += chunk.toString("latin1");
  });
  return () => text;
}

const within = (
  t: { true(value: boolean, message?: string): void },
  ms: number | undefined,
  min: number,
  max: number,
) =>
  t.true(
    ms !== undefined && ms >= min && ms < max,
    `closed after ${ms === undefined ? "never" : Math.round(ms)} ms, expected ${min}-${max}`,
  );

test("a connection that sends nothing is closed after PREFACE_TIMEOUT", async (t) => {
  const socket = await openSocket(short.port);
  within(t, await closesWithin(socket, 3000), 250, 1500);
});

test("half an HTTP/2 preface is closed after PREFACE_TIMEOUT", async (t) => {
  const socket = await openSocket(short.port);
  socket.write(http2Preface.slice(0, 14));
  within(t, await closesWithin(socket, 3000), 250, 1500);
});

test("the HTTP/2 preface without its SETTINGS frame is closed after PREFACE_TIMEOUT", async (t) => {
  const socket = await openSocket(short.port);
  socket.write(http2Preface);
  within(t, await closesWithin(socket, 3000), 250, 1500);
});

test("a header line every 150 ms is cut off by HTTP_HEADERS_TIMEOUT with a 408", async (t) => {
  const socket = await openSocket(short.port);
  const text = collect(socket);
  socket.write("GET /healthz HTTP/1.1\r\nHost: localhost\r\n");
  const lines = Array.from({ length: 40 }, (_, i) => `X-Slow-${i}: yes\r\n`);
  void trickle(socket, lines, 150);
  within(t, await closesWithin(socket, 5000), 500, 2500);
  t.regex(text(), /^HTTP\/1\.1 408 /);
});

test("a body one byte every 100 ms is cut off by HTTP_REQUEST_TIMEOUT with a 408", async (t) => {
  const socket = await openSocket(short.port);
  const text = collect(socket);
  socket.write(
    "POST /customers/identify HTTP/1.1\r\nHost: localhost\r\n" +
      "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n",
  );
  void trickle(
    socket,
    Array.from({ length: 100 }, () => " "),
    100,
  );
  within(t, await closesWithin(socket, 5000), 900, 3000);
  t.regex(text(), /^HTTP\/1\.1 408 /);
});

test("an idle keep-alive connection is closed after HTTP_KEEP_ALIVE_TIMEOUT", async (t) => {
  const socket = await openSocket(short.port);
  const text = collect(socket);
  socket.write("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n");
  while (!text().includes('{"status":"ok"}'))
    await new Promise((resolve) => setTimeout(resolve, 10));
  // Node waits one more second than it advertises, so clients close first.
  within(t, await closesWithin(socket, 4000), 150, 2500);
});

test("a connection with no bytes moving is closed after HTTP_IDLE_TIMEOUT", async (t) => {
  const socket = await openSocket(idle.port);
  socket.write("GET /healthz HTTP/1.1\r\n");
  within(t, await closesWithin(socket, 3000), 250, 1500);
});

test("an HTTP/2 connection with no stream is closed after HTTP2_IDLE_TIMEOUT", async (t) => {
  const session = connectHttp2(idle.baseUrl);
  session.on("error", () => {});
  const started = performance.now();
  const took = await new Promise<number | undefined>((resolve) => {
    const timer = setTimeout(() => resolve(undefined), 3000);
    session.once("close", () => {
      clearTimeout(timer);
      resolve(performance.now() - started);
    });
  });
  session.destroy();
  within(t, took, 300, 2000);
});

test("HTTP/2 advertises HTTP2_MAX_CONCURRENT_STREAMS, 100 by default", async (t) => {
  const advertised = async (baseUrl: string) => {
    const session = connectHttp2(baseUrl);
    session.on("error", () => {});
    const settings = await new Promise<{ maxConcurrentStreams?: number }>((resolve) =>
      session.once("remoteSettings", resolve),
    );
    session.destroy();
    return settings.maxConcurrentStreams;
  };
  t.is(await advertised(short.baseUrl), 7);
  t.is(await advertised(idle.baseUrl), 100);
});

test("an HTTP/2 peer that does not answer pings is closed after HTTP2_KEEPALIVE_TIME and _TIMEOUT", async (t) => {
  const socket = await openSocket(pinging.port);
  socket.write(http2Preface);
  socket.write(emptySettingsFrame);
  // The server's SETTINGS and PING arrive; this peer never acknowledges them.
  within(t, await closesWithin(socket, 4000), 350, 2500);
});

test("connections past MAX_CONNECTIONS are closed as they arrive", async (t) => {
  const held = [await openSocket(capped.port), await openSocket(capped.port)];
  const refused = await openSocket(capped.port);
  within(t, await closesWithin(refused, 2000), 0, 500);
  for (const socket of held) socket.destroy();
  // The server counts them closed once their FIN arrives.
  await new Promise((resolve) => setTimeout(resolve, 200));
  // Room again: a new connection stays until its own preface timeout.
  const admitted = await openSocket(capped.port);
  t.is(await closesWithin(admitted, 300), undefined);
  admitted.destroy();
});
