import { botReasonOf, knownChannels, landingUrl } from "../../src/domain/links.js";
import { demoCampaign } from "../../src/services/provisioning.js";
import { autocannonLoad } from "../lib/autocannon-load.js";
import { type LinkCeilingProcess, startLinkCeiling } from "../lib/ceilings.js";
import {
  type BenchContext,
  diesWithin,
  measureWhileAlive,
  startSeededService,
} from "../lib/context.js";
import { drive } from "../lib/drive.js";
import {
  type LoadResult,
  median,
  medianResult,
  withGeneratorCpu,
  withServiceCpu,
} from "../lib/measure.js";
import type { BenchOptions } from "../lib/options.js";
import { generatorCpuSeconds } from "../lib/processes.js";
import {
  failureNote,
  formatMs,
  formatPercent,
  formatRate,
  markdownTable,
  resultCells,
} from "../lib/report.js";
import { benchEnvironment, benchKeys, referralCodeOf } from "../lib/seed.js";
import { type HttpRequestSpec, http1Sender } from "../lib/senders.js";

/** The share links issue's goals for `GET /r/{code}`, on two cores with every click counted. */
export const linkGoals = {
  /** Redirects a second at the peak, in the default configuration. */
  peakRps: 5000,
  /** p99 at half that configuration's median peak, open loop. */
  halfRateP99Ms: 10,
} as const;

/** The service configurations the suite measures. */
export type LinkConfigurationName = "default" | "workers-1";

const configurations: readonly {
  readonly name: LinkConfigurationName;
  readonly label: string;
  readonly env: Readonly<Record<string, string>>;
}[] = [
  // The bench starts services with WORKERS=1 unless told otherwise; the
  // default is a process per core.
  { name: "default", label: "default (WORKERS=auto)", env: { WORKERS: "auto" } },
  { name: "workers-1", label: "WORKERS=1", env: { WORKERS: "1" } },
];

/**
 * What every service of the suite runs with: the generator on loopback is
 * the proxy that names each visitor's address in X-Forwarded-For, and the
 * per-address limit is lifted (every visitor has its own address anyway,
 * but a limit left on would still be counted and announced on each call).
 */
const linkServiceEnv: Readonly<Record<string, string>> = {
  TRUSTED_PROXIES: "127.0.0.1",
  RATE_LIMIT_LINKS: "off",
};

/**
 * Browsers of people following a link, phones first (links are mostly
 * shared to phones). Every one is checked against the service's own bot
 * detection before a run: a string it took for a bot would be a preview
 * page, not a redirect, and no click.
 */
export const linkUserAgents: readonly string[] = [
  "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1",
  "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1",
  "Mozilla/5.0 (iPhone; CPU iPhone OS 16_7_10 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/16.6 Mobile/15E148 Safari/604.1",
  "Mozilla/5.0 (iPhone; CPU iPhone OS 17_6 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) CriOS/129.0.6668.69 Mobile/15E148 Safari/604.1",
  "Mozilla/5.0 (iPhone; CPU iPhone OS 17_6 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) FxiOS/131.0 Mobile/15E148 Safari/605.1.15",
  "Mozilla/5.0 (iPad; CPU OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1",
  "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0.0.0 Mobile Safari/537.36",
  "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/129.0.6668.100 Mobile Safari/537.36",
  "Mozilla/5.0 (Linux; Android 14; SAMSUNG SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) SamsungBrowser/26.0 Chrome/122.0.0.0 Mobile Safari/537.36",
  "Mozilla/5.0 (Linux; Android 13; SM-A536B) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/128.0.6613.146 Mobile Safari/537.36",
  "Mozilla/5.0 (Android 14; Mobile; rv:131.0) Gecko/131.0 Firefox/131.0",
  "Mozilla/5.0 (Linux; Android 13; 2201117TG) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/127.0.6533.103 Mobile Safari/537.36",
  "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0.0.0 Safari/537.36",
  "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0.0.0 Safari/537.36 Edg/130.0.0.0",
  "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:131.0) Gecko/20100101 Firefox/131.0",
  "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/129.0.0.0 Safari/537.36",
  "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.6 Safari/605.1.15",
  "Mozilla/5.0 (Macintosh; Intel Mac OS X 14.7; rv:131.0) Gecko/20100101 Firefox/131.0",
  "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/129.0.0.0 Safari/537.36",
  "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/129.0.0.0 Safari/537.36 OPR/114.0.0.0",
];

// Visitors' addresses: 100.64.0.0/10, where carriers put phones behind their
// NAT. Request n gets address n times an odd stride modulo 2^22, so the
// first 4,194,304 requests to a service each come from an address of their
// own, and consecutive ones from different /24 networks.
const addressBits = 22;
const addressStride = 0x9e3779;

