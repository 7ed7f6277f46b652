import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type BenchContext, measureWhileAlive, stopService } from "../lib/context.js";
import { drive } from "../lib/drive.js";
import { type LoadResult, median, medianResult } from "../lib/measure.js";
import { type BenchOptions, sizeLabel } from "../lib/options.js";
import { diskBytes, startService } from "../lib/processes.js";
import { failureNote, formatMs, markdownTable } from "../lib/report.js";
import { restRequest, writeScenario } from "../lib/scenarios.js";
import { baseCustomer, benchKeys, busyGrants, type SeededData, seedStore } from "../lib/seed.js";
import { type HttpRequestSpec, http1Sender } from "../lib/senders.js";

/** One store size: how reads, identify, restart, memory and disk fare. */
export interface ScaleRow {
  readonly customers: number;
  readonly referrals: number;
  /** Reward grants seeded (as many as customers). */
  readonly rewardGrants?: number;
  readonly seedSeconds: number;
  /** The first start after seeding (it may build what the seeding left to it). */
  readonly firstStartMs: number;
  /** From process start to `/readyz` 200, on a restart (median). */
  readonly restartMs: number;
  /**
   * The same on `npm start`'s default, a primary and a worker per core
   * (`WORKERS=auto`); absent from results written before it was measured.
   */
  readonly restartDefaultMs?: number;
  /** Resident memory after the measurements (median). */
  readonly rssBytes: number;
  /** Bytes of DATA_DIR at the end. */
  readonly diskBytes: number;
  /** Latency of each call, one at a time (median of the runs' percentiles). */
  readonly figures: Record<string, LoadResult>;
  readonly runs: {
    readonly restartMs: number[];
    readonly restartDefaultMs?: number[];
    readonly rssBytes: number[];
  };
}

/** The calls timed at each size, one request at a time; `tag` makes each run's new customers new. */
function scaleCalls(seeded: SeededData, customers: number, referrals: number, tag: string) {
  // Lookups walk the whole store in a scattered order rather than one hot entry.
  const pick = (i: number) => (i * 7919 + 13) % customers;
  const get = (path: (i: number) => string): HttpRequestSpec => ({
    method: "GET",
    path,
    headers: { authorization: benchKeys.secret },
  });
  const deep = (total: number) => Math.max(0, total - 20);
  return {
    "GET /customers, first page": get(() => "/customers?limit=20"),
    "GET /customers, last page": get(() => `/customers?limit=20&offset=${deep(customers)}`),
    "GET /customers/{id}, referrer of a tenth": get(() => `/customers/${seeded.oldestCustomerId}`),
    "GET /referrals, first page": get(() => "/referrals?limit=20"),
    "GET /referrals, last page": get(() => `/referrals?limit=20&offset=${deep(referrals)}`),
    "GET /customers?externalUserId=": get(
      (i) => `/customers?externalUserId=${baseCustomer(pick(i)).externalUserId}`,
    ),
    "GET /customers?email=": get(
      (i) => `/customers?email=${encodeURIComponent(baseCustomer(pick(i)).email)}`,
    ),
    "GET /customers?referralCode=": get(
      (i) => `/customers?referralCode=${baseCustomer(pick(i)).referralCode}`,
    ),
    "GET /reward-grants?customerId=, typical customer": get(
      () => `/reward-grants?customerId=${grantCustomer(seeded, "typical")}`,
    ),
    "GET /customers/{id}/reward-balance, typical customer": get(
      () => `/customers/${grantCustomer(seeded, "typical")}/reward-balance`,
    ),
    [`GET /reward-grants?customerId=, customer of ${busyGrants}`]: get(
      () => `/reward-grants?customerId=${grantCustomer(seeded, "busy")}`,
    ),
    [`GET /customers/{id}/reward-balance, customer of ${busyGrants}`]: get(
      () => `/customers/${grantCustomer(seeded, "busy")}/reward-balance`,
    ),
    "POST /customers/identify (new)": restRequest(
      writeScenario("identify-new", seeded, `scale-${tag}`),
    ),
  } satisfies Record<string, HttpRequestSpec>;
}

