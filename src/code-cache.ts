import { enableCompileCache, flushCompileCache } from "node:module";
import { fileURLToPath } from "node:url";

/**
 * Where the compiled code is kept: beside the service's own dependencies,
 * in the directory packages use for their caches. Not the system's temporary
 * directory (Node's default), which other users of the machine can write to.
 */
const cacheDirectory = fileURLToPath(
  new URL("../../node_modules/.cache/referral-service/compiled", import.meta.url),
);

/**
 * Keeps V8's compiled code of every module on disk (Node's compile cache)
 * and loads it on the next start instead of compiling again: the primary
 * and each worker load the whole service at start, which was most of a
 * restart's time (see "How long a start takes" in docs/operations.md). Node checks each
 * entry against the source it was compiled from, so a rebuild or an
 * upgrade of Node only compiles again. `NODE_COMPILE_CACHE=<dir>` puts the
 * cache elsewhere and `NODE_DISABLE_COMPILE_CACHE=1` turns it off (both
 * Node's own). A directory that cannot be written leaves the start as it
 * was, compiling everything.
 */
export function enableCodeCache(): void {
  if (process.env.NODE_COMPILE_CACHE) return; // Node enabled it there already.
  enableCompileCache(cacheDirectory);
}

/**
 * Writes what this process compiled so far. Node writes it as the process
 * exits, which a service stopped by SIGKILL, or one that never stops, does
 * not reach: called once the service serves, so the next start finds it.
 */
export function saveCodeCache(): void {
  flushCompileCache();
}
