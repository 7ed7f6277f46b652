/**
 * `npm run bench`: starts the service on fresh embedded stores, drives it
 * with real load generators next to bare ceilings serving the same bytes,
 * and prints Markdown tables (results also go to bench/results/ as JSON).
 * `npm run bench -- --help` lists the suites and options.
 */
import { readFileSync } from "node:fs";
import { createContext } from "./lib/context.js";
import { type BenchOptions, parseOptions, type Suite, usage } from "./lib/options.js";
import {
  type MachineInfo,
  machineInfo,
  machineLine,
  resultPaths,
  writeResults,
} from "./lib/report.js";
import { type OperationsRow, operationsTable, runOperations } from "./suites/operations.js";
import { type ReadRow, readsTable, runReads } from "./suites/reads.js";
import { runScale, type ScaleRow, scaleTable } from "./suites/scale.js";
import { runWebhooks, type WebhookResults, webhookTables } from "./suites/webhooks.js";
import { runWrites, type WriteRow, writesTable } from "./suites/writes.js";

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

const headings: Record<Suite, string> = {
  reads: "Reads: the service against bare ceilings serving the same bytes",
  writes: "Writes: peak, and p99 at half the peak rate",
  webhooks: "Writes with a webhook subscribed to every event (REST)",
  operations: "The operations steps: the service with and without them",
  scale: "Scale: one request at a time on stores of growing size (REST)",
};

/** What a run writes to its JSON file, and what `--tables` reads back. */
interface BenchResults {
  machine: MachineInfo;
  options: BenchOptions;
  engine?: string;
  reads?: ReadRow[];
  writes?: WriteRow[];
  webhooks?: WebhookResults;
  operations?: OperationsRow[];
  scale?: ScaleRow[];
}

const tableOf: { [S in Suite]: (results: BenchResults) => string | undefined } = {
  reads: (results) => results.reads && readsTable(results.reads),
  writes: (results) => results.writes && writesTable(results.writes),
  webhooks: (results) => results.webhooks && webhookTables(results.webhooks),
  operations: (results) => results.operations && operationsTable(results.operations),
  scale: (results) => results.scale && scaleTable(results.scale),
};

/** The machine line and a table per suite measured, as Markdown. */
function report(results: BenchResults): string {
  const sections = results.options.suites.flatMap((suite) => {
    const table = tableOf[suite](results);
    return table === undefined ? [] : [`### ${headings[suite]}\n\n${table}`];
  });
  const line = machineLine(results.machine, {
    repeats: results.options.repeats,
    seconds: results.options.seconds,
    ...(results.engine === undefined ? {} : { engine: results.engine }),
  });
  let text = `\n${line}\n\n${sections.join("\n\n")}\n\n`;
  if (sections.some((section) => /\d\*/.test(section))) {
    text += "req/s marked * ran out of seeded referees before the end of the run (see the JSON).\n";
  }
  return text;
}

if (options.tables !== undefined) {
  process.stdout.write(report(JSON.parse(readFileSync(options.tables, "utf8")) as BenchResults));
  process.exit(0);
}

const context = createContext(options);
const results: BenchResults = { machine: machineInfo(), options };
const paths = resultPaths(options.out, options.suites);

for (const suite of options.suites) {
  context.log(`suite ${suite}`);
  if (suite === "reads") results.reads = await runReads(context);
  else if (suite === "writes") results.writes = await runWrites(context);
  else if (suite === "webhooks") results.webhooks = await runWebhooks(context);
  else if (suite === "operations") results.operations = await runOperations(context);
  else results.scale = await runScale(context);
  results.engine = context.engine;
  // After every suite, so a later failure does not lose what was measured.
  writeResults(paths, results);
}

process.stdout.write(report(results));
context.log(`results: ${paths.join(", ")}`);