/** The customer the grant reads are about: one with as many grants as most, or the busy one. */
function grantCustomer(seeded: SeededData, which: "typical" | "busy"): string {
  const id = which === "typical" ? seeded.typicalGrantCustomerId : seeded.busyGrantCustomerId;
  if (!id) throw new Error("the scale store was seeded without reward grants");
  return id;
}

/**
 * For each size: seeds that many customers (and as many referrals, less
 * one) straight into a new store, starts the service once, then
 * `repeats` times restarts it and times every call one at a time.
 */
export async function runScale(context: BenchContext): Promise<ScaleRow[]> {
  const { options, log } = context;
  const rows: ScaleRow[] = [];
  const callSeconds = Math.max(1, options.seconds / 2);
  for (const customers of options.sizes) {
    const label = sizeLabel(customers);
    const dataDir = mkdtempSync(join(tmpdir(), `referrals-bench-scale-${label}-`));
    try {
      log(`scale ${label}: seeding`);
      const seedStarted = performance.now();
      let reported = 0;
      const plan = {
        customers,
        busyReferrer: true,
        everyoneReferred: true,
        rewardGrants: customers,
      };
      const seeded = await seedStore(dataDir, plan, (inserted) => {
        if (inserted - reported >= customers / 4) {
          reported = inserted;
          log(`scale ${label}: ${inserted.toLocaleString("en-US")} documents`);
        }
      });
      context.engine ??= seeded.engine;
      const seedSeconds = (performance.now() - seedStarted) / 1000;
      const { referrals } = seeded;
      const first = await startService(dataDir);
      await stopService(context, first);
      log(
        `scale ${label}: seeded in ${seedSeconds.toFixed(1)} s, first start ${formatMs(first.readyMs)} ms`,
      );
      const runs: Record<string, LoadResult[]> = {};
      const restartMs: number[] = [];
      const restartDefaultMs: number[] = [];
      const rssBytes: number[] = [];
      for (let repeat = 0; repeat < options.repeats; repeat++) {
        // A restart, every call, the memory after them: one unit, run again if the service died.
        let alive = true;
        const run = await measureWhileAlive(
          context,
          `scale ${label}`,
          () => alive,
          async () => {
            const service = await startService(dataDir);
            try {
              const results: Record<string, LoadResult> = {};
              const calls = scaleCalls(seeded, customers, referrals, Date.now().toString(36));
              for (const [name, spec] of Object.entries(calls)) {
                results[name] = await timeCall(service.origin, spec, callSeconds, options);
                log(
                  `scale ${label} ${repeat + 1}/${options.repeats} ${name}: ` +
                    `p50 ${formatMs(results[name].p50Ms)} ms${failureNote(results[name])}`,
                );
              }
              alive = service.alive();
              return { readyMs: service.readyMs, results, rssBytes: service.rssBytes() };
            } finally {
              await stopService(context, service);
            }
          },
        );
        restartMs.push(run.readyMs);
        rssBytes.push(run.rssBytes);
        // The restart as `npm start` makes it: the primary opens the store, then
        // forks the workers, and the service is ready once every worker serves.
        const clustered = await startService(dataDir, { WORKERS: "auto" });
        restartDefaultMs.push(clustered.readyMs);
        await stopService(context, clustered);
        log(
          `scale ${label} ${repeat + 1}/${options.repeats} restart: ` +
            `${formatMs(run.readyMs)} ms, ${formatMs(clustered.readyMs)} ms with workers`,
        );
        for (const [name, result] of Object.entries(run.results)) {
          runs[name] = [...(runs[name] ?? []), result];
        }
      }
      rows.push({
        customers,
        referrals,
        rewardGrants: seeded.rewardGrants,
        seedSeconds,
        firstStartMs: first.readyMs,
        restartMs: median(restartMs),
        restartDefaultMs: median(restartDefaultMs),
        rssBytes: median(rssBytes),
        diskBytes: diskBytes(dataDir),
        figures: Object.fromEntries(
          Object.entries(runs).map(([name, results]) => [name, medianResult(results)]),
        ),
        runs: { restartMs, restartDefaultMs, rssBytes },
      });
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  }
  return rows;
}

/**
 * The performance issue's restart goals, on the default configuration: ready
 * within 2 s of the process start up to 36,000 customers, within 5 s at 1M.
 * A size between them is held to 2 s, stricter than the goal asks.
 */
const restartGoals = [
  { upTo: 100_000, seconds: 2 },
  { upTo: 1_000_000, seconds: 5 },
] as const;

function restartGoal(row: ScaleRow): string {
  const goal = restartGoals.find((candidate) => row.customers <= candidate.upTo);
  if (!goal || row.restartDefaultMs === undefined) return "-";
  return `≤ ${goal.seconds} s ${row.restartDefaultMs <= goal.seconds * 1000 ? "met" : "missed"}`;
}

/** One call, one request at a time: a short warm-up, then `seconds` measured. */
async function timeCall(
  origin: string,
  spec: HttpRequestSpec,
  seconds: number,
  options: BenchOptions,
): Promise<LoadResult> {
  const sender = await http1Sender(origin, spec, 1);
  // Numbered across warm-up and measurement, so no new customer is identified twice.
  let sent = 0;
  const send = () => sender.send(sent++);
  try {
    if (options.warmupSeconds > 0) {
      await drive(send, { seconds: options.warmupSeconds / 2, concurrency: 1 });
    }
    return await drive(send, { seconds, concurrency: 1 });
  } finally {
    sender.close();
  }
}

/**
 * The scale table in Markdown: one column per size; `only` keeps the rows
 * whose label it accepts (the labels as the first column shows them).
 */
export function scaleTable(
  rows: readonly ScaleRow[],
  only: (label: string) => boolean = () => true,
): string {
  const names = Object.keys(rows[0]?.figures ?? {});
  const mebibytes = (bytes: number) => `${Math.round(bytes / 2 ** 20).toLocaleString("en-US")} MiB`;
  return markdownTable(
    [
      "customers (referrals)",
      ...rows.map((row) => `${sizeLabel(row.customers)} (${sizeLabel(row.referrals)})`),
    ],
    [
      ...names.map((name) => [
        `${name}: p50 / p99 ms`,
        ...rows.map((row) => {
          const figure = row.figures[name];
          if (!figure) return "-";
          return `${formatMs(figure.p50Ms)} / ${formatMs(figure.p99Ms)}${figure.failed ? " (errors)" : ""}`;
        }),
      ]),
      [
        "reward grants seeded",
        ...rows.map((row) =>
          row.rewardGrants === undefined ? "-" : row.rewardGrants.toLocaleString("en-US"),
        ),
      ],
      ["restart to /readyz 200", ...rows.map((row) => `${formatMs(row.restartMs / 1000)} s`)],
      [
        "the same with a worker per core (WORKERS=auto, the default)",
        ...rows.map((row) =>
          row.restartDefaultMs === undefined ? "-" : `${formatMs(row.restartDefaultMs / 1000)} s`,
        ),
      ],
      ["goal with workers", ...rows.map((row) => restartGoal(row))],
      ["first start after seeding", ...rows.map((row) => `${formatMs(row.firstStartMs / 1000)} s`)],
      ["server RSS", ...rows.map((row) => mebibytes(row.rssBytes))],
      ["DATA_DIR on disk", ...rows.map((row) => mebibytes(row.diskBytes))],
      ["seeding (store API)", ...rows.map((row) => `${formatMs(row.seedSeconds)} s`)],
    ].filter((cells) => only(cells[0] as string)),
  );
}
