/**
 * `npm run bench`: starts the service on fresh embedded stores, drives it
 * with real load generators next to bare ceilings serving the same bytes,
 * and prints Markdown tables (results also go to bench/results/ as JSON).
 * `npm run bench -- --help` lists the suites and options.
 */
import { createContext } from "./lib/context.js";
import { type BenchOptions, parseOptions, type Suite, usage } from "./lib/options.js";
import { machineInfo, machineLine, resultPaths, writeResults } from "./lib/report.js";
import { operationsTable, runOperations } from "./suites/operations.js";
import { readsTable, runReads } from "./suites/reads.js";
import { runScale, scaleTable } from "./suites/scale.js";
import { runWebhooks, webhookTables } from "./suites/webhooks.js";
import { runWrites, writesTable } from "./suites/writes.js";

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

const context = createContext(options);
const machine = machineInfo();
const results: Record<string, unknown> = { machine, options };
const sections: string[] = [];
const paths = resultPaths(options.out, options.suites);

const headings: Record<Suite, string> = {
  reads: "Reads: the service against bare ceilings serving the same bytes",
  writes: "Writes: peak, and p99 at half the peak rate",
  webhooks: "Writes with a webhook subscribed to every event (REST)",
  operations: "The operations steps: the service with and without them",
  scale: "Scale: one request at a time on stores of growing size (REST)",
};

for (const suite of options.suites) {
  context.log(`suite ${suite}`);
  let table: string;
  if (suite === "reads") {
    const rows = await runReads(context);
    results.reads = rows;
    table = readsTable(rows);
  } else if (suite === "writes") {
    const rows = await runWrites(context);
    results.writes = rows;
    table = writesTable(rows);
  } else if (suite === "webhooks") {
    const webhooks = await runWebhooks(context);
    results.webhooks = webhooks;
    table = webhookTables(webhooks);
  } else if (suite === "operations") {
    const rows = await runOperations(context);
    results.operations = rows;
    table = operationsTable(rows);
  } else {
    const rows = await runScale(context);
    results.scale = rows;
    table = scaleTable(rows);
  }
  sections.push(`### ${headings[suite]}\n\n${table}`);
  results.engine = context.engine;
  // After every suite, so a later failure does not lose what was measured.
  writeResults(paths, results);
}

const line = machineLine(machine, {
  repeats: options.repeats,
  seconds: options.seconds,
  engine: context.engine,
});
process.stdout.write(`\n${line}\n\n${sections.join("\n\n")}\n\n`);
if (sections.some((section) => /\d\*/.test(section))) {
  process.stdout.write(
    "req/s marked * ran out of seeded referees before the end of the run (see the JSON).\n",
  );
}
context.log(`results: ${paths.join(", ")}`);
