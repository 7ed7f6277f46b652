import { mkdtempSync, rmSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DateTime } from "luxon";
import { type BenchContext, measureWhileAlive, stopService } from "../lib/context.js";
import { type LoadResult, median, medianResult } from "../lib/measure.js";
import { timeOneAtATime, timeOneRequest } from "../lib/one-at-a-time.js";
import { type BenchOptions, selected, sizeLabel } from "../lib/options.js";
import {
  diskBytes,
  peakRssOf,
  resetPeakRss,
  rssOf,
  type ServiceProcess,
  type ServiceVariant,
  startService,
} from "../lib/processes.js";
import {
  failureNote,
  formatMs,
  formatPercent,
  formatRate,
  markdownTable,
  protocolLabel,
} from "../lib/report.js";
import type { Protocol, WriteKind } from "../lib/scenarios.js";
import { benchEnvironment, benchKeys, type SeededData, seedStore } from "../lib/seed.js";
import type { HttpRequestSpec } from "../lib/senders.js";
import { writeRun } from "./writes.js";

/** The insights issue's goals. */
export const insightsGoals = {
  /** A year of daily points of a campaign of 1M referrals, p50, on the campaign's calendar. */
  statsP50Ms: 5,
  /** The campaign's leaderboard (top 10), p50. */
  leaderboardP50Ms: 5,
  /** Writes with the counters keep at least this share of their peak rate without. */
  writesKept: 0.85,
} as const;

/**
 * The campaign's time zone: a whole number of hours from UTC (one or two,
 * with summer time), so its own calendar reads its zone-day counters, one
 * per day; another zone's days add up UTC counters (Kolkata is 5:30 ahead:
 * 2 quarter hours, 23 hours and 2 quarter hours a day).
 */
export const campaignTimeZone = "Europe/Paris";
/** The zone the stats are read in a second time, through `timeZone=`. */
export const otherTimeZone = "Asia/Kolkata";
/** The days the referrals spread over, up to now. */
const spreadDays = 365;
/** Referrals each referrer made, on average: 1M referrals, 100k referrers. */
const referralsPerReferrer = 10;

/** One read, timed one request at a time after each start. */
export interface InsightsReadRow {
  /** What `--only` matches: `stats`, `stats-compare`, `stats-other-zone`, `leaderboard`. */
  readonly name: string;
  /** The call as the table shows it. */
  readonly call: string;
  /** The request of the last repeat (its dates are that run's). */
  readonly path: string;
  /** Bytes of the response body. */
  readonly responseBytes: number;
  /** The goal for the p50, where it sets one. */
  readonly goalP50Ms?: number;
  /** The first call of its kind after the service started (median over the starts). */
  readonly firstMs: number;
  /** One request at a time (median of the runs' figures). */
  readonly figure: LoadResult;
  readonly runs: { readonly firstMs: number[]; readonly results: LoadResult[] };
}

/** One export of the campaign's referrals, streamed as CSV over REST. */
export interface ExportRun {
  /** CSV rows received, the header left out. */
  readonly rows: number;
  readonly bytes: number;
  readonly seconds: number;
  readonly rowsPerSecond: number;
  /** The service's resident memory just before the request. */
  readonly rssBeforeBytes: number;
  /** Its peak during the export (`VmHWM` after a reset; else the highest sample). */
  readonly peakRssBytes: number;
  /** The highest resident memory sampled (every 10 ms) over each tenth of the rows, in order. */
  readonly peakRssByTenth: readonly number[];
  /** Its resident memory once the export ended. */
  readonly rssAfterBytes: number;
}

/** The export runs, one per start, and their medians. */
export interface InsightsExport {
  readonly path: string;
  readonly rows: number;
  readonly rowsPerSecond: number;
  readonly megabytesPerSecond: number;
  readonly rssBeforeBytes: number;
  /** The peak over the first tenth of the rows: what memory the export takes before it has gone far. */
  readonly peakRssFirstTenthBytes: number;
  readonly peakRssBytes: number;
  readonly runs: readonly ExportRun[];
}

