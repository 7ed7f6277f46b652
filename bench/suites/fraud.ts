import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ruleCatalogue } from "../../src/domain/fraud-rules.js";
import { type BenchContext, measureWhileAlive, stopService } from "../lib/context.js";
import type { EvidenceLists } from "../lib/evidence.js";
import { median } from "../lib/measure.js";
import { sizeLabel } from "../lib/options.js";
import {
  diskBytes,
  peakRssOf,
  resetPeakRss,
  rssOf,
  type ServiceProcess,
  startService,
} from "../lib/processes.js";
import { formatMs, markdownTable } from "../lib/report.js";
import { benchKeys, seedStore } from "../lib/seed.js";

/** The fraud issue's goal. */
export const fraudGoals = {
  /** A backtest over 100,000 referrals answers within this, on a 2-core machine. */
  backtestSeconds: 5,
} as const;

/** The candidate policy the backtest replays, as the REST body's `policy` takes it. */
export interface BacktestPolicy {
  readonly rules: readonly { readonly type: string }[];
  readonly allow: { readonly emails: readonly string[] };
  readonly deny: { readonly domains: readonly string[] };
}

/** Every rule of the catalogue at its defaults, a deny list domain and an allow list email. */
export function backtestPolicy(lists: EvidenceLists): BacktestPolicy {
  return {
    rules: Object.keys(ruleCatalogue).map((type) => ({ type })),
    allow: { emails: [lists.allowEmail] },
    deny: { domains: [lists.denyDomain] },
  };
}

/** One backtest over REST, read to its end. */
export interface BacktestRun {
  /** From sending the request to the message with the result. */
  readonly seconds: number;
  /**
   * From sending the request to the first message (the progress after the
   * first 2,000 referrals judged): near `seconds` when the progress did not
   * reach the client while the backtest ran.
   */
  readonly firstMessageSeconds: number;
  /** Messages received, the result's included. */
  readonly messages: number;
  /** CPU time the service used meanwhile (user and system). */
  readonly serviceCpuSeconds: number;
}

/** What a backtest answered (the counts; the sample referral ids left out). */
export interface BacktestCounts {
  readonly referrals: number;
  readonly withoutEvidence: number;
  readonly would: {
    readonly note: number;
    readonly flag: number;
    readonly holdReward: number;
    readonly reject: number;
  };
  readonly newlyFlagged: number;
  readonly noLongerFlagged: number;
  readonly allowed: number;
  /** Per rule of the candidate: hits, and new and lost ones against the stored verdicts. */
  readonly rules: readonly {
    readonly type: string;
    readonly hits: number;
    readonly newHits: number;
    readonly lostHits: number;
  }[];
}

/** What the fraud suite measured. */
export interface FraudResults {
  /** Referrals of the campaign, every one with evidence. */
  readonly referrals: number;
  readonly referrers: number;
  readonly spreadDays: number;
  /** Seeding through the store's collections. */
  readonly seedSeconds: number;
  readonly diskBytes: number;
  /** From process start to `/readyz` 200 (the first start after seeding). */
  readonly firstStartMs: number;
  readonly policy: BacktestPolicy;
  /** The first backtest after the start, not counted in the median. */
  readonly warmup: BacktestRun;
  /** Median seconds of the timed runs. */
  readonly seconds: number;
  readonly goalSeconds: number;
  readonly runs: readonly BacktestRun[];
  /** The answer (the same in every run). */
  readonly result: BacktestCounts;
  /** The service's resident memory after the start, before any backtest. */
  readonly rssIdleBytes: number;
  /** Its peak over the backtests (`VmHWM` after a reset, or the highest sample). */
  readonly peakRssBytes: number;
}

/**
 * The fraud backtest's goal: a campaign of as many referrals as
 * `fraudReferrals` (100k unless `--sizes` says otherwise), each with
 * varied evidence (bench/lib/evidence.ts), written straight into a new
 * store; the service started on it once; a backtest of every catalogue
 * rule with a deny and an allow list, over REST, read to its last message:
 * once unrecorded, then `repeats` times timed.
 */
