import { connect as connectHttp2 } from "node:http2";
import type { Socket } from "node:net";
import test from "ava";
import { eventually } from "../helpers/wait.js";
import {
  closesWithin,
  type OperationsServer,
  openSocket,
  startService,
  waitUntil,
} from "./service.js";

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

/**
 * Asserts that a connection closed after `ms`, at least `min` (the limit
 * configured, less a little: the test's clock starts once the client sees
 * the connection) and under `max`. `max` is not how fast the machine is: it
 * is well short of the default the configured limit replaces (10 s or more),
 * so that only that limit can have closed it, however late a busy machine
 * runs its timers.
 */
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

/**
 * Whether a new connection to `port` is served: a request on it gets a
 * response. One closed as it arrives answers nothing.
 */
async function isServed(port: number): Promise<boolean> {
  const socket = await openSocket(port).catch(() => undefined);
  if (!socket) return false;
  const text = collect(socket);
  socket.write("GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
  await closesWithin(socket, 10_000);
  socket.destroy();
  return /^HTTP\/1\.1 200 /.test(text());
}

// PREFACE_TIMEOUT is 10 s by default.
test("a connection that sends nothing is closed after PREFACE_TIMEOUT", async (t) => {
  const socket = await openSocket(short.port);
  within(t, await closesWithin(socket, 6000), 250, 5000);
});

test("half an HTTP/2 preface is closed after PREFACE_TIMEOUT", async (t) => {
  const socket = await openSocket(short.port);
  socket.write(http2Preface.slice(0, 14));
  within(t, await closesWithin(socket, 6000), 250, 5000);
});

test("the HTTP/2 preface without its SETTINGS frame is closed after PREFACE_TIMEOUT", async (t) => {
  const socket = await openSocket(short.port);
  socket.write(http2Preface);
  within(t, await closesWithin(socket, 6000), 250, 5000);
});

test("a header line every 150 ms is cut off by HTTP_HEADERS_TIMEOUT with a 408", async (t) => {
  const socket = await openSocket(short.port);
  const text = collect(socket);
  socket.write("GET /healthz HTTP/1.1\r\nHost: localhost\r\n");
  const lines = Array.from({ length: 40 }, (_, i) => `X-Slow-${i}: yes\r\n`);
  void trickle(socket, lines, 150);
  // HTTP_HEADERS_TIMEOUT is 10 s by default.
  within(t, await closesWithin(socket, 6000), 500, 5000);
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
  // HTTP_REQUEST_TIMEOUT is 30 s by default; the whole body would be sent in 10 s.
  within(t, await closesWithin(socket, 7000), 900, 6000);
  t.regex(text(), /^HTTP\/1\.1 408 /);
});

test("an idle keep-alive connection is closed after HTTP_KEEP_ALIVE_TIMEOUT", async (t) => {
  const socket = await openSocket(short.port);
  const text = collect(socket);
  socket.write("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n");
  await waitUntil(() => text().includes('{"status":"ok"}'), "the health answer");
  // Node waits one more second than it advertises, so clients close first;
  // HTTP_KEEP_ALIVE_TIMEOUT is 5 s by default, so 6 s.
  within(t, await closesWithin(socket, 5000), 150, 4500);
});

test("a connection with no bytes moving is closed after HTTP_IDLE_TIMEOUT", async (t) => {
  const socket = await openSocket(idle.port);
  socket.write("GET /healthz HTTP/1.1\r\n");
  // HTTP_IDLE_TIMEOUT is 60 s by default, and this server's PREFACE_TIMEOUT 10 s.
  within(t, await closesWithin(socket, 6000), 250, 5000);
});

test("an HTTP/2 connection with no stream is closed after HTTP2_IDLE_TIMEOUT", async (t) => {
  const session = connectHttp2(idle.baseUrl);
  session.on("error", () => {});
  const started = performance.now();
  const took = await new Promise<number | undefined>((resolve) => {
    const timer = setTimeout(() => resolve(undefined), 6000);
    session.once("close", () => {
      clearTimeout(timer);
      resolve(performance.now() - started);
    });
  });
  session.destroy();
  // HTTP2_IDLE_TIMEOUT is 5 minutes by default.
  within(t, took, 300, 5000);
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
  // HTTP2_KEEPALIVE_TIME is a minute by default.
  within(t, await closesWithin(socket, 6000), 350, 5000);
});

test("connections past MAX_CONNECTIONS are closed as they arrive", async (t) => {
  const held = [await openSocket(capped.port), await openSocket(capped.port)];
  // Closed at once, not after PREFACE_TIMEOUT (10 s here), and not served.
  t.false(await isServed(capped.port), "a third connection is not served");
  const refused = await openSocket(capped.port);
  within(t, await closesWithin(refused, 6000), 0, 5000);
  for (const socket of held) socket.destroy();
  // Room again once the server has seen them close (their FIN arrives):
  // a new connection is served.
  t.true(await eventually("a new connection served", () => isServed(capped.port)));
});
