import { join } from "node:path";
import { embeddedDatabaseFile } from "../../src/store/store.js";
import {
  type BenchContext,
  measureWhileAlive,
  type SeededService,
  startSeededService,
} from "../lib/context.js";
import { load } from "../lib/load.js";
import { type LoadResult, median, medianResult } from "../lib/measure.js";
import { selected } from "../lib/options.js";
import { type ReceiverStats, startReceiver, type WebhookReceiver } from "../lib/receiver.js";
import { failureNote, formatMs, formatPercent, formatRate, markdownTable } from "../lib/report.js";
import type { WriteKind } from "../lib/scenarios.js";
import { writeScenario } from "../lib/scenarios.js";
import { benchEnvironment, benchKeys } from "../lib/seed.js";
import { type WriteRunOptions, writeRun } from "./writes.js";

/** Writes must keep this share of their rate with a webhook subscribed. */
export const keptRateGoal = 0.8;
/** The rate of the delivery-delay runs. */
export const delayRunRate = 1000;
/** The delay goal from the last write to the last event received. */
export const delayGoalMs = 1000;

/** A write's peak without and with a webhook endpoint subscribed to every event. */
export interface WebhookPeakRow {
  readonly kind: WriteKind;
  readonly without: LoadResult;
  readonly with: LoadResult;
  /** With over without (median req/s). */
  readonly kept: number;
  readonly runs: { readonly without: LoadResult[]; readonly with: LoadResult[] };
  /**
   * Events the receiver got per second during each run with the webhook:
   * whether the deliveries kept up with the writes, or were left for after
   * (absent in results written before it was measured).
   */
  readonly eventsPerSecond?: number[];
}

/** Identifies at a fixed rate with a webhook: how long after the last write the last event came. */
export interface DelayRun {
  readonly writes: LoadResult;
  /** Events the writes raised (one `customer.created` each) and events received. */
  readonly expected: number;
  readonly received: ReceiverStats;
  /** From the last write answered to the last event received; NaN when none came. */
  readonly delayMs: number;
  /**
   * Bytes the database grew by per write answered, its customer, event and
   * delivery with every index (SQLite's dbstat, pages in use, read through
   * the write-ahead log); absent in results written before it was measured.
   */
  readonly bytesPerWrite?: number;
}

/** The webhook suite's results. */
export interface WebhookResults {
  readonly peaks: WebhookPeakRow[];
  readonly delay: { readonly runs: DelayRun[]; readonly medianDelayMs: number };
}

/** The writes measured with a webhook subscribed. */
export const webhookKinds: readonly WriteKind[] = [
  "identify-new",
  "create-referral",
  "trigger-checkpoint",
];

/** What a service needs to deliver to the bench's receiver on loopback. */
const webhookEnv = { WEBHOOK_ALLOW_PRIVATE: "true" };

/** How long to wait for events once the receiver stops hearing new ones. */
const quietMs = 15_000;

/**
 * Writes over REST with a webhook endpoint subscribed to every event type
 * (WEBHOOK_ALLOW_PRIVATE lets it point at the loopback receiver), against
 * the same writes without one; then identifies at 1,000/s to time delivery.
 */