/** A write's peak with the counters (the deployed service) and without (`without-stats`). */
export interface InsightsWriteRow {
  readonly kind: WriteKind;
  readonly protocol: Protocol;
  readonly with: LoadResult;
  readonly without: LoadResult;
  /** req/s with over req/s without (medians). */
  readonly kept: number;
  readonly runs: { readonly with: LoadResult[]; readonly without: LoadResult[] };
}

/** The store the reads and the export ran on. */
export interface InsightsStore {
  readonly customers: number;
  /** Referrals of the campaign, all of them its own. */
  readonly referrals: number;
  readonly referrers: number;
  readonly spreadDays: number;
  readonly timeZone: string;
  /** Seeding through the store's collections, the counters moved by their watchers. */
  readonly seedSeconds: number;
  /** The first start after seeding. */
  readonly firstStartMs: number;
  readonly diskBytes: number;
}

/** What the insights suite measured. */
export interface InsightsResults {
  /** Absent when `--only` ran no read and no export. */
  readonly store?: InsightsStore;
  readonly reads: readonly InsightsReadRow[];
  readonly export?: InsightsExport;
  readonly writes: readonly InsightsWriteRow[];
}

/** The reads timed on the campaign; `path` as of now. */
interface InsightsRead {
  readonly name: string;
  readonly call: string;
  readonly goalP50Ms?: number;
  readonly path: (campaignId: string, now: DateTime) => string;
}

/** From the day a year before today to tomorrow in `zone`: 366 daily points, today's included. */
function yearOfDays(zone: string, now: DateTime): string {
  const today = now.setZone(zone).startOf("day");
  const from = today.minus({ days: spreadDays }).toISODate();
  const to = today.plus({ days: 1 }).toISODate();
  return `from=${from}&to=${to}&interval=day`;
}

const reads: readonly InsightsRead[] = [
  {
    name: "stats",
    call: `GET /campaigns/{id}/stats, ${spreadDays + 1} days, ${campaignTimeZone} (the campaign's)`,
    goalP50Ms: insightsGoals.statsP50Ms,
    path: (id, now) => `/campaigns/${id}/stats?${yearOfDays(campaignTimeZone, now)}`,
  },
  {
    name: "stats-compare",
    call: "the same, compare=previous_period",
    path: (id, now) =>
      `/campaigns/${id}/stats?${yearOfDays(campaignTimeZone, now)}&compare=previous_period`,
  },
  {
    name: "stats-other-zone",
    call: `the same, timeZone=${otherTimeZone} (UTC counters)`,
    path: (id, now) =>
      `/campaigns/${id}/stats?${yearOfDays(otherTimeZone, now)}&timeZone=${otherTimeZone}`,
  },
  {
    name: "leaderboard",
    call: "GET /campaigns/{id}/leaderboard?limit=10",
    goalP50Ms: insightsGoals.leaderboardP50Ms,
    path: (id) => `/campaigns/${id}/leaderboard?limit=10`,
  },
];

/** The writes the counters move on every call, compared with and without them. */
const writes: readonly WriteKind[] = ["identify-new", "create-referral", "trigger-checkpoint"];
const writeProtocols: readonly Protocol[] = ["rest", "grpc"];
const variants: readonly ServiceVariant[] = ["deployed", "without-stats"];

/**
 * The program counters' goals: a campaign of as many referrals as the
 * largest `--sizes` (1M) spread over a year in Paris time, by a tenth as
 * many referrers; on it, a year of daily stats and the leaderboard one
 * request at a time after each start (the first call timed on its own),
 * and the CSV export of every referral with the service's memory. Then the
 * writes the counters move, each at its peak on the deployed service and on
 * the same build keeping no counters, alternating.
 */
