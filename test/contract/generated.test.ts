import { execFile } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { promisify } from "node:util";
import test from "ava";

const run = promisify(execFile);
const root = new URL("../..", import.meta.url).pathname;

function filesUnder(directory: string): Map<string, string> {
  const files = new Map<string, string>();
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path);
      else files.set(relative(directory, path), readFileSync(path, "utf8"));
    }
  };
  walk(directory);
  return files;
}

test("buf lint passes", async (t) => {
  await t.notThrowsAsync(run("npx", ["buf", "lint"], { cwd: root }));
});

test("gen/ is what buf generate makes from proto/ (run npm run generate)", async (t) => {
  const out = mkdtempSync(join(tmpdir(), "referrals-gen-"));
  try {
    await run("npx", ["buf", "generate", "--output", out], { cwd: root });
    const fresh = filesUnder(join(out, "gen"));
    const committed = filesUnder(join(root, "gen"));
    t.deepEqual([...committed.keys()].sort(), [...fresh.keys()].sort());
    for (const [path, content] of fresh) t.is(committed.get(path), content, `gen/${path} is stale`);
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});

test("openapi/openapi.json is what scripts/generate-openapi.ts makes from the contract (run npm run generate)", async (t) => {
  const out = mkdtempSync(join(tmpdir(), "referrals-openapi-"));
  try {
    const fresh = join(out, "openapi.json");
    await run(process.execPath, ["--import", "tsx", "scripts/generate-openapi.ts", fresh], {
      cwd: root,
    });
    t.is(
      readFileSync(join(root, "openapi/openapi.json"), "utf8"),
      readFileSync(fresh, "utf8"),
      "openapi/openapi.json is stale",
    );
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});