export async function runWebhooks(context: BenchContext): Promise<WebhookResults> {
  const receiver = await startReceiver();
  try {
    const peaks: WebhookPeakRow[] = [];
    for (const kind of webhookKinds.filter((name) => selected(context.options, name))) {
      // Each repeat runs the write without the webhook, then with it: the
      // machine's pace drifts over minutes, and runs of one variant after
      // all of the other's put that drift in the ratio (2,381 to 3,119
      // req/s between three runs without in one suite).
      const without: LoadResult[] = [];
      const withRuns: LoadResult[] = [];
      const eventsPerSecond: number[] = [];
      for (let repeat = 0; repeat < context.options.repeats; repeat++) {
        const plain = await writeRun(context, kind, "rest", {});
        without.push(plain);
        context.log(
          `webhooks ${kind} without ${repeat + 1}/${context.options.repeats}: ` +
            `${formatRate(plain.rps)} req/s${failureNote(plain)}`,
        );
        await receiver.reset();
        const result = await writeRun(
          context,
          kind,
          "rest",
          withWebhook(receiver, {}, (rate) => eventsPerSecond.push(rate)),
        );
        withRuns.push(result);
        context.log(
          `webhooks ${kind} peak ${repeat + 1}/${context.options.repeats}: ` +
            `${formatRate(result.rps)} req/s${failureNote(result)}`,
        );
      }
      // Later suites compare with these peaks rather than measure them again.
      if (!context.peaks.has(`${kind}/rest`)) context.peaks.set(`${kind}/rest`, without);
      const withOne = medianResult(withRuns);
      const withoutOne = medianResult(without);
      peaks.push({
        kind,
        without: withoutOne,
        with: withOne,
        kept: withOne.rps / withoutOne.rps,
        runs: { without, with: withRuns },
        eventsPerSecond,
      });
    }
    const runs: DelayRun[] = [];
    for (let repeat = 0; repeat < context.options.repeats; repeat++) {
      const run = await delayRun(context, receiver, webhookEnv);
      runs.push(run);
      context.log(
        `webhooks delay ${repeat + 1}/${context.options.repeats}: ${formatMs(run.delayMs)} ms, ` +
          `${run.received.events}/${run.expected} events`,
      );
    }
    return { peaks, delay: { runs, medianDelayMs: median(runs.map((run) => run.delayMs)) } };
  } finally {
    await receiver.stop();
  }
}

/**
 * A write run with the receiver subscribed to every event type, on a
 * service of `env`: tells `eventsPerSecond` how many events the receiver
 * got per second of the measured load (below the writes' rate, deliveries
 * were left for after it).
 */
export function withWebhook(
  receiver: WebhookReceiver,
  env: Record<string, string>,
  eventsPerSecond: (rate: number) => void,
): WriteRunOptions {
  return {
    env: { ...webhookEnv, ...env },
    prepare: (target) => subscribe(target, receiver),
    around: async (_target, measure) => {
      const before = (await receiver.stats()).events;
      const measured = await measure();
      eventsPerSecond(((await receiver.stats()).events - before) / measured.seconds);
      return measured;
    },
  };
}

/** Subscribes the receiver to every event type of the bench environment. */
async function subscribe(target: SeededService, receiver: WebhookReceiver): Promise<void> {
  const response = await fetch(`${target.service.origin}/webhooks`, {
    method: "POST",
    headers: { authorization: benchKeys.secret, "content-type": "application/json" },
    body: JSON.stringify({ url: receiver.url, environment: benchEnvironment }),
  });
  if (response.status !== 201) {
    throw new Error(`creating the webhook answered ${response.status}: ${await response.text()}`);
  }
}

/**
 * New-customer identifies at 1,000/s with the webhook, after a warm-up
 * whose events are waited for; then waits for every event of the measured
 * writes, or until none has come for a while.
 */
async function delayRun(
  context: BenchContext,
  receiver: WebhookReceiver,
  env: Record<string, string>,
): Promise<DelayRun> {
  const { options } = context;
  let alive = true;
  return measureWhileAlive(
    context,
    "webhooks delay",
    () => alive,
    async () => {
      const target = await startSeededService(context, { customers: options.baseCustomers }, env);
      try {
        await subscribe(target, receiver);
        const tag = `delay-${Date.now().toString(36)}`;
        const identifies = (phase: string, seconds: number) =>
          load(
            "rest",
            target.service.origin,
            writeScenario("identify-new", target.seeded, `${tag}${phase}`),
            { seconds, rate: delayRunRate },
            options,
          );
        await receiver.reset();
        if (options.warmupSeconds > 0) {
          const warmup = await identifies("w", options.warmupSeconds);
          // The warm-up's events must not land in the measurement's count.
          await waitForEvents(receiver, warmup.ok);
        }
        await receiver.reset();
        const bytesBefore = await storedBytes(target.dataDir);
        const writes = await identifies("m", options.seconds);
        const lastWriteAt = performance.timeOrigin + performance.now();
        const received = await waitForEvents(receiver, writes.ok);
        // The last attempts are recorded just after their answers came.
        await new Promise((resolve) => setTimeout(resolve, 1000));
        const bytesAfter = await storedBytes(target.dataDir);
        alive = target.service.alive();
        return {
          writes,
          expected: writes.ok,
          received,
          delayMs: received.lastAt > 0 ? Math.max(0, received.lastAt - lastWriteAt) : Number.NaN,
          bytesPerWrite: writes.ok > 0 ? (bytesAfter - bytesBefore) / writes.ok : Number.NaN,
        };
      } finally {
        await target.dispose();
      }
    },
  );
}

