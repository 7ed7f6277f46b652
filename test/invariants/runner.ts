import fc from "fast-check";
import { checkAfterStep } from "./checks.js";
import { type Step, stepArbitraries } from "./commands.js";
import { exampleRuns } from "./examples.js";
import { Model } from "./model.js";
import {
  type Credential,
  defaultRateLimits,
  InvariantViolation,
  System,
  unlimitedRateLimits,
} from "./system.js";

/**
 * Runs the invariant checker: one service (a primary and two workers) for
 * the whole check, and fast-check runs of random step sequences against
 * it, each run in an application of its own. Runs are generated for a
 * time, from a seed; a failing run is shrunk for another while, and the
 * report says how to replay it.
 */

/** How a check runs. */
export interface CheckerOptions {
  /** How long new runs are started (ms). */
  readonly runForMs: number;
  /** How long a failure is shrunk after it is found (ms). */
  readonly shrinkForMs: number;
  readonly seed: number;
  /** With `seed`: replays one run (a counterexample's path) instead of generating. */
  readonly path?: string;
  /** With `path`: the steps fast-check ran in that counterexample (its `replayPath`). */
  readonly replayPath?: string;
  /** The service's rate limits: its defaults, or none (to look past an open rate-limit violation). */
  readonly rateLimits: "default" | "off";
  /** After a failure, go on with new runs, reporting each invariant broken once. */
  readonly keepGoing: boolean;
  /** The most steps in a run. */
  readonly maxSteps: number;
  /** Where progress goes, a line at a time. */
  readonly log: (line: string) => void;
}

/** The seed `npm test` checks with, so a run of the suite is the same run each time. */
export const defaultSeed = 20261129;

/** The options of a command line (`--minutes N`, `--seed S`, `--path P`, `--replay-path R`). */
export function optionsOf(argv: readonly string[], log: (line: string) => void): CheckerOptions {
  const value = (name: string) => {
    const at = argv.indexOf(`--${name}`);
    return at >= 0 ? argv[at + 1] : undefined;
  };
  const minutes = value("minutes");
  const seed = value("seed");
  const path = value("path");
  const replayPath = value("replay-path");
  const rateLimits = value("rate-limits") ?? "default";
  if (rateLimits !== "default" && rateLimits !== "off")
    throw new Error(`--rate-limits is default or off, not ${rateLimits}`);
  const runForMs = minutes === undefined ? 60_000 : Number(minutes) * 60_000;
  if (!Number.isFinite(runForMs) || runForMs <= 0)
    throw new Error(`--minutes ${minutes} is not a number of minutes`);
  return {
    runForMs,
    // A long check shrinks longer: its failures are rarer and worth a short sequence.
    shrinkForMs: minutes === undefined ? 90_000 : 5 * 60_000,
    // A longer check explores from a seed of its own (printed with any failure).
    seed: seed !== undefined ? Number(seed) : minutes === undefined ? defaultSeed : randomSeed(),
    ...(path === undefined ? {} : { path }),
    ...(replayPath === undefined ? {} : { replayPath }),
    rateLimits,
    keepGoing: argv.includes("--keep-going"),
    maxSteps: 30,
    log,
  };
}

/** A seed for a check of its own: fast-check takes a 32-bit integer. */
function randomSeed(): number {
  return Math.floor(Math.random() * 2 ** 31);
}

/** What a check found. */
export interface CheckerReport {
  readonly runs: number;
  readonly steps: number;
  /** The failure, with its sequence and how to replay it; undefined when every invariant held. */
  readonly failure?: string;
}

/** Runs the checker as `options` say. */
export async function checkInvariants(options: CheckerOptions): Promise<CheckerReport> {
  const system = await System.start(
    options.rateLimits === "off" ? unlimitedRateLimits : defaultRateLimits,
    options.log,
  );
  const check = new Check(system, options);
  options.log(`seed ${options.seed}`);
  try {
    await check.firstStart();
    if (options.path !== undefined) await check.replay();
    else if (await check.examples()) await check.generate();
    return check.report();
  } finally {
    await system.stop();
  }
}