export async function runFraud(context: BenchContext): Promise<FraudResults> {
  const { options, log } = context;
  const referrals = options.fraudReferrals;
  const label = sizeLabel(referrals);
  const dataDir = mkdtempSync(join(tmpdir(), `referrals-bench-fraud-${label}-`));
  try {
    log(`fraud: seeding ${label} referrals with evidence`);
    const seedStarted = performance.now();
    let reported = 0;
    const seeded = await seedStore(
      dataDir,
      { customers: 0, evidenceReferrals: referrals },
      (inserted) => {
        if (inserted - reported >= referrals / 2) {
          reported = inserted;
          const seconds = (performance.now() - seedStarted) / 1000;
          log(`fraud: ${inserted.toLocaleString("en-US")} documents, ${seconds.toFixed(0)} s`);
        }
      },
    );
    context.engine ??= seeded.engine;
    const seedSeconds = (performance.now() - seedStarted) / 1000;
    const evidence = seeded.evidence;
    if (!evidence) throw new Error("fraud: the store was seeded without evidence");
    log(`fraud: seeded in ${seedSeconds.toFixed(1)} s`);
    const policy = backtestPolicy(evidence.lists);
    let alive = true;
    const measured = await measureWhileAlive(
      context,
      "fraud backtest",
      () => alive,
      async () => {
        const service = await startService(dataDir);
        try {
          const rssIdleBytes = service.rssBytes();
          const peakReset = resetPeakRss(service.pid);
          let sampledPeak = rssIdleBytes;
          const sampler = setInterval(() => {
            sampledPeak = Math.max(sampledPeak, rssOf(service.pid));
          }, rssSampleMs);
          try {
            const backtest = () => backtestOnce(service, evidence.campaignId, policy, referrals);
            const warmup = await backtest();
            log(
              `fraud warm-up: ${formatMs(warmup.run.seconds)} s, ` +
                `first message ${formatMs(warmup.run.firstMessageSeconds)} s`,
            );
            const runs: BacktestRun[] = [];
            let result = warmup.result;
            for (let repeat = 0; repeat < options.repeats; repeat++) {
              const timed = await backtest();
              runs.push(timed.run);
              result = timed.result;
              log(
                `fraud ${repeat + 1}/${options.repeats}: ${formatMs(timed.run.seconds)} s ` +
                  `(first message ${formatMs(timed.run.firstMessageSeconds)} s, service CPU ` +
                  `${formatMs(timed.run.serviceCpuSeconds)} s)`,
              );
            }
            const peakRssBytes = Math.max(
              sampledPeak,
              rssOf(service.pid),
              peakReset ? peakRssOf(service.pid) : 0,
            );
            alive = service.alive();
            return {
              readyMs: service.readyMs,
              warmup: warmup.run,
              runs,
              result,
              rssIdleBytes,
              peakRssBytes,
            };
          } finally {
            clearInterval(sampler);
          }
        } finally {
          await stopService(context, service);
        }
      },
    );
    return {
      referrals: evidence.referrals,
      referrers: evidence.referrers,
      spreadDays: evidence.spreadDays,
      seedSeconds,
      diskBytes: diskBytes(dataDir),
      firstStartMs: measured.readyMs,
      policy,
      warmup: measured.warmup,
      seconds: median(measured.runs.map((run) => run.seconds)),
      goalSeconds: fraudGoals.backtestSeconds,
      runs: measured.runs,
      result: measured.result,
      rssIdleBytes: measured.rssIdleBytes,
      peakRssBytes: measured.peakRssBytes,
    };
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}

// Resident memory is sampled this often during the backtests.
const rssSampleMs = 10;

/**
 * One backtest of `policy` over the campaign, `POST
 * /campaigns/{id}/fraud-policy/test` with the secret key, its
 * Server-Sent Events read to the end; throws unless the result counts
 * every referral seeded, each with evidence.
 */
async function backtestOnce(
  service: ServiceProcess,
  campaignId: string,
  policy: BacktestPolicy,
  referrals: number,
): Promise<{ run: BacktestRun; result: BacktestCounts }> {
  const path = `/campaigns/${campaignId}/fraud-policy/test`;
  const cpuBefore = service.cpuSeconds();
  const started = performance.now();
  const response = await fetch(`${service.origin}${path}`, {
    method: "POST",
    headers: {
      authorization: benchKeys.secret,
      "content-type": "application/json",
      accept: "text/event-stream",
    },
    body: JSON.stringify({ policy }),
  });
  if (response.status !== 200 || !response.body) {
    throw new Error(`POST ${path}: http ${response.status}: ${await response.text()}`);
  }
  let firstAt: number | undefined;
  let resultAt: number | undefined;
  let result: BacktestCounts | undefined;
  let messages = 0;
  let buffer = "";
  const decoder = new TextDecoder();
  const take = (event: string) => {
    const lines = event.split("\n");
    const data = lines.find((line) => line.startsWith("data: "))?.slice("data: ".length);
    if (data === undefined) return; // a keep-alive comment
    if (lines.includes("event: error")) throw new Error(`POST ${path}: ${data}`);
    const now = performance.now();
    messages += 1;
    firstAt ??= now;
    const message = JSON.parse(data) as { scanned?: number; result?: BacktestCounts };
    if (message.result) {
      resultAt = now;
      result = message.result;
    }
  };
  for await (const chunk of response.body) {
    buffer += decoder.decode(chunk as Uint8Array, { stream: true });
    for (let end = buffer.indexOf("\n\n"); end >= 0; end = buffer.indexOf("\n\n")) {
      take(buffer.slice(0, end));
      buffer = buffer.slice(end + 2);
    }
  }
  if (!result || resultAt === undefined || firstAt === undefined) {
    throw new Error(`POST ${path}: the stream ended without a result`);
  }
  // Omitted fields are zero in the REST JSON of a proto message.
  const counts = countsOf(result);
  if (counts.referrals !== referrals || counts.withoutEvidence !== 0) {
    throw new Error(
      `POST ${path}: replayed ${counts.referrals} referrals (${counts.withoutEvidence} without ` +
        `evidence), not the ${referrals} seeded with evidence`,
    );
  }
  return {
    run: {
      seconds: (resultAt - started) / 1000,
      firstMessageSeconds: (firstAt - started) / 1000,
      messages,
      serviceCpuSeconds: service.cpuSeconds() - cpuBefore,
    },
    result: counts,
  };
}

/** The counts of a result as REST sends it (zero counts left out), every field set. */
function countsOf(result: Partial<BacktestCounts>): BacktestCounts {
  const would: Partial<BacktestCounts["would"]> = result.would ?? {};
  return {
    referrals: result.referrals ?? 0,
    withoutEvidence: result.withoutEvidence ?? 0,
    would: {
      note: would.note ?? 0,
      flag: would.flag ?? 0,
      holdReward: would.holdReward ?? 0,
      reject: would.reject ?? 0,
    },
    newlyFlagged: result.newlyFlagged ?? 0,
    noLongerFlagged: result.noLongerFlagged ?? 0,
    allowed: result.allowed ?? 0,
    rules: (result.rules ?? []).map((rule: Partial<BacktestCounts["rules"][number]>) => ({
      type: rule.type ?? "",
      hits: rule.hits ?? 0,
      newHits: rule.newHits ?? 0,
      lostHits: rule.lostHits ?? 0,
    })),
  };
}

function mebibytes(bytes: number): string {
  return `${Math.round(bytes / 2 ** 20).toLocaleString("en-US")} MiB`;
}

function seconds(value: number): string {
  return value.toFixed(2);
}

const count = (value: number) => value.toLocaleString("en-US");

/** The backtest's time against the goal, in Markdown (docs/fraud.md shows it too). */
export function backtestTable(results: FraudResults): string {
  const met = results.seconds <= results.goalSeconds;
  return markdownTable(
    [
      "POST /campaigns/{id}/fraud-policy/test (REST, SSE)",
      "referrals",
      "median s",
      "runs s",
      "first message s",
      "first call s",
      "service RSS idle / peak",
      `goal ≤ ${results.goalSeconds} s`,
    ],
    [
      [
        `every catalogue rule (${results.policy.rules.length}), a deny and an allow list`,
        count(results.result.referrals),
        seconds(results.seconds),
        results.runs.map((run) => seconds(run.seconds)).join(", "),
        seconds(median(results.runs.map((run) => run.firstMessageSeconds))),
        seconds(results.warmup.seconds),
        `${mebibytes(results.rssIdleBytes)} / ${mebibytes(results.peakRssBytes)}`,
        met ? "met" : "missed",
      ],
    ],
  );
}

/** The fraud tables in Markdown: the backtest's time against the goal, and what it answered. */
export function fraudTables(results: FraudResults): string {
  const { result } = results;
  const answer = markdownTable(
    [
      "would: note",
      "flag",
      "hold_reward",
      "reject",
      "newly flagged",
      "no longer flagged",
      "allowed",
    ],
    [
      [
        count(result.would.note),
        count(result.would.flag),
        count(result.would.holdReward),
        count(result.would.reject),
        count(result.newlyFlagged),
        count(result.noLongerFlagged),
        count(result.allowed),
      ],
    ],
  );
  const hits = result.rules.map((rule) => `${rule.type} ${count(rule.hits)}`).join(", ");
  return [
    backtestTable(results),
    answer,
    `Hits per rule: ${hits}. The campaign: ${count(results.referrals)} referrals by ` +
      `${count(results.referrers)} referrers over ${results.spreadDays} days, each with evidence ` +
      `(bench/lib/evidence.ts); seeded in ${formatMs(results.seedSeconds)} s, ` +
      `${mebibytes(results.diskBytes)} on disk.`,
  ].join("\n\n");
}
