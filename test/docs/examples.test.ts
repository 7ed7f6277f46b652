import { execFile, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import test, { type ExecutionContext } from "ava";
import pLimit from "p-limit";
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

/** A page's blocks, and those of them a reader runs. */
interface Tour {
  readonly path: string;
  readonly blocks: CodeBlock[];
  readonly shell: CodeBlock[];
}

function tourOf(page: { path: string; markdown: string }): Tour {
  const blocks = codeBlocks(page.markdown);
  return { path: page.path, blocks, shell: blocks.filter(isShell) };
}

/** The service a reader's tours run against, and the keys it printed. */
interface TourService {
  readonly port: number;
  readonly secretKey: string;
  readonly publicKey: string;
  readonly adminToken: string;
  stop(): Promise<void>;
}

/** What every tour's service runs with besides its defaults. */
const tourEnv = {
  WEBHOOK_ALLOW_PRIVATE: "true",
  METRICS_TOKEN: metricsToken,
  // The default, which docs/trust.md shows counting down.
  RATE_LIMIT_CODE_LOOKUPS: "30/1m",
};

/** A fresh service on the default configuration, with the test keys. */
async function testService(): Promise<TourService> {
  const server = await startServer({ ...asUsersRunIt, env: tourEnv });
  return {
    port: server.port,
    secretKey: keys.secret,
    publicKey: keys.public,
    adminToken: keys.admin,
    stop: () => server.stop(),
  };
}

/**
 * `npm run dev` as a newcomer starts it (the compiled entry, which `npm
 * test` builds first), on a data directory of its own, with the keys and
 * admin token it prints.
 */
async function developmentService(): Promise<TourService> {
  const dataDir = mkdtempSync(join(tmpdir(), "referrals-docs-dev-"));
  const child = spawn(process.execPath, ["dist/src/dev.js"], {
    cwd: root,
    env: { ...process.env, ...tourEnv, DATA_DIR: dataDir, PORT: "0", HOST: "127.0.0.1" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let banner = "";
  child.stdout.on("data", (chunk: Buffer) => {
    if (!/live: http/.test(banner)) banner += chunk;
  });
  child.stderr.resume();
  const exited = new Promise((resolve) => child.once("close", resolve));
  const deadline = Date.now() + 120_000;
  while (!/live: http/.test(banner)) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`npm run dev did not start:\n${banner}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const field = (name: string) => new RegExp(`${name}:\\s+(\\S+)`).exec(banner)?.[1] ?? "";
  return {
    port: Number(/listening on [^:]+:(\d+)/.exec(banner)?.[1]),
    secretKey: field("secret key"),
    publicKey: field("public key"),
    adminToken: field("admin token"),
    async stop() {
      child.kill("SIGTERM");
      await exited;
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/**
 * Runs the tours' shell blocks in order in one bash against one fresh
 * service, as a reader pastes them into one terminal, and checks each JSON
 * block shown after a shell block against what it printed.
 */
async function runTours(
  t: ExecutionContext,
  tours: readonly Tour[],
  start: () => Promise<TourService> = testService,
): Promise<void> {
  const server = await start();
  try {
    const address = `127.0.0.1:${server.port}`;
    const steps = tours.flatMap((tour) => tour.shell.map((block) => ({ tour, block })));
    const script = [
      "set -euo pipefail",
      ...steps.flatMap(({ block }, index) => [
        block.text.replaceAll("localhost:8080", address),
        `printf '\\n${marker} ${index}\\n'`,
      ]),
    ].join("\n");
    const result = await run("bash", ["-c", script], {
      cwd: root,
      env: {
        ...process.env,
        SK: server.secretKey,
        PK: server.publicKey,
        ADMIN_TOKEN: server.adminToken,
        METRICS_TOKEN: metricsToken,
        // Where the CLI and the example programs find the service.
        PORT: String(server.port),
        REFERRALS_URL: `http://${address}`,
        REFERRALS_GRPC_ADDRESS: address,
      },
      timeout: 170_000 * tours.length,
    }).catch((error: { stdout?: string; stderr?: string }) => error);
    const outputs = (result.stdout ?? "").split(new RegExp(`\\n${marker} \\d+\\n`));
    const finished = outputs.length - 1;
    if (finished < steps.length) {
      const { tour, block } = steps[finished] as (typeof steps)[number];
      t.fail(
        `${tour.path}:${block.line}: the example failed\n${block.text}\n${result.stderr ?? ""}${outputs.at(-1)}`,
      );
      return;
    }
    // Every difference at once: a page that depends on an earlier one may differ in several.
    const differences: string[] = [];
    for (const [index, { tour, block }] of steps.entries()) {
      const next = tour.blocks[tour.blocks.indexOf(block) + 1];
      if (next?.language !== "json" || next.note?.startsWith("not run")) continue;
      const where = `${tour.path}:${next.line}`;
      const printed = outputs[index] as string;
      let actual: unknown[];
      try {
        actual = jsonValues(printed);
      } catch {
        differences.push(`${where}: the example above printed no JSON:\n${printed}`);
        continue;
      }
      const shown = jsonValues(next.text);
      const difference = differenceFromShown(shown, actual);
      if (difference) differences.push(`${where}: ${difference}\nprinted:\n${printed}`);
    }
    t.deepEqual(differences, []);
  } finally {
    await server.stop();
  }
}

