import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import test from "ava";
import {
  type CodeBlock,
  codeBlocks,
  differenceFromShown,
  docsPages,
  jsonValues,
} from "../helpers/markdown.js";
import { asUsersRunIt, keys, startServer } from "../helpers/server.js";

/**
 * Every example of README.md and of every page under docs/ runs here, so the docs cannot
 * drift from the code: a page's shell blocks run in order in one bash (as a
 * reader pastes them, `localhost:8080` pointing at a fresh service, `SK`,
 * `PK` and `ADMIN_TOKEN` set), and a JSON block right after a shell block is
 * what that block must print (see `differenceFromShown`). A block whose
 * comment says `file: <path>` must be that file, which its own test runs. A
 * block marked `<!-- not run: why -->` is left out.
 */

const run = promisify(execFile);
const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const marker = "\u0001example-end";
const metricsToken = "docs-metrics-token";

const isShell = (block: CodeBlock) => block.language === "sh" && !block.note?.startsWith("not run");

for (const page of docsPages(root)) {
  const blocks = codeBlocks(page.markdown);
  const shell = blocks.filter(isShell);

  if (shell.length > 0) {
    test(`${page.path}: every shell example runs and prints what the page shows`, async (t) => {
      t.timeout(180_000);
      const server = await startServer({
        ...asUsersRunIt,
        env: {
          WEBHOOK_ALLOW_PRIVATE: "true",
          METRICS_TOKEN: metricsToken,
          // The default, which docs/trust.md shows counting down.
          RATE_LIMIT_CODE_LOOKUPS: "30/1m",
        },
      });
      try {
        const address = `127.0.0.1:${server.port}`;
        const script = [
          "set -euo pipefail",
          ...shell.flatMap((block, index) => [
            block.text.replaceAll("localhost:8080", address),
            `printf '\\n${marker} ${index}\\n'`,
          ]),
        ].join("\n");
        const result = await run("bash", ["-c", script], {
          cwd: root,
          env: {
            ...process.env,
            SK: keys.secret,
            PK: keys.public,
            ADMIN_TOKEN: keys.admin,
            METRICS_TOKEN: metricsToken,
            // Where the CLI and the example programs find the service.
            PORT: String(server.port),
            REFERRALS_URL: `http://${address}`,
            REFERRALS_GRPC_ADDRESS: address,
          },
          timeout: 170_000,
        }).catch((error: { stdout?: string; stderr?: string }) => error);
        const outputs = (result.stdout ?? "").split(new RegExp(`\\n${marker} \\d+\\n`));
        const finished = outputs.length - 1;
        if (finished < shell.length) {
          const failed = shell[finished] as CodeBlock;
          t.fail(
            `${page.path}:${failed.line}: the example failed\n${failed.text}\n${result.stderr ?? ""}${outputs.at(-1)}`,
          );
          return;
        }
        for (const [index, block] of shell.entries()) {
          const next = blocks[blocks.indexOf(block) + 1];
          if (next?.language !== "json" || next.note?.startsWith("not run")) continue;
          const where = `${page.path}:${next.line}`;
          const printed = outputs[index] as string;
          let actual: unknown[];
          try {
            actual = jsonValues(printed);
          } catch {
            t.fail(`${where}: the example above printed no JSON:\n${printed}`);
            continue;
          }
          const shown = jsonValues(next.text);
          const difference = differenceFromShown(shown, actual);
          t.is(difference, undefined, `${where}: ${difference}\nprinted:\n${printed}`);
        }
      } finally {
        await server.stop();
      }
    });
  }

  for (const block of blocks.filter((candidate) => candidate.note?.startsWith("file: "))) {
    const file = (block.note as string).slice("file: ".length).trim();
    test(`${page.path}:${block.line} shows ${file} as it is`, (t) => {
      t.is(`${block.text}\n`, readFileSync(join(root, file), "utf8"));
    });
  }
}
