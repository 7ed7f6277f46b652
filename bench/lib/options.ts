import { parseArgs } from "node:util";

/** The suites `npm run bench` can run. */
export type Suite =
  | "reads"
  | "writes"
  | "webhooks"
  | "operations"
  | "cluster"
  | "scale"
  | "insights"
  | "fraud"
  | "links"
  | "defaults";

export const allSuites: readonly Suite[] = [
  "reads",
  "writes",
  "webhooks",
  "operations",
  "cluster",
  "scale",
  "insights",
  "fraud",
  "links",
  "defaults",
];
const defaultSuites: readonly Suite[] = ["reads", "writes", "webhooks", "operations", "defaults"];

/** The referrals of the fraud suite's backtest without `--sizes`: the 100,000. */
export const defaultFraudReferrals = 100_000;

/** The bench's settings, from the command line. */
export interface BenchOptions {
  readonly suites: readonly Suite[];
  /** Runs per figure; each figure is the median. */
  readonly repeats: number;
  /** Seconds of each measured run. */
  readonly seconds: number;
  /** Seconds of load before each measured target, not recorded (JIT, caches, connections). */
  readonly warmupSeconds: number;
  /** Requests in flight in a closed-loop run, on every protocol. */
  readonly concurrency: number;
  /** HTTP/2 connections the gRPC load is spread over. */
  readonly h2Connections: number;
  /** Customers of the store the read and write scenarios run on. */
  readonly baseCustomers: number;
  /**
   * Store sizes of the scale suite; the largest is the insights suite's
   * referrals (and the fraud suite's, when given).
   */
  readonly sizes: readonly number[];
  /**
   * Referrals the fraud suite's backtest replays: the largest of `--sizes`
   * when it is given, else {@link defaultFraudReferrals}.
   */
  readonly fraudReferrals: number;
  /** Only the scenarios whose names contain one of these (all when empty). */
  readonly only: readonly string[];
  /** The directory the JSON results go to, one file per suite (`reads.json`, …). */
  readonly out: string;
  readonly quick: boolean;
  /** Write CPU profiles of every service started, summarized per call when each stops. */
  readonly profile: boolean;
  /** A results file to print the tables of, instead of running anything. */
  readonly tables?: string;
}

/** What `npm run bench -- --help` prints. */
export const usage = `npm run bench -- [suite ...] [options]

suites: reads, writes, webhooks, operations, defaults (the default: these five), cluster,
        scale, insights, fraud, links

  --quick              short runs to try it out: 1 repeat of 3 s, 1 s warm-up
  --repeats N          runs per figure, median reported (default 3)
  --duration S         seconds per measured run (default 10)
  --warmup S           seconds of unrecorded load before each target (default 2)
  --concurrency N      requests in flight in closed-loop runs (default 32)
  --h2-connections N   HTTP/2 connections for gRPC (default 4)
  --base N             customers seeded for reads and writes (default 1000)
  --sizes LIST         scale suite sizes, e.g. 10k,100k,1M (default 10k,100k,1M);
                       the largest is the referrals of the insights suite's campaign,
                       and of the fraud suite's backtest (100k without --sizes)
  --only LIST          only scenarios whose names contain one of these, e.g. GetCustomer,identify-new
  --out DIR            where the JSON results go, one file per suite, each run
                       overwriting its suite's file (default bench/results, whose
                       files are committed and docs/performance.md rendered from;
                       bench/scratch with --quick or --profile)
  --profile            CPU-profile every service the suites start (--cpu-prof), into
                       bench/scratch/profiles/, and print where each spent its CPU per
                       call answered when it stops
  --tables FILE        print the tables of a results file written before; runs nothing
`;

/** Parses `process.argv`-style arguments; throws with the usage on a mistake. */
export function parseOptions(args: readonly string[]): BenchOptions {
  try {
    return optionsFrom(args);
  } catch (error) {
    throw new Error(`${(error as Error).message}\n\n${usage}`);
  }
}

function optionsFrom(args: readonly string[]): BenchOptions {
  const { values, positionals } = parseArgs({
    args: [...args],
    allowPositionals: true,
    options: {
      quick: { type: "boolean", default: false },
      profile: { type: "boolean", default: false },
      repeats: { type: "string" },
      duration: { type: "string" },
      warmup: { type: "string" },
      concurrency: { type: "string" },
      "h2-connections": { type: "string" },
      base: { type: "string" },
      sizes: { type: "string" },
      only: { type: "string" },
      out: { type: "string" },
      tables: { type: "string" },
    },
  });
  const suites = positionals.length > 0 ? positionals : defaultSuites;
  for (const suite of suites) {
    if (!allSuites.includes(suite as Suite)) throw new Error(`unknown suite "${suite}"`);
  }
  const quick = values.quick;
  const sizes = (values.sizes ?? "10k,100k,1M").split(",").map(size);
  return {
    suites: suites as Suite[],
    repeats: count(values.repeats, "--repeats", quick ? 1 : 3),
    seconds: seconds(values.duration, "--duration", quick ? 3 : 10),
    warmupSeconds: seconds(values.warmup, "--warmup", quick ? 1 : 2, true),
    concurrency: count(values.concurrency, "--concurrency", 32),
    h2Connections: count(values["h2-connections"], "--h2-connections", 4),
    baseCustomers: count(values.base, "--base", 1000),
    sizes,
    fraudReferrals: values.sizes === undefined ? defaultFraudReferrals : Math.max(...sizes),
    only: values.only ? values.only.split(",").map((name) => name.trim()) : [],
    // A profiled service runs slower than a deployed one: its figures never replace the results.
    out: values.out ?? (quick || values.profile ? "bench/scratch" : "bench/results"),
    quick,
    profile: values.profile,
    ...(values.tables === undefined ? {} : { tables: values.tables }),
  };
}

function count(raw: string | undefined, name: string, fallback: number): number {
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 1) throw new Error(`${name} must be a positive integer`);
  return value;
}

function seconds(raw: string | undefined, name: string, fallback: number, zero = false): number {
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value < 0 || (value === 0 && !zero)) {
    throw new Error(`${name} must be a number of seconds`);
  }
  return value;
}

/** "10k", "1M", "2500" as a count of customers. */
export function size(raw: string): number {
  const match = /^(\d+(?:\.\d+)?)([kKmM]?)$/.exec(raw.trim());
  if (!match) throw new Error(`--sizes: "${raw}" is not a size such as 10k or 1M`);
  const scale = { "": 1, k: 1e3, m: 1e6 }[(match[2] as string).toLowerCase()] as number;
  return Math.round(Number(match[1]) * scale);
}

/** A size as the tables show it: 10k, 1M. */
export function sizeLabel(value: number): string {
  if (value >= 1e6 && value % 1e6 === 0) return `${value / 1e6}M`;
  if (value >= 1e3 && value % 1e3 === 0) return `${value / 1e3}k`;
  return value.toLocaleString("en-US");
}

/** Whether `--only` lets a scenario run. */
export function selected(options: BenchOptions, name: string): boolean {
  return options.only.length === 0 || options.only.some((part) => name.includes(part));
}