const pages = docsPages(root);

/**
 * Each page's tour starts a service and runs its examples through a bash of
 * CLI processes. All of them at once (fourteen pages and the two reading
 * orders, beside the suite's other files) took two cores for minutes, and
 * each page's tour up to 3 min where alone it takes 12 s: a few at a time,
 * and each page's timeout counts its own tour, not its wait for a slot.
 */
const pageTourSlots = pLimit(2);

for (const page of pages) {
  const tour = tourOf(page);
  const { blocks, shell } = tour;

  if (shell.length > 0) {
    test(`${page.path}: every shell example runs and prints what the page shows`, async (t) => {
      t.timeout(600_000, "waiting for a slot to run the page's tour");
      await pageTourSlots(async () => {
        t.timeout(180_000);
        await runTours(t, [tour]);
      });
    });
  }

  for (const block of blocks.filter((candidate) => candidate.note?.startsWith("file: "))) {
    const file = (block.note as string).slice("file: ".length).trim();
    test(`${page.path}:${block.line} shows ${file} as it is`, (t) => {
      t.is(`${block.text}\n`, readFileSync(join(root, file), "utf8"));
    });
  }
}

/**
 * A reader follows the pages one after another on one service, in one
 * terminal: each page's figures must hold whatever ran before it (a page
 * uses names of its own, or an application of its own where it counts
 * everything), and no page may change what a later one relies on. Two
 * orders: the README's map of docs/, and a newcomer's first hour (the
 * README, then rewards, insights, privacy, webhooks and admin), the other
 * pages after it from the last to the first.
 */
const readme = readFileSync(join(root, "README.md"), "utf8");
const mapped = [...readme.matchAll(/^\| \[(docs\/[\w-]+\.md)\]/gm)].map(
  (match) => match[1] as string,
);
const unmapped = pages
  .map((page) => page.path)
  .filter((path) => path !== "README.md" && !mapped.includes(path));
const firstHour = ["rewards", "insights", "privacy", "webhooks", "admin"].map(
  (name) => `docs/${name}.md`,
);
const readingOrders: Record<string, { paths: string[]; start: () => Promise<TourService> }> = {
  "in the README's order": { paths: ["README.md", ...mapped, ...unmapped], start: testService },
  "in a newcomer's order, on npm run dev": {
    paths: [
      "README.md",
      ...firstHour,
      ...[...mapped, ...unmapped].filter((path) => !firstHour.includes(path)).reverse(),
    ],
    start: developmentService,
  },
};

for (const [order, { paths, start }] of Object.entries(readingOrders)) {
  test(`every page's examples, one page after another on one service, ${order}`, async (t) => {
    t.timeout(600_000);
    const tours = paths.map((path) => {
      const page = pages.find((candidate) => candidate.path === path);
      if (!page) throw new Error(`the README's map names ${path}, which is not a page`);
      return tourOf(page);
    });
    await runTours(t, tours, start);
  });
}