/** One check: its runs, and what they found. */
class Check {
  private runs = 0;
  private steps = 0;
  /** When the runs began: the examples and the random runs share the time given. */
  private readonly started = performance.now();
  private readonly findings: string[] = [];
  /** The invariants reported so far (with --keep-going, each is reported once). */
  private readonly reported = new Set<string>();
  /** While a failure is shrunk: the invariant it broke (a shorter run must break the same) and since when. */
  private shrinking: { invariant: string; since: number } | undefined;
  /** Other invariants broken by runs tried while shrinking, with their steps: reported unshrunk. */
  private readonly metWhileShrinking = new Map<string, string>();
  private readonly property: fc.IAsyncProperty<[Iterable<Step>]>;

  constructor(
    private readonly system: System,
    private readonly options: CheckerOptions,
  ) {
    this.property = fc.asyncProperty(
      fc.commands(stepArbitraries(), {
        maxCommands: options.maxSteps,
        size: "medium",
        ...(options.replayPath ? { replayPath: options.replayPath } : {}),
      }) as fc.Arbitrary<Iterable<Step>>,
      (sequence) => this.run(sequence),
    );
  }

  /**
   * The first start's check of its keys (see System.start) belongs to no
   * run; after a refusal the service is started again, so that what the
   * refusals left behind (counted failed authentications) fails no run.
   */
  async firstStart(): Promise<void> {
    try {
      this.system.throwViolations();
    } catch (error) {
      this.findings.push(`On the first start of the service: ${(error as Error).message}`);
      await this.cleanStart();
    }
  }

  /**
   * Starts the service again on its data directory, to leave a failure's
   * traces behind; what that start breaks is a finding of its own, and
   * the service is started once more (a few times at most).
   */
  private async cleanStart(): Promise<void> {
    for (let attempt = 1; attempt <= 3; attempt++) {
      await this.system.restartClean();
      try {
        this.system.throwViolations();
        return;
      } catch (error) {
        const finding = `On a start of the service on its data directory: ${(error as Error).message}`;
        if (!this.findings.includes(finding)) this.findings.push(finding);
      }
    }
  }

  /**
   * Runs the example sequences (examples.ts), each once, unshrunk; with
   * the service started again after each failure. Whether the check goes
   * on (nothing found, or --keep-going).
   */
  async examples(): Promise<boolean> {
    let found = false;
    for (const example of exampleRuns) {
      const steps = example.steps();
      try {
        await this.runSteps(steps);
      } catch (error) {
        this.options.log(
          `the example "${example.name}" failed: ${(error as Error).message.slice(0, 300)}`,
        );
        this.reported.add(invariantOf(error));
        this.findings.push(
          runReport(
            `The invariant checker found a violation in its example run "${example.name}":`,
            error,
            steps.map(String),
            this.system,
          ),
        );
        found = true;
        await this.cleanStart();
      }
    }
    return !found || this.options.keepGoing;
  }

  /** Runs seed after seed (one fast-check run each, so each failure replays from its seed) for the time given. */
  async generate(): Promise<void> {
    for (let offset = 0; performance.now() < this.started + this.options.runForMs; offset++) {
      const details = await fc.check(this.property, {
        seed: this.options.seed + offset,
        numRuns: 1,
      });
      const found = this.record(details);
      if (found && !this.options.keepGoing) return;
      // A run that broke something may have left the service broken: the next starts clean.
      if (found) await this.cleanStart();
    }
  }

  /** Runs the one sequence `--seed` and `--path` name. */
  async replay(): Promise<void> {
    const details = await fc.check(this.property, {
      seed: this.options.seed,
      path: this.options.path,
      endOnFailure: true,
    });
    this.record(details);
  }

  report(): CheckerReport {
    return {
      runs: this.runs,
      steps: this.steps,
      ...(this.findings.length > 0 ? { failure: this.findings.join("\n\n") } : {}),
    };
  }

  /** One run: a new application, the steps, every invariant after each. */
  private async runSteps(
    sequence: Iterable<Step>,
    until = Number.POSITIVE_INFINITY,
  ): Promise<void> {
    this.runs += 1;
    const model = await setUpRun(this.system, this.runs);
    const cut = { steps: false };
    await fc.asyncModelRun(() => ({ model, real: this.system }), stepsUntil(sequence, until, cut));
    this.steps += model.steps;
    if (!this.shrinking) {
      const when = cut.steps ? " (the time was up: its other steps were not taken)" : "";
      this.options.log(`run ${this.runs}: ${model.steps} steps${when}, every invariant held`);
    }
  }

