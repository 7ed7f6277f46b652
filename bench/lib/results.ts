import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { type ClusterResults, clusterTables } from "../suites/cluster.js";
import { type DefaultsResults, defaultsTable } from "../suites/defaults.js";
import { type FraudResults, fraudTables } from "../suites/fraud.js";
import { type InsightsResults, insightsReferrals, insightsTables } from "../suites/insights.js";
import { type LinksResults, linksTables } from "../suites/links.js";
import { type OperationsRow, operationsTable } from "../suites/operations.js";
import { type ReadRow, readsTable } from "../suites/reads.js";
import { type ScaleRow, scaleTable } from "../suites/scale.js";
import { type WebhookResults, webhookTables } from "../suites/webhooks.js";
import { type WriteRow, writesTable } from "../suites/writes.js";
import { allSuites, type BenchOptions, parseOptions, type Suite } from "./options.js";
import { repoRoot } from "./processes.js";
import { type MachineInfo, machineLine, writeResults } from "./report.js";

/**
 * Where the bench keeps its results, one file per suite (`reads.json`, …):
 * the latest run of that suite, with every run behind each median, the
 * machine and the options. They are committed; docs/performance.md is
 * rendered from them.
 */
export const resultsDir = "bench/results";

/** Where `--quick` runs go unless `--out` says otherwise: ignored by git, no docs rendered. */
export const scratchDir = "bench/scratch";

/** What a run writes to its JSON files, and what `--tables` reads back. */
export interface BenchResults {
  machine: MachineInfo;
  options: BenchOptions;
  engine?: string;
  reads?: ReadRow[];
  writes?: WriteRow[];
  webhooks?: WebhookResults;
  operations?: OperationsRow[];
  cluster?: ClusterResults;
  scale?: ScaleRow[];
  insights?: InsightsResults;
  fraud?: FraudResults;
  links?: LinksResults;
  defaults?: DefaultsResults;
}

/** The heading of each suite's tables. */
export const suiteHeadings: Record<Suite, string> = {
  reads: "Reads: the service against bare ceilings serving the same bytes",
  writes: "Writes: peak, and p99 at half the peak rate",
  webhooks: "Writes with a webhook subscribed to every event (REST)",
  operations: "The operations steps: the service with and without them",
  cluster: "Cluster: WORKERS=2 against WORKERS=1, and durable writes",
  scale: "Scale: one request at a time on stores of growing size (REST)",
  insights: "Insights: the program counters' reads, export and cost to writes",
  fraud: "Fraud: a policy backtest over a campaign's referrals (REST)",
  links: "Links: share-link redirects, against a bare ceiling, every click counted",
  defaults:
    "The default configuration (WORKERS=auto): what rewards and a webhook cost a write, and p99 at half the peak (REST)",
};

const tableOf: { [S in Suite]: (results: BenchResults) => string | undefined } = {
  reads: (results) => results.reads && readsTable(results.reads),
  writes: (results) => results.writes && writesTable(results.writes),
  webhooks: (results) => results.webhooks && webhookTables(results.webhooks),
  operations: (results) => results.operations && operationsTable(results.operations),
  cluster: (results) => results.cluster && clusterTables(results.cluster),
  scale: (results) => results.scale && scaleTable(results.scale),
  insights: (results) => results.insights && insightsTables(results.insights),
  fraud: (results) => results.fraud && fraudTables(results.fraud),
  links: (results) => results.links && linksTables(results.links),
  defaults: (results) => results.defaults && defaultsTable(results.defaults),
};

/** A suite's tables in Markdown, as the bench prints them; undefined when it did not run. */
export function suiteTables(results: BenchResults, suite: Suite): string | undefined {
  return tableOf[suite](results);
}

/** The line naming the machine, build and settings of a run. */
export function resultsMachineLine(results: BenchResults): string {
  return machineLine(results.machine, {
    repeats: results.options.repeats,
    seconds: results.options.seconds,
    ...(results.engine === undefined ? {} : { engine: results.engine }),
  });
}

