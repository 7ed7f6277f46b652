import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import test from "ava";
import { allSuites } from "../../bench/lib/options.js";
import {
  performancePagePath,
  renderPerformanceDocs,
  rewardsPagePath,
} from "../../bench/lib/performance-docs.js";
import { readSuiteResults, resultsDir } from "../../bench/lib/results.js";

/**
 * docs/performance.md and the generated tables of docs/rewards.md are
 * rendered from the committed bench results (bench/results/<suite>.json);
 * they are never edited by hand, and a stale page fails here.
 */
const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const rendered = new Map(renderPerformanceDocs().map(({ path, text }) => [path, text]));
const stale = "is stale: run npm run docs:performance (or the bench) and commit the result";

test(`${performancePagePath} is what the generator renders from ${resultsDir}/`, (t) => {
  const committed = readFileSync(join(root, performancePagePath), "utf8");
  t.is(committed, rendered.get(performancePagePath) as string, `${performancePagePath} ${stale}`);
});

test(`the generated tables of ${rewardsPagePath} are what the generator renders from ${resultsDir}/`, (t) => {
  const committed = readFileSync(join(root, rewardsPagePath), "utf8");
  const blocks = (page: string) =>
    [...page.matchAll(/<!-- generated: [^>]*-->[\s\S]*?<!-- end generated -->/g)].map(
      (match) => match[0],
    );
  const expected = blocks(rendered.get(rewardsPagePath) as string);
  t.is(expected.length, 2, "the writes trigger and scale reward-grant blocks");
  t.deepEqual(blocks(committed), expected, `${rewardsPagePath} ${stale}`);
});

test(`${resultsDir}/ holds one results file per suite, each with its machine and options`, (t) => {
  const names = readdirSync(join(root, resultsDir)).filter((name) => name.endsWith(".json"));
  t.deepEqual(
    names.filter((name) => !allSuites.some((suite) => name === `${suite}.json`)),
    [],
    "only <suite>.json files",
  );
  const results = readSuiteResults();
  t.true(results.size > 0);
  for (const [suite, result] of results) {
    t.deepEqual(result.options.suites, [suite], suite);
    t.truthy(result.machine.commit, suite);
    t.truthy(result[suite], `${suite}.json holds the ${suite} results`);
  }
});
