import test from "ava";
import { checkInvariants, optionsOf } from "./runner.js";

/**
 * The invariant checker (docs/invariants.md): random sequences of every
 * write, from several clients at once, against the service with two
 * workers, with kill -9 and restarts, every invariant checked after each
 * step. `npm test` runs it for about a minute from a fixed seed; `npm run
 * check:invariants -- --minutes N` for longer, and with `--seed` and
 * `--path` it replays a failure it printed.
 */
test("every invariant holds through random steps, kills and restarts", async (t) => {
  // ava passes what follows `--` on its command line to the test's process.
  const argv = process.argv.slice(2);
  // A long check says how it goes as it goes; in the suite, with the test's result.
  const log = argv.includes("--minutes")
    ? (line: string) => process.stderr.write(`${line}\n`)
    : (line: string) => t.log(line);
  const options = optionsOf(argv, log);
  // The runs, the shrinking of a failure, and the starts and stops around them.
  t.timeout(options.runForMs + options.shrinkForMs + 120_000);
  const report = await checkInvariants(options);
  t.log(`${report.runs} runs, ${report.steps} steps`);
  if (report.failure) t.fail(report.failure);
  else t.pass();
});