  /** A run of fast-check's: while a failure is shrunk, only the same failure counts. */
  private async run(sequence: Iterable<Step>): Promise<void> {
    const { options, system } = this;
    // Past its time, a shrink passes at once: the shortest failure found so far stands.
    if (this.shrinking && performance.now() > this.shrinking.since + options.shrinkForMs) return;
    // A replay is one run: fast-check goes on from a path that passes, those pass at once.
    if (options.path !== undefined && this.runs > 0 && !this.shrinking) return;
    try {
      // A random run stops taking steps when the time given is up, however many it drew: a run
      // is up to 30 steps of kills and restarts, and one that began just before the end took
      // three times the check's minute on a loaded two-core machine. A shrink or a replay
      // takes every step of the sequence it tries.
      const replaying = this.shrinking !== undefined || options.path !== undefined;
      await this.runSteps(sequence, replaying ? undefined : this.started + options.runForMs);
    } catch (error) {
      options.log(`run ${this.runs} failed: ${(error as Error).message.slice(0, 300)}`);
      const broken = invariantOf(error);
      if (this.reported.has(broken)) return;
      if (this.shrinking && broken !== this.shrinking.invariant) {
        if (!this.metWhileShrinking.has(broken)) {
          this.metWhileShrinking.set(
            broken,
            runReport(
              "The invariant checker found a violation while it shrank another (not shrunk itself):",
              error,
              stepsOf(String(sequence)),
              system,
            ),
          );
        }
        return;
      }
      this.shrinking ??= { invariant: broken, since: performance.now() };
      throw error;
    }
  }

  /** Takes in what a fast-check run found; whether it found anything. */
  private record(details: fc.RunDetails<[Iterable<Step>]>): boolean {
    const shrunk = this.shrinking;
    this.shrinking = undefined;
    let found = false;
    if (details.failed && shrunk) {
      const logged = this.system.logTail();
      this.findings.push(
        `${failureReport(details, this.options)}${logged ? `\nThe service's last log lines:\n${logged}` : ""}`,
      );
      this.reported.add(shrunk.invariant);
      found = true;
    }
    for (const [invariant, report] of this.metWhileShrinking) {
      if (this.reported.has(invariant)) continue;
      this.findings.push(report);
      this.reported.add(invariant);
      found = true;
    }
    this.metWhileShrinking.clear();
    return found;
  }
}

/**
 * A new application for a run, with a live default campaign in the test
 * environment (a $20 payout to the referrer, at most 2 a month; 15% off
 * for the referee) and a webhook endpoint delivering to the checker's
 * receiver; then the checks of the empty run.
 */
async function setUpRun(system: System, run: number): Promise<Model> {
  await system.recover();
  const model = new Model(run);
  const admin = system.bootstrap.find((credential) => credential.kind === "admin") as Credential;
  const created = await system.rest(admin, "POST", "/admin/applications", {
    body: { name: `invariant checker run ${run}` },
  });
  if (!created.ok) {
    system.throwViolations();
    throw new Error(`the run's application was not created: ${created.text}`);
  }
  const credential = (kind: "secret" | "public"): Credential => ({
    label: `run ${run}'s ${kind} key`,
    kind,
    token: created.body[`${kind}Key`],
    valid: true,
  });
  const secret = credential("secret");
  // Public-key identifies of existing customers carry the userHash it signs (docs/trust.md).
  const identity = await system.rest(
    admin,
    "POST",
    `/admin/applications/${created.body.application.id}/identity-secret`,
    { body: {} },
  );
  const campaign = await system.rest(
    admin,
    "POST",
    `/admin/applications/${created.body.application.id}/campaigns`,
    {
      body: {
        name: `Run ${run}`,
        environment: "test",
        isLive: true,
        isDefault: true,
        proposedRewardTrigger: "purchase",
        rewards: [
          {
            type: "payout",
            party: "referrer",
            method: "paypal",
            currency: "usd",
            payoutAmount: 20,
            limit: 2,
            limitUnit: "rewards",
            limitInterval: "month",
          },
          { type: "discount", party: "referee", method: "mobile_coupon", discountPercentage: 15 },
        ],
      },
    },
  );
  const webhookPath = `/run-${run}`;
  const webhook = await system.rest(secret, "POST", "/webhooks", {
    body: { url: `${system.receiver.url}${webhookPath}`, environment: "test" },
  });
  if (!campaign.ok || !webhook.ok || !identity.ok) {
    system.throwViolations();
    throw new Error(`the run was not set up: ${campaign.text} ${webhook.text} ${identity.text}`);
  }
  model.app = {
    applicationId: created.body.application.id,
    secret,
    public: credential("public"),
    identitySecret: identity.body.identitySecret,
    campaignId: campaign.body.id,
    trigger: "purchase",
    webhookPath,
    webhookId: webhook.body.webhook.id,
  };
  model.campaign = campaign.body;
  await checkAfterStep(system, model, { step: 0, restarted: false });
  return model;
}

