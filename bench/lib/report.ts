import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { availableParallelism, cpus, release, totalmem } from "node:os";
import { dirname, join } from "node:path";
import { grpcGenerator, http1Generator } from "./load.js";
import type { LoadResult } from "./measure.js";
import { repoRoot } from "./processes.js";
import type { Protocol } from "./scenarios.js";

/** The machine and build a run measured, printed above the tables and kept in the JSON. */
export interface MachineInfo {
  readonly cpu: string;
  readonly cores: number;
  readonly memoryGb: number;
  readonly kernel: string;
  readonly node: string;
  readonly date: string;
  readonly commit: string;
  /** Uncommitted changes to tracked files when the bench ran. */
  readonly dirty: boolean;
  readonly generators: { readonly http1: string; readonly grpc: string };
}

/** Describes this machine and checkout. */
export function machineInfo(): MachineInfo {
  const git = (...args: string[]) =>
    execFileSync("git", args, {
      cwd: repoRoot,
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
    }).trim();
  let commit = "unknown";
  let dirty = false;
  try {
    commit = git("rev-parse", "--short=12", "HEAD");
    dirty = git("status", "--porcelain", "--untracked-files=no") !== "";
  } catch {}
  const autocannonVersion = (
    JSON.parse(readFileSync(join(repoRoot, "node_modules/autocannon/package.json"), "utf8")) as {
      version: string;
    }
  ).version;
  let h2load = "h2load";
  try {
    h2load = execFileSync("h2load", ["--version"], { encoding: "utf8" }).trim();
  } catch {}
  const autocannon = `autocannon ${autocannonVersion}`;
  const http1 =
    http1Generator() === "h2load" ? `${h2load} (${autocannon} where requests differ)` : autocannon;
  const grpc = grpcGenerator() === "h2load" ? h2load : "node:http2";
  return {
    cpu: cpus()[0]?.model.trim() ?? "unknown",
    cores: availableParallelism(),
    memoryGb: Math.round(totalmem() / 2 ** 30),
    kernel: release(),
    node: process.version,
    date: new Date().toISOString(),
    commit,
    dirty,
    generators: { http1, grpc },
  };
}

/** The one line that says where and how the numbers were taken. */
export function machineLine(
  machine: MachineInfo,
  settings: { repeats: number; seconds: number; engine?: string },
): string {
  const parts = [
    `${machine.cpu}, ${machine.cores} cores, ${machine.memoryGb} GB`,
    `Node ${machine.node}`,
    `commit ${machine.commit}${machine.dirty ? " (with uncommitted changes)" : ""}`,
    `${machine.date.slice(0, 16).replace("T", " ")} UTC`,
    ...(settings.engine ? [`store: ${settings.engine}`] : []),
    `median of ${settings.repeats} × ${settings.seconds} s`,
    `load: ${machine.generators.http1}, ${machine.generators.grpc}`,
  ];
  return `Machine: ${parts.join("; ")}`;
}

/** A Markdown table; numbers are already formatted. */
export function markdownTable(
  header: readonly string[],
  rows: readonly (readonly string[])[],
): string {
  const widths = header.map((cell, column) =>
    Math.max(3, cell.length, ...rows.map((row) => (row[column] ?? "").length)),
  );
  const line = (cells: readonly string[]) =>
    `| ${cells.map((cell, column) => cell.padEnd(widths[column] as number)).join(" | ")} |`;
  return [line(header), line(widths.map((width) => "-".repeat(width))), ...rows.map(line)].join(
    "\n",
  );
}

/** How the tables name a protocol. */
export const protocolLabel: Record<Protocol, string> = {
  rest: "REST",
  grpc: "gRPC",
  connect: "Connect",
};

/** Requests per second as the tables show them. */
export function formatRate(value: number): string {
  if (!Number.isFinite(value)) return "-";
  return value >= 100 ? Math.round(value).toLocaleString("en-US") : value.toFixed(1);
}

/** Milliseconds with precision that suits their size. */
export function formatMs(value: number): string {
  if (!Number.isFinite(value)) return "-";
  if (value >= 100) return Math.round(value).toLocaleString("en-US");
  if (value >= 10) return value.toFixed(1);
  return value.toFixed(2);
}

/** Microseconds to the whole one; "-" where a run did not measure them. */
export function formatMicros(value: number | undefined): string {
  return value === undefined ? "-" : value.toFixed(0);
}

/** A share as a percentage. */
export function formatPercent(value: number): string {
  return Number.isFinite(value) ? `${Math.round(value * 100)}%` : "-";
}

/** ", 12 failed (http 404: 12)" for a run with failures; empty otherwise. */
export function failureNote(result: LoadResult): string {
  if (result.failed === 0) return "";
  const kinds = Object.entries(result.failures ?? {}).map(([kind, count]) => `${kind}: ${count}`);
  return `, ${result.failed} failed${kinds.length > 0 ? ` (${kinds.join(", ")})` : ""}`;
}

/**
 * The cells every load result shows: req/s (marked when a run ran out of
 * requests, and with the failures when there were any), p50, p99.
 */
export function resultCells(result: LoadResult): string[] {
  const failed = result.failed > 0 ? ` (${Math.round(result.failed)} failed)` : "";
  return [
    `${formatRate(result.rps)}${result.exhausted ? "*" : ""}${failed}`,
    formatMs(result.p50Ms),
    formatMs(result.p99Ms),
  ];
}

/** Writes the results as JSON to every path. */
export function writeResults(paths: readonly string[], results: unknown): void {
  const text = `${JSON.stringify(results, null, 2)}\n`;
  for (const path of paths) {
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, text);
  }
}