/** The client address of request `n`, as the proxy names it in X-Forwarded-For. */
export function visitorAddress(n: number): string {
  const host = Math.imul(n, addressStride) & ((1 << addressBits) - 1);
  return `100.${64 + (host >>> 16)}.${(host >>> 8) & 255}.${host & 255}`;
}

/**
 * The clicks of one service run: what the generator sent and received, and
 * what the campaign's stats counted once the run was over.
 */
export interface ClickCounts {
  /**
   * Requests sent (the probe, the warm-up and the measured run): every one
   * a new visitor. A closed-loop run's last few were still in flight when
   * the generator stopped, and no answer to them was read; the service
   * may still have counted them.
   */
  readonly sent: number;
  /** 302 answers read. */
  readonly redirects: number;
  /** Other answers and socket errors. */
  readonly failed: number;
  /** `clicks` in the campaign's stats (`GET /campaigns/{id}/stats`) after the run. */
  readonly clicks: number;
  /** `visitors` in the same totals: clicks that were their visitor's first. */
  readonly visitors: number;
}

/**
 * Whether a run counted every click: at least every redirect answered, at
 * most every request sent (those in flight at the stop may count or not),
 * and every click a new visitor.
 */
export function everyClickCounted(counts: ClickCounts): boolean {
  return (
    counts.redirects <= counts.clicks &&
    counts.clicks <= counts.sent &&
    counts.visitors === counts.clicks
  );
}

/** One run on its own freshly seeded service. */
export interface LinkRun {
  /** The measured run (the warm-up's figures are in `counts` only). */
  readonly load: LoadResult;
  readonly counts: ClickCounts;
}

/** One configuration's peak, closed loop. */
export interface LinkPeakRow {
  readonly configuration: LinkConfigurationName;
  readonly env: Readonly<Record<string, string>>;
  /** The median of the runs. */
  readonly peak: LoadResult;
  /** Median req/s over the ceiling's median req/s. */
  readonly ofCeiling: number;
  readonly runs: readonly LinkRun[];
}

/** What the links suite measured. */
export interface LinksResults {
  /** Seeded customers whose codes the requests take turns over. */
  readonly customers: number;
  readonly channels: readonly string[];
  readonly userAgents: number;
  readonly goals: typeof linkGoals;
  readonly peaks: readonly LinkPeakRow[];
  /** The bare Fastify route answering the same redirect, in one process. */
  readonly ceiling: { readonly peak: LoadResult; readonly runs: readonly LoadResult[] };
  /** The default configuration at half its median peak, open loop. */
  readonly half: {
    readonly configuration: LinkConfigurationName;
    readonly rate: number;
    readonly result: LoadResult;
    readonly runs: readonly LinkRun[];
  };
}

/**
 * `GET /r/{code}` as people follow share links: every request a new
 * visitor (its own address through X-Forwarded-For, a browser's
 * User-Agent) on a seeded customer's code, naming the campaign and a
 * channel, so every one is a click the service records. The default
 * configuration (WORKERS=auto) and WORKERS=1, each run on its own freshly
 * seeded service, against a bare Fastify route answering the same redirect
 * in the same repeat, closed loop; after each service run the campaign's
 * stats are read and compared with the redirects answered. Then the default
 * configuration, open loop at half its median peak, for p99.
 */
