import { spawnSync } from "node:child_process";
import test from "ava";

/** `npm start`'s entry point refuses a Node.js older than the one it needs, in one line. */

const root = new URL("../../", import.meta.url).pathname;

test("an older Node.js is refused at start with one line naming both versions", (t) => {
  // Pretend to be Node 20 before the entry point loads.
  const pretend =
    'data:text/javascript,Object.defineProperty(process.versions,"node",{value:"20.11.0"});' +
    'Object.defineProperty(process,"version",{value:"v20.11.0"})';
  const result = spawnSync(
    process.execPath,
    ["--import", pretend, "--import", "tsx", "src/main.ts"],
    { cwd: root, encoding: "utf8", env: { ...process.env, DATA_DIR: "/nonexistent/never-used" } },
  );
  t.is(result.status, 1);
  t.is(result.stderr, "referral-service needs Node.js 24 or newer; this is v20.11.0.\n");
  t.is(result.stdout, "");
});
