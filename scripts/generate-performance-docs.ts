/**
 * Renders the pages the bench's results make (docs/performance.md, the
 * Performance tables of docs/rewards.md and the generated tables of
 * docs/trust.md and docs/fraud.md; see bench/lib/performance-docs.ts).
 *
 *   node --import tsx scripts/generate-performance-docs.ts          # write the pages
 *   node --import tsx scripts/generate-performance-docs.ts --check  # exit 1 when stale
 */
import { stalePerformanceDocs, writePerformanceDocs } from "../bench/lib/performance-docs.js";
import { resultsDir } from "../bench/lib/results.js";

if (process.argv.includes("--check")) {
  const stale = stalePerformanceDocs();
  if (stale.length > 0) {
    process.stderr.write(
      `stale, not what ${resultsDir}/ renders: ${stale.join(", ")} (npm run docs:performance)\n`,
    );
    process.exit(1);
  }
} else {
  const changed = writePerformanceDocs();
  process.stdout.write(
    changed.length > 0 ? `rendered from ${resultsDir}/: ${changed.join(", ")}\n` : "up to date\n",
  );
}