export async function runLinks(context: BenchContext): Promise<LinksResults> {
  const { options, log } = context;
  for (const userAgent of linkUserAgents) {
    if (botReasonOf(userAgent) !== null) {
      throw new Error(`links: the service takes this User-Agent for a bot: ${userAgent}`);
    }
  }
  const landingPage = demoCampaign(benchEnvironment).refereeLandingPageUrl;
  if (!landingPage) throw new Error("links: the demo campaign has no refereeLandingPageUrl");
  const serviceRuns = new Map<LinkConfigurationName, LinkRun[]>(
    configurations.map(({ name }) => [name, []]),
  );
  const ceilingRuns: LoadResult[] = [];
  const targets = [...configurations.map(({ name }) => name), "ceiling" as const];
  for (let repeat = 0; repeat < options.repeats; repeat++) {
    // The other way round every other repeat, so drift falls on every target.
    const order = repeat % 2 === 0 ? targets : [...targets].reverse();
    for (const target of order) {
      const progress = `links ${repeat + 1}/${options.repeats}`;
      if (target === "ceiling") {
        const result = await ceilingRun(context, landingPage);
        ceilingRuns.push(result);
        log(`${progress} ceiling: ${formatRate(result.rps)} req/s${failureNote(result)}`);
        continue;
      }
      const configuration = configurationOf(target);
      const run = await serviceRun(context, configuration.env, landingPage);
      serviceRuns.get(target)?.push(run);
      log(
        `${progress} ${configuration.label}: ${formatRate(run.load.rps)} req/s` +
          `${failureNote(run.load)}; ${countsNote(run.counts)}`,
      );
    }
  }
  const ceiling = medianResult(ceilingRuns);
  const peaks = configurations.map(({ name, env }): LinkPeakRow => {
    const runs = serviceRuns.get(name) ?? [];
    const peak = medianResult(runs.map((run) => run.load));
    return {
      configuration: name,
      env: { ...linkServiceEnv, ...env },
      peak,
      ofCeiling: peak.rps / ceiling.rps,
      runs,
    };
  });

  const base = configurationOf("default");
  const rate = Math.max(
    1,
    Math.round(median((serviceRuns.get("default") ?? []).map((run) => run.load.rps)) / 2),
  );
  const halfRuns: LinkRun[] = [];
  for (let repeat = 0; repeat < options.repeats; repeat++) {
    const run = await serviceRun(context, base.env, landingPage, rate);
    halfRuns.push(run);
    log(
      `links ${base.label} at ${formatRate(rate)}/s ${repeat + 1}/${options.repeats}: ` +
        `p99 ${formatMs(run.load.p99Ms)} ms${failureNote(run.load)}; ${countsNote(run.counts)}`,
    );
  }
  return {
    customers: options.baseCustomers,
    channels: [...knownChannels],
    userAgents: linkUserAgents.length,
    goals: linkGoals,
    peaks,
    ceiling: { peak: ceiling, runs: ceilingRuns },
    half: {
      configuration: base.name,
      rate,
      result: medianResult(halfRuns.map((run) => run.load)),
      runs: halfRuns,
    },
  };
}

function configurationOf(name: LinkConfigurationName): (typeof configurations)[number] {
  const found = configurations.find((configuration) => configuration.name === name);
  if (!found) throw new Error(`links: no configuration ${name}`);
  return found;
}

/** The requests of one target, numbered on from one load to the next. */
interface LinkTraffic {
  /** The next requests, from the first one not sent yet. */
  spec(): HttpRequestSpec;
  /** Requests built so far, all loads together. */
  sent(): number;
}

/**
 * Request n: the code of seeded customer n (taking turns over them), the
 * campaign named, a channel and a browser by turns, from an address of
 * its own. Numbers go on from one load to the next (the warm-up, then the
 * measured run), so no request of a service's life repeats an earlier
 * visitor's click.
 */
function linkTraffic(campaignId: string, customers: number): LinkTraffic {
  const codes = Array.from({ length: Math.max(1, customers) }, (_, i) => referralCodeOf(i));
  let built = 0;
  const number = (start: number, i: number) => {
    const n = start + i;
    if (n >= built) built = n + 1;
    return n;
  };
  return {
    spec() {
      const start = built;
      return {
        method: "GET",
        path: (i) => {
          const n = number(start, i);
          const code = codes[n % codes.length] as string;
          const channel = knownChannels[n % knownChannels.length] as string;
          return `/r/${code}?c=${campaignId}&ch=${channel}`;
        },
        headers: {},
        headersOf: (i) => {
          const n = number(start, i);
          return {
            "user-agent": linkUserAgents[n % linkUserAgents.length] as string,
            "x-forwarded-for": visitorAddress(n),
          };
        },
        okStatus: 302,
      };
    },
    sent: () => built,
  };
}

/**
 * One run on a new service on a freshly seeded store: a probe checking the
 * redirect, the warm-up, the measured run (closed loop, or open loop at
 * `rate`), then the campaign's click totals.
 */