/**
 * The bytes of the service's database in use (every table and index,
 * free space inside pages included, the free list not), read by a second
 * connection while the service runs.
 */
async function storedBytes(dataDir: string): Promise<number> {
  const { DatabaseSync } = await import("node:sqlite");
  const db = new DatabaseSync(join(dataDir, embeddedDatabaseFile), { readOnly: true });
  try {
    const row = db.prepare("SELECT sum(pgsize) AS bytes FROM dbstat").get() as { bytes: number };
    return row.bytes;
  } finally {
    db.close();
  }
}

/** Polls the receiver until it has `expected` events, or none came for `quietMs`. */
async function waitForEvents(receiver: WebhookReceiver, expected: number): Promise<ReceiverStats> {
  let stats = await receiver.stats();
  let lastCount = stats.events;
  let lastChange = performance.now();
  while (stats.events < expected && performance.now() - lastChange < quietMs) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    stats = await receiver.stats();
    if (stats.events !== lastCount) {
      lastCount = stats.events;
      lastChange = performance.now();
    }
  }
  return stats;
}

/** The webhook tables in Markdown. */
export function webhookTables(results: WebhookResults): string {
  const peaks = markdownTable(
    [
      "write (REST)",
      "req/s without webhook",
      "req/s with webhook",
      "kept",
      `goal ≥ ${formatPercent(keptRateGoal)}`,
      "events received per s meanwhile",
    ],
    results.peaks.map((row) => [
      row.kind,
      formatRate(row.without.rps),
      formatRate(row.with.rps),
      formatPercent(row.kept),
      row.kept >= keptRateGoal ? "met" : "missed",
      row.eventsPerSecond ? formatRate(median(row.eventsPerSecond)) : "not measured",
    ]),
  );
  const delay = markdownTable(
    [
      "run",
      "asked req/s",
      "achieved req/s",
      "events expected",
      "events received",
      "last write → last event",
      `goal ≤ ${formatMs(delayGoalMs)} ms, all events`,
      "bytes stored per write",
    ],
    results.delay.runs.map((run, index) => [
      String(index + 1),
      formatRate(delayRunRate),
      formatRate(run.writes.rps),
      String(run.expected),
      `${run.received.events}${run.received.duplicates ? ` (+${run.received.duplicates} repeated)` : ""}`,
      `${formatMs(run.delayMs)} ms`,
      run.delayMs <= delayGoalMs && run.received.events >= run.expected ? "met" : "missed",
      run.bytesPerWrite === undefined ? "not measured" : formatRate(run.bytesPerWrite),
    ]),
  );
  const perWrite = results.delay.runs
    .map((run) => run.bytesPerWrite)
    .filter((bytes): bytes is number => bytes !== undefined && Number.isFinite(bytes));
  const storage =
    perWrite.length > 0
      ? ` Median storage: ${formatRate(median(perWrite))} bytes per identify with the webhook ` +
        `subscribed, about ${formatRate((median(perWrite) / 1024 / 1024) * 1_000_000)} MiB per million writes.`
      : "";
  return `${peaks}\n\n${delay}\n\nMedian delay: ${formatMs(results.delay.medianDelayMs)} ms.${storage}`;
}
