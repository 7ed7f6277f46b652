import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";

/** The parts of a V8 CPU profile (`--cpu-prof`, Chrome's `.cpuprofile`) this reads. */
interface CpuProfile {
  readonly nodes: readonly {
    readonly id: number;
    readonly callFrame: {
      readonly functionName: string;
      readonly url: string;
      readonly lineNumber: number;
    };
  }[];
  readonly startTime: number;
  readonly samples: readonly number[];
  readonly timeDeltas: readonly number[];
}

/** Where one process (or thread) spent its CPU, by the frame running when sampled. */
export interface ProfileSummary {
  readonly file: string;
  /** Sampled time not idle, in µs. */
  readonly busyMicros: number;
  /** Self time by function (`name (file:line)`), most first. */
  readonly byFunction: readonly [part: string, micros: number][];
  /** Self time by source: a file of ours, a package, Node's internals, or V8's own work. */
  readonly bySource: readonly [part: string, micros: number][];
}

/**
 * The time on the clock V8 stamps a profile's samples with (the system's
 * monotonic clock, in µs): the same in every process of the machine.
 */
export function profileClockMicros(): number {
  return Number(process.hrtime.bigint() / 1000n);
}

/**
 * Reads a `.cpuprofile` and adds up each sample's interval under the frame
 * it caught (self time), by function and by where the function comes from.
 * Idle samples are left out: what is left is the CPU the process spent,
 * from `fromMicros` on ({@link profileClockMicros}; a start's compiling and
 * loading are not what a call costs).
 */
export function summarizeProfile(file: string, root: string, fromMicros = 0): ProfileSummary {
  const profile = JSON.parse(readFileSync(file, "utf8")) as CpuProfile;
  const frames = new Map(profile.nodes.map((node) => [node.id, node.callFrame]));
  const byFunction = new Map<string, number>();
  const bySource = new Map<string, number>();
  let busyMicros = 0;
  let sampledAt = profile.startTime;
  profile.samples.forEach((id, index) => {
    sampledAt += profile.timeDeltas[index] ?? 0;
    const frame = frames.get(id);
    // A sample's interval is the delta of the next one (the last has none).
    const micros = profile.timeDeltas[index + 1] ?? 0;
    if (!frame || frame.functionName === "(idle)" || sampledAt < fromMicros) return;
    busyMicros += micros;
    const source = sourceOf(frame.url, root, frame.functionName);
    const where = frame.url ? ` (${shortPath(frame.url, root)}:${frame.lineNumber + 1})` : "";
    const name = `${frame.functionName || "(anonymous)"}${where}`;
    byFunction.set(name, (byFunction.get(name) ?? 0) + micros);
    bySource.set(source, (bySource.get(source) ?? 0) + micros);
  });
  const mostFirst = (parts: Map<string, number>) => [...parts].sort((a, b) => b[1] - a[1]);
  return {
    file,
    busyMicros,
    byFunction: mostFirst(byFunction),
    bySource: mostFirst(bySource),
  };
}

/** A package (`node_modules/<name>`), a file of the repository, `node:` internals, or V8's own entries. */
function sourceOf(url: string, root: string, functionName: string): string {
  if (!url) return functionName.startsWith("(") ? functionName : "(native)";
  const path = shortPath(url, root);
  const inPackage = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(path);
  if (inPackage) return `package ${inPackage[1]}`;
  if (path.startsWith("node:")) return "node: internals";
  return path;
}

function shortPath(url: string, root: string): string {
  if (!url.startsWith("file://")) return url;
  return relative(root, new URL(url).pathname);
}

/**
 * Summarizes every profile a service wrote into `dir` (a cluster writes one
 * per process, and each worker thread its own), from `fromMicros` on, per
 * call answered meanwhile, and writes the summary to `summary.md` there.
 * Returns the summary's text.
 */
export function summarizeProfiles(
  dir: string,
  root: string,
  calls: number,
  { rows = 25, fromMicros = 0 }: { rows?: number; fromMicros?: number } = {},
): string {
  const files = readdirSync(dir)
    .filter((name) => name.endsWith(".cpuprofile"))
    .sort();
  const perCall = (micros: number) => (calls > 0 ? (micros / calls).toFixed(1) : "-");
  const lines = [
    `# CPU profiles of ${relative(root, dir)}`,
    "",
    `${calls.toLocaleString("en-US")} calls answered (rpc_calls_total) once it was ready; µs per call is the self time sampled meanwhile over them.`,
  ];
  for (const name of files) {
    const summary = summarizeProfile(join(dir, name), root, fromMicros);
    if (summary.busyMicros === 0) continue;
    lines.push(
      "",
      `## ${name}: ${(summary.busyMicros / 1000).toFixed(0)} ms busy, ${perCall(summary.busyMicros)} µs per call`,
      "",
      "| source | µs per call | share |",
      "| --- | --- | --- |",
      ...summary.bySource
        .slice(0, rows)
        .map(
          ([part, micros]) =>
            `| ${part} | ${perCall(micros)} | ${((100 * micros) / summary.busyMicros).toFixed(1)}% |`,
        ),
      "",
      "| function (self time) | µs per call | share |",
      "| --- | --- | --- |",
      ...summary.byFunction
        .slice(0, rows)
        .map(
          ([part, micros]) =>
            `| ${part.replaceAll("|", "\\|")} | ${perCall(micros)} | ${((100 * micros) / summary.busyMicros).toFixed(1)}% |`,
        ),
    );
  }
  const text = `${lines.join("\n")}\n`;
  writeFileSync(join(dir, "summary.md"), text);
  return text;
}