async function serviceRun(
  context: BenchContext,
  env: Readonly<Record<string, string>>,
  landingPage: string,
  rate?: number,
): Promise<LinkRun> {
  const { options } = context;
  // A service lost mid-run is measured again on a new store: its counts are spent.
  let alive = true;
  return measureWhileAlive(
    context,
    `links WORKERS=${env.WORKERS}`,
    () => alive,
    async () => {
      const target = await startSeededService(
        context,
        { customers: options.baseCustomers },
        { ...linkServiceEnv, ...env },
      );
      try {
        const { origin } = target.service;
        const campaignId = target.seeded.defaultCampaignId;
        const traffic = linkTraffic(campaignId, target.seeded.customers);
        await checkRedirect(origin, traffic.spec(), landingPage, "the service");
        let redirects = 1;
        let failed = 0;
        if (options.warmupSeconds > 0) {
          const warmup = await linkLoad(
            origin,
            traffic.spec(),
            { seconds: options.warmupSeconds, rate },
            options,
          );
          redirects += warmup.ok;
          failed += warmup.failed;
        }
        const load = await withServiceCpu(
          () => target.service.cpuSeconds(),
          () =>
            withGeneratorCpu(generatorCpuSeconds, () =>
              linkLoad(origin, traffic.spec(), { seconds: options.seconds, rate }, options),
            ),
        );
        redirects += load.ok;
        failed += load.failed;
        const totals = await settledClickTotals(origin, campaignId);
        alive = target.service.alive();
        return { load, counts: { sent: traffic.sent(), redirects, failed, ...totals } };
      } catch (error) {
        // A generator fails when the service it loads is gone (or going).
        alive = !(await diesWithin(() => target.service.alive()));
        throw error;
      } finally {
        await target.dispose();
      }
    },
  );
}

/** The ceiling on a new process: the same probe, warm-up and measured run as a service's. */
async function ceilingRun(context: BenchContext, landingPage: string): Promise<LoadResult> {
  const { options } = context;
  let ceiling: LinkCeilingProcess | undefined;
  try {
    return await measureWhileAlive(
      context,
      "links ceiling",
      () => ceiling?.alive() ?? false,
      async () => {
        await ceiling?.stop();
        ceiling = await startLinkCeiling({ landingPage });
        const { origin } = ceiling;
        // Any campaign id: the ceiling reads none, and its length is the service's.
        const traffic = linkTraffic(`cmp_${"0".repeat(25)}`, options.baseCustomers);
        await checkRedirect(origin, traffic.spec(), landingPage, "the ceiling");
        if (options.warmupSeconds > 0) {
          await linkLoad(origin, traffic.spec(), { seconds: options.warmupSeconds }, options);
        }
        return withGeneratorCpu(generatorCpuSeconds, () =>
          linkLoad(origin, traffic.spec(), { seconds: options.seconds }, options),
        );
      },
    );
  } finally {
    await ceiling?.stop();
  }
}

/**
 * Closed loop with autocannon (`--concurrency` connections), or open loop
 * at `rate` with the bench's own generator (its connections opened first),
 * as every suite loads HTTP/1.1.
 */
async function linkLoad(
  origin: string,
  spec: HttpRequestSpec,
  shape: { seconds: number; rate?: number | undefined },
  options: BenchOptions,
): Promise<LoadResult> {
  if (shape.rate === undefined) {
    return autocannonLoad(origin, spec, {
      connections: options.concurrency,
      seconds: shape.seconds,
    });
  }
  const sender = await http1Sender(origin, spec, options.concurrency);
  try {
    return await drive(sender.send, { seconds: shape.seconds, rate: shape.rate });
  } finally {
    sender.close();
  }
}

// A click id as the service makes them (src/domain/ids.ts): `clk_`, the time
// in 9 base-36 digits, 16 hex digits.
const clickIdShape = /^clk_[0-9a-z]{9}[0-9a-f]{16}$/;

/**
 * Sends the spec's first request and checks that it is answered as a
 * person's click is: 302 to the landing page with the code and a click id
 * of the service's shape, not to be cached. A run of previews, errors or
 * redirects of another shape would measure something else.
 */
async function checkRedirect(
  origin: string,
  spec: HttpRequestSpec,
  landingPage: string,
  what: string,
): Promise<void> {
  const path = spec.path(0);
  const response = await fetch(`${origin}${path}`, {
    headers: { ...spec.headers, ...spec.headersOf?.(0) },
    redirect: "manual",
  });
  await response.arrayBuffer();
  const location = response.headers.get("location") ?? "";
  const code = /^\/r\/([^?]+)/.exec(path)?.[1] ?? "";
  const expected = `${landingUrl(landingPage, code, null)}&rclk=`;
  if (
    response.status !== 302 ||
    !location.startsWith(expected) ||
    !clickIdShape.test(location.slice(expected.length)) ||
    response.headers.get("cache-control") !== "no-store"
  ) {
    throw new Error(
      `links: ${what} answered ${path} with ${response.status}, location ${JSON.stringify(location)}, ` +
        `cache-control ${response.headers.get("cache-control")}; expected 302 to ${expected}{clickId}, no-store`,
    );
  }
}

/**
 * The campaign's click totals once they stop moving: the requests that
 * were in flight when a closed-loop run stopped may still be counted after
 * the generator has gone.
 */