/**
 * The sequence, each step taken only if it begins before `until` (a
 * `performance.now()` time); `cut.steps` tells whether any were left.
 * fast-check chains every step of a sequence before the first runs, so the
 * time is read at each step's precondition (`check`), which it calls as the
 * step comes up. The steps are those fast-check drew, run through its own
 * wrappers, so a failure still replays from its seed and path.
 */
function stepsUntil(sequence: Iterable<Step>, until: number, cut: { steps: boolean }): Step[] {
  return [...sequence].map((step) => {
    const timed = Object.create(step) as Step;
    timed.check = (model) => {
      if (performance.now() < until) return step.check(model);
      cut.steps = true;
      return false;
    };
    timed.run = (model, real) => step.run(model, real);
    timed.toString = () => String(step);
    return timed;
  });
}

/** The invariant an error of a run broke; any other error is one kind of its own. */
function invariantOf(error: unknown): string {
  if (!(error instanceof InvariantViolation)) return "an error of the checker or the service";
  return error.kind ? `${error.invariant} (${error.kind})` : error.invariant;
}

/** The report of a run that failed and was not shrunk (an example, or one met while shrinking). */
function runReport(
  title: string,
  error: unknown,
  steps: readonly string[],
  system: System,
): string {
  const logged = system.logTail();
  return [
    title,
    `  ${describe(error)}`,
    ...(steps.length === 0
      ? ["in the set-up of a run, before its first step (what broke it may be an earlier run's)"]
      : [
          "after these steps, in a new application of the running service:",
          ...steps.map((step, index) => `  ${index + 1}. ${step}`),
        ]),
    ...(logged ? [`The service's last log lines:\n${logged}`] : []),
  ].join("\n");
}

/** The steps of a sequence as fast-check prints it (its replay path left out). */
function stepsOf(sequence: string): string[] {
  const text = sequence.replace(/\s*\/\*replayPath=.*\*\/\s*$/, "");
  return text === "" ? [] : text.split(/,(?=[A-Z][A-Za-z]*\()/);
}

/** The invariant and what broke it, or an error's stack. */
function describe(error: unknown): string {
  if (!(error instanceof InvariantViolation))
    return String((error as Error | undefined)?.stack ?? error);
  const invariant = invariantOf(error);
  return `${invariant}\n  ${error.message.slice(invariant.length + 2)}`;
}

/** The report of a failed check: the invariant, the shrunk sequence, and the command that replays it. */
function failureReport(details: fc.RunDetails<[Iterable<Step>]>, options: CheckerOptions): string {
  const [sequence] = details.counterexample ?? [];
  const text = sequence ? String(sequence) : "";
  const replayPath = /replayPath="([^"]*)"/.exec(text)?.[1];
  const steps = stepsOf(text);
  const replay = [
    "npm run check:invariants --",
    `--seed ${details.seed}`,
    `--path ${details.counterexamplePath}`,
    ...(replayPath ? [`--replay-path '${replayPath}'`] : []),
    ...(options.rateLimits === "off" ? ["--rate-limits off"] : []),
  ].join(" ");
  return [
    `The invariant checker found a violation (seed ${details.seed}, shrunk ${details.numShrinks} times):`,
    `  ${describe(details.errorInstance)}`,
    ...(steps.length === 0
      ? ["in the set-up of a run, before its first step (what broke it may be an earlier run's)"]
      : [
          "after these steps, in a new application of the running service:",
          ...steps.map((step, index) => `  ${index + 1}. ${step}`),
        ]),
    `Replay it with: ${replay}`,
  ].join("\n");
}
