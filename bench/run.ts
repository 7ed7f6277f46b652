/**
 * `npm run bench`: starts the service on fresh embedded stores, drives it
 * with real load generators next to bare ceilings serving the same bytes,
 * and prints Markdown tables. Each suite's results go to its own JSON file
 * in bench/results/ (committed, the latest run of each suite), and
 * docs/performance.md is rendered again from them.
 * `npm run bench -- --help` lists the suites and options.
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { createContext } from "./lib/context.js";
import { type BenchOptions, parseOptions, usage } from "./lib/options.js";
import { writePerformanceDocs } from "./lib/performance-docs.js";
import { profileServicesInto, repoRoot } from "./lib/processes.js";
import { machineInfo } from "./lib/report.js";
import { type BenchResults, report, resultsDir, writeSuiteResults } from "./lib/results.js";
import { runCluster } from "./suites/cluster.js";
import { runDefaults } from "./suites/defaults.js";
import { runFraud } from "./suites/fraud.js";
import { runInsights } from "./suites/insights.js";
import { runLinks } from "./suites/links.js";
import { runOperations } from "./suites/operations.js";
import { runReads } from "./suites/reads.js";
import { runScale } from "./suites/scale.js";
import { runWebhooks } from "./suites/webhooks.js";
import { runWrites } from "./suites/writes.js";

if (process.argv.includes("--help")) {
  process.stdout.write(usage);
  process.exit(0);
}
let options: BenchOptions;
try {
  options = parseOptions(process.argv.slice(2));
} catch (error) {
  process.stderr.write(`${(error as Error).message}\n`);
  process.exit(2);
}

if (options.tables !== undefined) {
  process.stdout.write(report(JSON.parse(readFileSync(options.tables, "utf8")) as BenchResults));
  process.exit(0);
}

if (options.profile) {
  profileServicesInto(`bench/scratch/profiles/${new Date().toISOString().replaceAll(":", "-")}`);
}
const context = createContext(options);
const results: BenchResults = { machine: machineInfo(), options };
// The docs are rendered from the committed results only, never from a scratch directory.
const rendersDocs = resolve(repoRoot, options.out) === resolve(repoRoot, resultsDir);
const written: string[] = [];

for (const suite of options.suites) {
  context.log(`suite ${suite}`);
  // Each suite's file names the machine, commit and time of that suite's start.
  const machine = machineInfo();
  if (suite === "reads") results.reads = await runReads(context);
  else if (suite === "writes") results.writes = await runWrites(context);
  else if (suite === "webhooks") results.webhooks = await runWebhooks(context);
  else if (suite === "operations") results.operations = await runOperations(context);
  else if (suite === "cluster") results.cluster = await runCluster(context);
  else if (suite === "scale") results.scale = await runScale(context);
  else if (suite === "insights") results.insights = await runInsights(context);
  else if (suite === "links") results.links = await runLinks(context);
  else if (suite === "defaults") results.defaults = await runDefaults(context);
  else results.fraud = await runFraud(context);
  results.engine = context.engine;
  // After every suite, so a later failure does not lose what was measured.
  written.push(writeSuiteResults(options.out, { ...results, machine }, suite));
  if (rendersDocs) {
    const changed = writePerformanceDocs();
    if (changed.length > 0) context.log(`rendered ${changed.join(", ")}`);
  }
}

process.stdout.write(report(results));
context.log(`results: ${written.join(", ")}`);