async function settledClickTotals(
  origin: string,
  campaignId: string,
): Promise<{ clicks: number; visitors: number }> {
  let last = await clickTotals(origin, campaignId);
  for (let attempt = 0; attempt < 20; attempt++) {
    await new Promise((resolve) => setTimeout(resolve, 250));
    const now = await clickTotals(origin, campaignId);
    if (now.clicks === last.clicks && now.visitors === last.visitors) return now;
    last = now;
  }
  return last;
}

/** `clicks` and `visitors` of the campaign's stats (its default period, which holds today). */
async function clickTotals(
  origin: string,
  campaignId: string,
): Promise<{ clicks: number; visitors: number }> {
  const response = await fetch(`${origin}/campaigns/${campaignId}/stats`, {
    headers: { authorization: benchKeys.secret },
  });
  const text = await response.text();
  if (response.status !== 200) {
    throw new Error(
      `links: the campaign's stats answered ${response.status}: ${text.slice(0, 300)}`,
    );
  }
  // int64 counters may come as JSON strings.
  const totals = (
    JSON.parse(text) as { report?: { totals?: { clicks?: unknown; visitors?: unknown } } }
  ).report?.totals;
  const clicks = Number(totals?.clicks ?? 0);
  const visitors = Number(totals?.visitors ?? 0);
  if (!Number.isFinite(clicks) || !Number.isFinite(visitors)) {
    throw new Error(`links: the campaign's stats hold no click totals: ${text.slice(0, 300)}`);
  }
  return { clicks, visitors };
}

/**
 * "clicks counted 12,372 / redirects answered 12,340 (sent 12,372, visitors
 * 12,372)" for the log, and a warning when a click went uncounted.
 */
function countsNote(counts: ClickCounts): string {
  return (
    `clicks counted ${count(counts.clicks)} / redirects answered ${count(counts.redirects)}` +
    ` (sent ${count(counts.sent)}, visitors ${count(counts.visitors)})` +
    (everyClickCounted(counts) ? "" : "; not every click was counted")
  );
}

function count(value: number): string {
  return value.toLocaleString("en-US");
}

/** The clicks counted over the runs, against the redirects answered and the requests sent. */
function countCells(runs: readonly LinkRun[]): string[] {
  const sum = (field: keyof ClickCounts) =>
    runs.reduce((total, run) => total + run.counts[field], 0);
  return [
    `${count(sum("clicks"))} / ${count(sum("redirects"))}`,
    count(sum("sent") - sum("redirects") - sum("failed")),
    runs.length > 0 && runs.every((run) => everyClickCounted(run.counts)) ? "yes" : "no",
  ];
}

/** CPU per redirect of the service and of the generator (the bench process), in µs. */
function cpuCell(result: LoadResult): string {
  const micros = (value: number | undefined) => (value === undefined ? "-" : value.toFixed(0));
  return `${micros(result.serviceCpuUs)} / ${micros(result.generatorCpuUs)}`;
}

/** The links suite's tables in Markdown: the peaks against the ceiling, then p99 at half. */
export function linksTables(results: LinksResults): string {
  const { goals } = results;
  const countHeaders = ["clicks counted / redirects answered", "unanswered at stop", "all counted"];
  const peak = markdownTable(
    [
      "target",
      "req/s",
      "p50 ms",
      "p99 ms",
      "of ceiling",
      "CPU µs/redirect (service / generator)",
      ...countHeaders,
      `goal ≥ ${formatRate(goals.peakRps)}/s`,
    ],
    [
      ...results.peaks.map((row) => [
        configurationOf(row.configuration).label,
        ...resultCells(row.peak),
        formatPercent(row.ofCeiling),
        cpuCell(row.peak),
        ...countCells(row.runs),
        row.configuration === "default" ? (row.peak.rps >= goals.peakRps ? "met" : "missed") : "-",
      ]),
      [
        "ceiling: bare Fastify 302, one process",
        ...resultCells(results.ceiling.peak),
        "-",
        cpuCell(results.ceiling.peak),
        "-",
        "-",
        "-",
        "-",
      ],
    ],
  );
  const { half } = results;
  const latency = markdownTable(
    [
      "target",
      "rate",
      "req/s",
      "p50 ms",
      "p99 ms",
      ...countHeaders,
      `p99 goal ≤ ${goals.halfRateP99Ms} ms`,
    ],
    [
      [
        configurationOf(half.configuration).label,
        `${formatRate(half.rate)}/s`,
        ...resultCells(half.result),
        ...countCells(half.runs),
        half.result.p99Ms <= goals.halfRateP99Ms ? "met" : "missed",
      ],
    ],
  );
  return `${peak}\n\n${latency}`;
}
