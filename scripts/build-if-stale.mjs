// Builds dist/ (npm run build) unless it is newer than everything it is
// built from: `npm start`, `npm run dev` and `npm run admin` then start
// from the build at once. Plain JavaScript, so it runs before any build.
import { execFileSync } from "node:child_process";
import { existsSync, lstatSync, readdirSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";

// An installed package ships dist/ without its sources: nothing to build.
if (!existsSync("src")) process.exit(0);

const stamp = "dist/.built";
const sources = ["src", "gen", "openapi", "package.json", "tsconfig.json", "tsconfig.build.json"];

/** The latest change under `path`; an editor's lock link or a file gone meanwhile counts for nothing. */
function newest(path) {
  let stats;
  try {
    stats = lstatSync(path);
  } catch (error) {
    if (error.code === "ENOENT") return 0;
    throw error;
  }
  if (!stats.isDirectory()) return stats.mtimeMs;
  let latest = stats.mtimeMs;
  for (const entry of readdirSync(path)) latest = Math.max(latest, newest(join(path, entry)));
  return latest;
}

const built = existsSync(stamp) ? statSync(stamp).mtimeMs : 0;
if (Math.max(...sources.filter(existsSync).map(newest)) >= built) {
  const started = new Date();
  execFileSync("npm", ["run", "-s", "build"], { stdio: "inherit" });
  // Dated when the build began: a file saved during it is built again next time.
  writeFileSync(stamp, `${started.toISOString()}\n`);
  utimesSync(stamp, started, started);
}
