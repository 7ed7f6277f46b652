import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import { summarizeProfile, summarizeProfiles } from "../../bench/lib/profiles.js";

// A program with one function that burns the CPU, profiled as `--profile` profiles a service.
const burner = `
function burnTheCpu(until) { let x = 0; while (Date.now() < until) for (let i = 0; i < 1e5; i++) x = (x * 31 + i) % 1000003; return x; }
function idleAWhile() { return new Promise((resolve) => setTimeout(resolve, 150)); }
await idleAWhile();
burnTheCpu(Date.now() + 300);
await idleAWhile();
`;

test("a CPU profile is read as the self time of each function, idle left out, and per call", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "bench-profile-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const program = join(dir, "burner.mjs");
  writeFileSync(program, burner);
  execFileSync(process.execPath, ["--cpu-prof", `--cpu-prof-dir=${dir}`, program]);
  const [profile] = readdirSync(dir).filter((name) => name.endsWith(".cpuprofile"));
  t.truthy(profile);

  const summary = summarizeProfile(join(dir, profile as string), dir);
  const [top, micros] = summary.byFunction[0] ?? ["", 0];
  t.regex(top, /^burnTheCpu \(burner\.mjs:2\)$/);
  // 300 ms burnt, 300 ms idle: the idle time is not counted as busy.
  t.true(micros >= 250_000, `${micros} µs`);
  t.true(summary.busyMicros < 550_000, `${summary.busyMicros} µs busy`);
  t.is(summary.bySource[0]?.[0], "burner.mjs");

  const text = summarizeProfiles(dir, dir, 1000);
  t.is(readFileSync(join(dir, "summary.md"), "utf8"), text);
  const row = text.split("\n").find((line) => line.startsWith("| burnTheCpu"));
  const perCall = Number(row?.split("|")[2]);
  t.true(Math.abs(perCall - micros / 1000) < 0.1, row);
});
