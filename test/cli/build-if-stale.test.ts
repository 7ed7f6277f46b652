import { execFile } from "node:child_process";
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import test from "ava";

/**
 * scripts/build-if-stale.mjs, which `npm start`, `npm run dev` and
 * `npm run admin` run first: it builds when a source is newer than the
 * last build, and otherwise starts nothing, so the admin CLI runs from the
 * build at once. Run in a directory of its own, with an `npm` on PATH that
 * only records that it was asked to build.
 */

const run = promisify(execFile);
const script = new URL("../../scripts/build-if-stale.mjs", import.meta.url).pathname;

function project(): { dir: string; builds: () => number; run: () => Promise<unknown> } {
  const dir = mkdtempSync(join(tmpdir(), "referrals-build-"));
  const bin = join(dir, "bin");
  mkdirSync(bin);
  mkdirSync(join(dir, "src"));
  mkdirSync(join(dir, "dist"));
  writeFileSync(join(dir, "src", "main.ts"), "export {};\n");
  writeFileSync(join(dir, "package.json"), "{}\n");
  const log = join(dir, "npm-calls");
  writeFileSync(join(bin, "npm"), `#!/bin/sh\necho "$*" >> "${log}"\n`);
  chmodSync(join(bin, "npm"), 0o755);
  copyFileSync(script, join(dir, "build-if-stale.mjs"));
  return {
    dir,
    builds: () => (existsSync(log) ? readFileSync(log, "utf8").trim().split("\n").length : 0),
    run: () =>
      run(process.execPath, ["build-if-stale.mjs"], {
        cwd: dir,
        env: { ...process.env, PATH: `${bin}:${process.env.PATH}` },
      }),
  };
}

test("builds when a source is newer than the build, and only then", async (t) => {
  const { dir, builds, run: buildIfStale } = project();
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  await buildIfStale();
  t.is(builds(), 1, "no build yet: it builds");
  await buildIfStale();
  t.is(builds(), 1, "the build is current: nothing is compiled");

  const later = new Date(Date.now() + 5_000);
  writeFileSync(join(dir, "src", "main.ts"), "export const changed = true;\n");
  utimesSync(join(dir, "src", "main.ts"), later, later);
  await buildIfStale();
  t.is(builds(), 2, "a source changed: it builds again");
  t.is(readFileSync(join(dir, "npm-calls"), "utf8").split("\n")[0], "run -s build");
});

test("an editor's dangling lock link among the sources is no reason to fail", async (t) => {
  const { dir, builds, run: buildIfStale } = project();
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  symlinkSync("user@host.1234:1700000000", join(dir, "src", ".#main.ts"));
  await buildIfStale();
  t.is(builds(), 1);
  await buildIfStale();
  t.is(builds(), 1);
});

test("an installed package without its sources builds nothing", async (t) => {
  const { dir, builds, run: buildIfStale } = project();
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  rmSync(join(dir, "src"), { recursive: true });
  await buildIfStale();
  t.is(builds(), 0);
});
