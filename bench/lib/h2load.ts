import { execFile, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { countFailure, LatencyRecorder, type LoadResult, loadResult } from "./measure.js";
import { type GrpcRequestSpec, grpcFrame, type HttpRequestSpec } from "./senders.js";

/** True when h2load (Debian's nghttp2-client) is on the PATH. */
export function hasH2load(): boolean {
  return spawnSync("h2load", ["--version"], { stdio: "ignore" }).status === 0;
}

/**
 * A closed-loop gRPC run with h2load: `connections` HTTP/2 connections with
 * `streams` calls in flight on each, every call the same framed request.
 * h2load counts HTTP statuses only (a gRPC error is an HTTP 200), so callers
 * check one call's grpc-status before the run.
 */
export function h2loadRun(
  origin: string,
  spec: GrpcRequestSpec,
  options: { connections: number; streams: number; seconds: number },
): Promise<LoadResult> {
  return runH2load(`${origin}${spec.path}`, {
    connections: options.connections,
    streams: options.streams,
    seconds: options.seconds,
    headers: { "content-type": "application/grpc", te: "trailers", ...spec.metadata },
    body: grpcFrame(spec.message(0)),
  });
}

/**
 * A closed-loop HTTP/1.1 run with h2load (`--h1`): `connections` keep-alive
 * connections, one request in flight on each, every request the same. It
 * costs the machine a fraction of autocannon's CPU per request, which on a
 * machine shared with the service is CPU the service gets back.
 */
export function h2loadHttp1Run(
  origin: string,
  spec: HttpRequestSpec,
  options: { connections: number; seconds: number },
): Promise<LoadResult> {
  return runH2load(`${origin}${spec.path(0)}`, {
    connections: options.connections,
    streams: 1,
    seconds: options.seconds,
    headers: spec.headers,
    body: spec.body?.(0),
    http1: true,
  });
}

/**
 * True when h2load can send `spec` as it is: it sends GET without a body,
 * POST with one, the same headers every time, and counts 200 as success.
 */
export function h2loadCanSend(spec: HttpRequestSpec): boolean {
  return (
    (spec.method === "GET") === (spec.body === undefined) &&
    spec.headersOf === undefined &&
    (spec.okStatus ?? 200) === 200
  );
}

/** Latencies come from h2load's per-request log, since it prints no percentiles. */
async function runH2load(
  url: string,
  options: {
    connections: number;
    streams: number;
    seconds: number;
    headers: Readonly<Record<string, string>>;
    body?: string | Uint8Array;
    http1?: boolean;
  },
): Promise<LoadResult> {
  const directory = mkdtempSync(join(tmpdir(), "bench-h2load-"));
  try {
    const logFile = join(directory, "requests.log");
    const bodyArgs: string[] = [];
    if (options.body !== undefined) {
      const bodyFile = join(directory, "request.bin");
      writeFileSync(bodyFile, options.body);
      bodyArgs.push("-d", bodyFile);
    }
    const headers = Object.entries(options.headers).flatMap(([name, value]) => [
      "-H",
      `${name}: ${value}`,
    ]);
    const stdout = await new Promise<string>((resolve, reject) => {
      execFile(
        "h2load",
        [
          ...(options.http1 ? ["--h1"] : []),
          "-c",
          String(options.connections),
          "-m",
          String(options.streams),
          "-D",
          String(Math.max(1, Math.round(options.seconds))),
          ...bodyArgs,
          ...headers,
          `--log-file=${logFile}`,
          url,
        ],
        { maxBuffer: 16 * 1024 * 1024 },
        (error, out, err) =>
          error ? reject(new Error(`h2load failed: ${err || error}`)) : resolve(out),
      );
    });
    const seconds = Number(/finished in ([\d.]+)s/.exec(stdout)?.[1]);
    const requests =
      /requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout/.exec(
        stdout,
      );
    if (!requests || Number.isNaN(seconds)) throw new Error(`unexpected h2load output:\n${stdout}`);
    const latency = new LatencyRecorder();
    let ok = 0;
    const failures: Record<string, number> = {};
    const errored = Number(requests[6]) + Number(requests[7]);
    if (errored > 0) failures.socket = errored;
    // Each line: start time (µs), HTTP status, duration (µs).
    for (const line of readFileSync(logFile, "utf8").split("\n")) {
      const [, status, micros] = line.split("\t");
      if (status === undefined || micros === undefined) continue;
      if (status === "200") {
        ok++;
        latency.recordMicros(Number(micros));
      } else countFailure(failures, `http ${status}`);
    }
    return loadResult({ ok, failures, seconds }, latency);
  } finally {
    rmSync(directory, { recursive: true, force: true });
  }
}