export async function runInsights(context: BenchContext): Promise<InsightsResults> {
  const { options } = context;
  const wantedReads = reads.filter((read) => selected(options, read.name));
  const wantsExport = selected(options, "export");
  const measured =
    wantedReads.length > 0 || wantsExport
      ? await onSeededCampaign(context, wantedReads, wantsExport)
      : { reads: [] };
  return { ...measured, writes: await writeRows(context) };
}

/** Seeds the campaign, times the reads and the export on it, then deletes it. */
async function onSeededCampaign(
  context: BenchContext,
  wantedReads: readonly InsightsRead[],
  wantsExport: boolean,
): Promise<Omit<InsightsResults, "writes">> {
  const { options, log } = context;
  const referrals = insightsReferrals(options);
  const referrers = Math.max(1, Math.round(referrals / referralsPerReferrer));
  const customers = referrals + referrers;
  const label = sizeLabel(referrals);
  const dataDir = mkdtempSync(join(tmpdir(), `referrals-bench-insights-${label}-`));
  try {
    log(
      `insights: seeding ${label} referrals by ${sizeLabel(referrers)} referrers over ` +
        `${spreadDays} days (${campaignTimeZone})`,
    );
    const seedStarted = performance.now();
    let reported = 0;
    const seeded = await seedStore(
      dataDir,
      { customers, referrers, spreadDays, timeZone: campaignTimeZone },
      (inserted) => {
        if (inserted - reported >= customers / 4) {
          reported = inserted;
          const seconds = (performance.now() - seedStarted) / 1000;
          log(`insights: ${inserted.toLocaleString("en-US")} documents, ${seconds.toFixed(0)} s`);
        }
      },
    );
    context.engine ??= seeded.engine;
    const seedSeconds = (performance.now() - seedStarted) / 1000;
    const first = await startService(dataDir);
    await stopService(context, first);
    log(
      `insights: seeded in ${seedSeconds.toFixed(1)} s, first start ${formatMs(first.readyMs)} ms`,
    );
    const store: InsightsStore = {
      customers,
      referrals: seeded.referrals,
      referrers,
      spreadDays,
      timeZone: campaignTimeZone,
      seedSeconds,
      firstStartMs: first.readyMs,
      diskBytes: diskBytes(dataDir),
    };
    const readRows =
      wantedReads.length > 0 ? await timeReads(context, dataDir, seeded, wantedReads) : [];
    const exported = wantsExport ? await timeExports(context, dataDir, seeded) : undefined;
    return { store, reads: readRows, ...(exported ? { export: exported } : {}) };
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/**
 * Per repeat, a new service on the store: every read's first call, in
 * order (the first one's is the process's first call), then every read
 * timed one request at a time.
 */
async function timeReads(
  context: BenchContext,
  dataDir: string,
  seeded: SeededData,
  wantedReads: readonly InsightsRead[],
): Promise<InsightsReadRow[]> {
  const { options, log } = context;
  const runs = new Map<string, { firstMs: number[]; results: LoadResult[] }>();
  const shown = new Map<string, { path: string; responseBytes: number }>();
  for (let repeat = 0; repeat < options.repeats; repeat++) {
    // A start, each read's first call, then each read timed: one unit, run again if the service died.
    let alive = true;
    const run = await measureWhileAlive(
      context,
      "insights reads",
      () => alive,
      async () => {
        const service = await startService(dataDir);
        try {
          const now = DateTime.now();
          const specs = wantedReads.map((read) => ({
            read,
            spec: getSpec(read.path(seeded.baseCampaignId, now)),
          }));
          const firstMs = new Map<string, number>();
          // Every read's first call before any is timed, in order: the
          // first one's is the process's first call.
          for (const { read, spec } of specs) {
            firstMs.set(read.name, await timeOneRequest(service.origin, spec));
            log(
              `insights ${repeat + 1}/${options.repeats} ${read.name}: first call ` +
                `${formatMs(firstMs.get(read.name) as number)} ms`,
            );
          }
          const results = new Map<string, LoadResult>();
          for (const { read, spec } of specs) {
            const result = await timeOneAtATime(service.origin, spec, {
              seconds: options.seconds,
              warmupSeconds: options.warmupSeconds,
            });
            results.set(read.name, result);
            log(
              `insights ${repeat + 1}/${options.repeats} ${read.name}: p50 ` +
                `${formatMs(result.p50Ms)} ms, p99 ${formatMs(result.p99Ms)} ms${failureNote(result)}`,
            );
            shown.set(read.name, {
              path: spec.path(0),
              responseBytes: await responseBytes(service.origin, spec),
            });
          }
          alive = service.alive();
          return { firstMs, results };
        } finally {
          await stopService(context, service);
        }
      },
    );
    for (const read of wantedReads) {
      const entry = runs.get(read.name) ?? { firstMs: [], results: [] };
      entry.firstMs.push(run.firstMs.get(read.name) as number);
      entry.results.push(run.results.get(read.name) as LoadResult);
      runs.set(read.name, entry);
    }
  }
  return wantedReads.map((read) => {
    const entry = runs.get(read.name) ?? { firstMs: [], results: [] };
    const { path, responseBytes } = shown.get(read.name) ?? { path: "", responseBytes: 0 };
    return {
      name: read.name,
      call: read.call,
      path,
      responseBytes,
      ...(read.goalP50Ms === undefined ? {} : { goalP50Ms: read.goalP50Ms }),
      firstMs: median(entry.firstMs),
      figure: medianResult(entry.results),
      runs: entry,
    };
  });
}

/** Per repeat, a new service on the store, and the whole export once. */
async function timeExports(
  context: BenchContext,
  dataDir: string,
  seeded: SeededData,
): Promise<InsightsExport> {
  const { options, log } = context;
  const path = `/referrals/export?campaignId=${seeded.baseCampaignId}&environment=${benchEnvironment}`;
  const runs: ExportRun[] = [];
  for (let repeat = 0; repeat < options.repeats; repeat++) {
    // Each export on a service just started: its memory before is the idle service's.
    let alive = true;
    const run = await measureWhileAlive(
      context,
      "insights export",
      () => alive,
      async () => {
        const service = await startService(dataDir);
        try {
          const result = await exportOnce(service, path, seeded.referrals);
          alive = service.alive();
          return result;
        } finally {
          await stopService(context, service);
        }
      },
    );
    if (run.rows !== seeded.referrals) {
      log(`insights export: ${run.rows} rows, not the ${seeded.referrals} referrals seeded`);
    }
    log(
      `insights ${repeat + 1}/${options.repeats} export: ${formatRate(run.rowsPerSecond)} rows/s, ` +
        `RSS ${mebibytes(run.rssBeforeBytes)} before, peak ${mebibytes(run.peakRssBytes)}`,
    );
    runs.push(run);
  }
  const of = (value: (run: ExportRun) => number) => median(runs.map(value));
  return {
    path,
    rows: of((run) => run.rows),
    rowsPerSecond: of((run) => run.rowsPerSecond),
    megabytesPerSecond: of((run) => run.bytes / 1e6 / run.seconds),
    rssBeforeBytes: of((run) => run.rssBeforeBytes),
    peakRssFirstTenthBytes: of((run) => run.peakRssByTenth[0] ?? 0),
    peakRssBytes: of((run) => run.peakRssBytes),
    runs,
  };
}

/** A GET with the secret key, the same path every time. */
function getSpec(path: string): HttpRequestSpec {
  return { method: "GET", path: () => path, headers: { authorization: benchKeys.secret } };
}

/** The size of one response body (not timed). */
async function responseBytes(origin: string, spec: HttpRequestSpec): Promise<number> {
  const response = await fetch(`${origin}${spec.path(0)}`, { headers: { ...spec.headers } });
  return (await response.arrayBuffer()).byteLength;
}

// Resident memory is sampled this often during an export.
const rssSampleMs = 10;

/**
 * Streams the export once as fast as the client can read it, counting
 * rows (line ends) and bytes, while sampling the service's resident memory
 * by tenths of the rows expected.
 */
async function exportOnce(
  service: ServiceProcess,
  path: string,
  expectedRows: number,
): Promise<ExportRun> {
  const url = new URL(service.origin);
  const rssBeforeBytes = rssOf(service.pid);
  const peakReset = resetPeakRss(service.pid);
  const peakRssByTenth = Array.from({ length: 10 }, () => 0);
  let lines = 0;
  let bytes = 0;
  const sample = () => {
    const tenth = Math.min(
      9,
      Math.floor((Math.max(0, lines - 1) * 10) / Math.max(1, expectedRows)),
    );
    peakRssByTenth[tenth] = Math.max(peakRssByTenth[tenth] as number, rssOf(service.pid));
  };
  const sampler = setInterval(sample, rssSampleMs);
  const started = performance.now();
  try {
    await new Promise<void>((resolve, reject) => {
      const request = httpRequest(
        {
          host: url.hostname,
          port: url.port,
          path,
          headers: { authorization: benchKeys.secret },
        },
        (response) => {
          if (response.statusCode !== 200) {
            response.resume();
            reject(new Error(`GET ${path}: http ${response.statusCode}`));
            return;
          }
          // Every row ends with CRLF, and no seeded field holds a line break.
          response.on("data", (chunk: Buffer) => {
            bytes += chunk.length;
            for (let at = chunk.indexOf(10); at !== -1; at = chunk.indexOf(10, at + 1)) lines++;
          });
          response.on("end", resolve);
          response.on("error", reject);
        },
      );
      request.on("error", reject);
      request.end();
    });
  } finally {
    clearInterval(sampler);
  }
  const seconds = (performance.now() - started) / 1000;
  sample();
  const rows = Math.max(0, lines - 1);
  const sampledPeak = Math.max(...peakRssByTenth);
  return {
    rows,
    bytes,
    seconds,
    rowsPerSecond: rows / seconds,
    rssBeforeBytes,
    peakRssBytes: peakReset ? Math.max(peakRssOf(service.pid), sampledPeak) : sampledPeak,
    peakRssByTenth,
    rssAfterBytes: rssOf(service.pid),
  };
}

/**
 * Each write kind's peak on both protocols, on the deployed service and on
 * the same build keeping no counters, alternating within every repeat (the
 * variant first in one repeat is second in the next), each run on its own
 * freshly seeded store (the writes suite's `writeRun`).
 */
async function writeRows(context: BenchContext): Promise<InsightsWriteRow[]> {
  const { options } = context;
  const rows: InsightsWriteRow[] = [];
  for (const kind of writes.filter((name) => selected(options, name))) {
    for (const protocol of writeProtocols) {
      const runs: Record<ServiceVariant, LoadResult[]> = {
        deployed: [],
        "without-operations": [],
        "without-stats": [],
        "per-write-commit": [],
      };
      for (let repeat = 0; repeat < options.repeats; repeat++) {
        const order = repeat % 2 === 0 ? variants : [...variants].reverse();
        for (const variant of order) {
          const result = await writeRun(context, kind, protocol, { variant });
          runs[variant].push(result);
          // The best rate so far sizes the next runs' pools, so neither variant runs out.
          const key = `${kind}/${protocol}`;
          context.estimates.set(key, Math.max(context.estimates.get(key) ?? 0, result.rps));
          context.log(
            `insights ${repeat + 1}/${options.repeats} ${key} ${variant}: ` +
              `${formatRate(result.rps)} req/s${failureNote(result)}` +
              `${result.exhausted ? " (pool used up)" : ""}`,
          );
        }
      }
      const withCounters = medianResult(runs.deployed);
      const without = medianResult(runs["without-stats"]);
      rows.push({
        kind,
        protocol,
        with: withCounters,
        without,
        kept: withCounters.rps / without.rps,
        runs: { with: runs.deployed, without: runs["without-stats"] },
      });
    }
  }
  return rows;
}

function mebibytes(bytes: number): string {
  return `${Math.round(bytes / 2 ** 20).toLocaleString("en-US")} MiB`;
}

function kibibytes(bytes: number): string {
  return `${Math.round(bytes / 1024).toLocaleString("en-US")} KiB`;
}

/** "p50 ≤ 5 ms met" for a read with a goal, "-" for one without. */
function goalCell(row: InsightsReadRow): string {
  if (row.goalP50Ms === undefined) return "-";
  const met = row.figure.p50Ms <= row.goalP50Ms && row.figure.failed === 0;
  return `p50 ≤ ${row.goalP50Ms} ms ${met ? "met" : "missed"}`;
}

/** The insights tables in Markdown: the reads, the export, and the writes with and without counters. */
export function insightsTables(results: InsightsResults): string {
  const tables: string[] = [];
  const { store } = results;
  if (store && results.reads.length > 0) {
    tables.push(
      markdownTable(
        [
          `read, one at a time: ${sizeLabel(store.referrals)} referrals by ${sizeLabel(store.referrers)} referrers over ${store.spreadDays} days`,
          "first call after start ms",
          "p50 ms",
          "p99 ms",
          "response",
          "goal",
        ],
        results.reads.map((row) => [
          row.call,
          formatMs(row.firstMs),
          formatMs(row.figure.p50Ms),
          `${formatMs(row.figure.p99Ms)}${row.figure.failed > 0 ? " (errors)" : ""}`,
          kibibytes(row.responseBytes),
          goalCell(row),
        ]),
      ),
    );
  }
  const exported = results.export;
  if (store && exported) {
    tables.push(
      markdownTable(
        [
          "GET /referrals/export (CSV over REST)",
          "rows",
          "rows/s",
          "MB/s",
          "service RSS before",
          "peak over the first 10% of rows",
          "peak over all rows",
        ],
        [
          [
            `the campaign's ${sizeLabel(store.referrals)} referrals`,
            exported.rows.toLocaleString("en-US"),
            formatRate(exported.rowsPerSecond),
            exported.megabytesPerSecond.toFixed(1),
            mebibytes(exported.rssBeforeBytes),
            mebibytes(exported.peakRssFirstTenthBytes),
            mebibytes(exported.peakRssBytes),
          ],
        ],
      ),
    );
  }
  if (results.writes.length > 0) {
    tables.push(
      markdownTable(
        [
          "write, peak",
          "protocol",
          "req/s without counters",
          "req/s with",
          "kept",
          `goal ≥ ${formatPercent(insightsGoals.writesKept)}`,
          "service CPU µs/call without",
          "with",
        ],
        results.writes.map((row) => [
          row.kind,
          protocolLabel[row.protocol],
          `${formatRate(row.without.rps)}${row.without.exhausted ? "*" : ""}`,
          `${formatRate(row.with.rps)}${row.with.exhausted ? "*" : ""}`,
          `${(row.kept * 100).toFixed(1)}%`,
          row.kept >= insightsGoals.writesKept ? "met" : "missed",
          formatMicros(row.without.serviceCpuUs),
          formatMicros(row.with.serviceCpuUs),
        ]),
      ),
    );
  }
  if (store) {
    tables.push(
      `The campaign: ${store.referrals.toLocaleString("en-US")} referrals (a third accepted) ` +
        `by ${store.referrers.toLocaleString("en-US")} referrers, ` +
        `${store.customers.toLocaleString("en-US")} customers, created evenly over the last ` +
        `${store.spreadDays} days in ${store.timeZone}; seeded with their counters in ` +
        `${formatMs(store.seedSeconds)} s, ${mebibytes(store.diskBytes)} on disk.`,
    );
  }
  return tables.join("\n\n");
}

function formatMicros(value: number | undefined): string {
  return value === undefined ? "-" : value.toFixed(1);
}

/** The referrals of the campaign the suite seeds: the largest of `--sizes`. */
export function insightsReferrals(options: BenchOptions): number {
  return Math.max(...options.sizes);
}
