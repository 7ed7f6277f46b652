import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import { summarizeProfile, summarizeProfiles } from "../../bench/lib/profiles.js";

// Two functions burning the CPU in turn, idle around them, profiled as `--profile` profiles a
// service; it prints the profile clock's time between them (profileClockMicros, inlined).
const burner = `
function burnTheCpu(until) { let x = 0; while (Date.now() < until) for (let i = 0; i < 1e5; i++) x = (x * 31 + i) % 1000003; return x; }
function burnItAgain(until) { let x = 0; while (Date.now() < until) for (let i = 0; i < 1e5; i++) x = (x * 37 + i) % 1000003; return x; }
function idleAWhile() { return new Promise((resolve) => setTimeout(resolve, 150)); }
await idleAWhile();
burnTheCpu(Date.now() + 300);
console.log(String(process.hrtime.bigint() / 1000n));
burnItAgain(Date.now() + 300);
await idleAWhile();
`;

function profileTheBurner(dir: string): { file: string; between: number } {
  const program = join(dir, "burner.mjs");
  writeFileSync(program, burner);
  const printed = execFileSync(process.execPath, ["--cpu-prof", `--cpu-prof-dir=${dir}`, program]);
  const [name] = readdirSync(dir).filter((file) => file.endsWith(".cpuprofile"));
  if (!name) throw new Error("no profile written");
  return { file: join(dir, name), between: Number(String(printed).trim()) };
}

test("a CPU profile is read as the self time of each function, idle left out, and per call", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "bench-profile-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const { file } = profileTheBurner(dir);

  const summary = summarizeProfile(file, dir);
  const micros = new Map(summary.byFunction);
  // 300 ms each, 300 ms idle: the idle time is not counted as busy.
  const first = micros.get("burnTheCpu (burner.mjs:2)") ?? 0;
  const second = micros.get("burnItAgain (burner.mjs:3)") ?? 0;
  t.true(first >= 250_000 && second >= 250_000, `${first} and ${second} µs`);
  t.true(summary.busyMicros < 850_000, `${summary.busyMicros} µs busy`);
  t.is(summary.bySource[0]?.[0], "burner.mjs");

  const text = summarizeProfiles(dir, dir, 1000);
  t.is(readFileSync(join(dir, "summary.md"), "utf8"), text);
  const row = text.split("\n").find((line) => line.startsWith("| burnTheCpu"));
  const perCall = Number(row?.split("|")[2]);
  t.true(Math.abs(perCall - first / 1000) < 0.1, row);
});

test("a profile is read from a time on, on the clock every process shares", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "bench-profile-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const { file, between } = profileTheBurner(dir);

  const micros = new Map(summarizeProfile(file, dir, between).byFunction);
  t.true((micros.get("burnItAgain (burner.mjs:3)") ?? 0) >= 250_000);
  // At most the sample that straddles the moment.
  t.true((micros.get("burnTheCpu (burner.mjs:2)") ?? 0) < 5_000);
});