/** The note under tables with a req/s marked `*`; undefined when none is. */
export function exhaustedNote(tables: string): string | undefined {
  return /\d\*/.test(tables)
    ? "req/s marked * ran out of seeded referees before the end of the run (see the JSON)."
    : undefined;
}

/** The machine line and a table per suite measured, as Markdown. */
export function report(results: BenchResults): string {
  const sections = results.options.suites.flatMap((suite) => {
    const tables = suiteTables(results, suite);
    return tables === undefined ? [] : [`### ${suiteHeadings[suite]}\n\n${tables}`];
  });
  let text = `\n${resultsMachineLine(results)}\n\n${sections.join("\n\n")}\n\n`;
  const note = exhaustedNote(sections.join("\n"));
  if (note !== undefined) text += `${note}\n`;
  return text;
}

/** The results file of `suite` in `dir` (relative to the repository root unless absolute). */
export function suiteResultsPath(dir: string, suite: Suite): string {
  return join(resolve(repoRoot, dir), `${suite}.json`);
}

/** The part of a run's results that is about one suite, as its own results file holds it. */
export function suiteResults(results: BenchResults, suite: Suite): BenchResults {
  const common: BenchResults = { ...results };
  for (const name of allSuites) delete common[name];
  const own = results[suite];
  return {
    ...common,
    options: { ...results.options, suites: [suite] },
    ...(own === undefined ? {} : { [suite]: own }),
  };
}

/** Writes one suite's results over its file in `dir`; returns the path. */
export function writeSuiteResults(dir: string, results: BenchResults, suite: Suite): string {
  const path = suiteResultsPath(dir, suite);
  writeResults([path], suiteResults(results, suite));
  return path;
}

/** Every suite's results kept in `dir`, in the suites' order; suites without a file are left out. */
export function readSuiteResults(dir: string = resultsDir): Map<Suite, BenchResults> {
  const found = new Map<Suite, BenchResults>();
  for (const suite of allSuites) {
    const path = suiteResultsPath(dir, suite);
    if (!existsSync(path)) continue;
    found.set(suite, JSON.parse(readFileSync(path, "utf8")) as BenchResults);
  }
  return found;
}

/**
 * The command that runs `suite` again as this run did: `npm run bench --`,
 * the suite, and every option that differed from its default (`--sizes`
 * for the scale suite, for the insights suite when its largest size
 * differed, and for the fraud suite when its referrals did; the output
 * directory aside).
 */
export function reproduceCommand(results: BenchResults, suite: Suite): string {
  const options = results.options;
  const defaults = parseOptions(options.quick ? ["--quick"] : []);
  const args: string[] = [suite];
  if (options.quick) args.push("--quick");
  const numeric: [flag: string, key: keyof BenchOptions][] = [
    ["--repeats", "repeats"],
    ["--duration", "seconds"],
    ["--warmup", "warmupSeconds"],
    ["--concurrency", "concurrency"],
    ["--h2-connections", "h2Connections"],
    ["--base", "baseCustomers"],
  ];
  for (const [flag, key] of numeric) {
    if (options[key] !== defaults[key]) args.push(flag, String(options[key]));
  }
  if (suite === "scale" && options.sizes.join() !== defaults.sizes.join()) {
    args.push("--sizes", options.sizes.map(sizeArgument).join(","));
  }
  if (suite === "insights" && insightsReferrals(options) !== insightsReferrals(defaults)) {
    args.push("--sizes", sizeArgument(insightsReferrals(options)));
  }
  if (suite === "fraud" && options.fraudReferrals !== defaults.fraudReferrals) {
    args.push("--sizes", sizeArgument(options.fraudReferrals));
  }
  if (options.only.length > 0) args.push("--only", options.only.join(","));
  return `npm run bench -- ${args.join(" ")}`;
}

/** A store size as `--sizes` takes it: 10k, 1M. */
function sizeArgument(value: number): string {
  if (value >= 1e6 && value % 1e6 === 0) return `${value / 1e6}M`;
  if (value >= 1e3 && value % 1e3 === 0) return `${value / 1e3}k`;
  return String(value);
}
