import fc from "fast-check";
import { checkAfterStep } from "./checks.js";
import { stepArbitraries } from "./commands.js";
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
    seed: seed === undefined ? defaultSeed : Number(seed),
    ...(path === undefined ? {} : { path }),
    ...(replayPath === undefined ? {} : { replayPath }),
    rateLimits,
    keepGoing: argv.includes("--keep-going"),
    maxSteps: 30,
    log,
  };
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
  const findings: string[] = [];
  try {
    // The first start's check of its keys (see System.start) belongs to no run.
    try {
      system.throwViolations();
    } catch (error) {
      findings.push(`On the first start of the service: ${(error as Error).message}`);
      // What the refusals left behind (counted failures) is not the runs' to inherit.
      await system.killPrimary();
      await system.restart([]);
      system.throwViolations();
    }
    let runs = 0;
    let steps = 0;
    const started = performance.now();
    let failedAt: number | undefined;
    const replaying = options.path !== undefined;
    // With --keep-going, each invariant is reported (and shrunk) once.
    const reported = new Set<string>();
    const property = fc.asyncProperty(
      fc.commands(stepArbitraries(), {
        maxCommands: options.maxSteps,
        size: "medium",
        ...(options.replayPath ? { replayPath: options.replayPath } : {}),
      }),
      async (sequence) => {
        // Past its time, a shrink passes at once: the shortest failure found so far stands.
        if (failedAt !== undefined && performance.now() > failedAt + options.shrinkForMs) return;
        runs += 1;
        try {
          const model = await setUpRun(system, runs);
          await fc.asyncModelRun(() => ({ model, real: system }), sequence);
          steps += model.steps;
          if (failedAt === undefined)
            options.log(`run ${runs}: ${model.steps} steps, every invariant held`);
        } catch (error) {
          options.log(`run ${runs} failed: ${(error as Error).message.slice(0, 300)}`);
          const logged = system.logTail(5);
          if (logged) options.log(`the service's last log lines:\n${logged}`);
          if (reported.has(invariantOf(error))) return;
          failedAt ??= performance.now();
          throw error;
        }
      },
    );
    // One fast-check run per seed, seed after seed, so each failure replays from its own seed.
    for (let offset = 0; ; offset++) {
      if (!replaying && performance.now() > started + options.runForMs) break;
      failedAt = undefined;
      const details = await fc.check(property, {
        seed: options.seed + offset,
        numRuns: 1,
        ...(replaying ? { path: options.path, endOnFailure: true } : {}),
      });
      if (details.failed) {
        const logged = system.logTail();
        findings.push(
          `${failureReport(details, options)}${logged ? `\nThe service's last log lines:\n${logged}` : ""}`,
        );
        reported.add(invariantOf(details.errorInstance));
        if (!options.keepGoing) break;
      }
      if (replaying) break;
    }
    return { runs, steps, ...(findings.length > 0 ? { failure: findings.join("\n\n") } : {}) };
  } finally {
    await system.stop();
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
  if (!campaign.ok || !webhook.ok) {
    system.throwViolations();
    throw new Error(`the run was not set up: ${campaign.text} ${webhook.text}`);
  }
  model.app = {
    applicationId: created.body.application.id,
    secret,
    public: credential("public"),
    campaignId: campaign.body.id,
    trigger: "purchase",
    webhookPath,
    webhookId: webhook.body.webhook.id,
  };
  model.campaign = campaign.body;
  await checkAfterStep(system, model, { step: 0, restarted: false });
  return model;
}

/** The invariant an error of a run broke; any other error is one kind of its own. */
function invariantOf(error: unknown): string {
  return error instanceof InvariantViolation
    ? error.invariant
    : "an error of the checker or the service";
}

/** The report of a failed check: the invariant, the shrunk sequence, and the command that replays it. */
function failureReport(
  details: fc.RunDetails<[Iterable<fc.AsyncCommand<Model, System, boolean>>]>,
  options: CheckerOptions,
): string {
  const error = details.errorInstance;
  const [sequence] = details.counterexample ?? [];
  const text = sequence ? String(sequence) : "(no sequence)";
  const replayPath = /replayPath="([^"]*)"/.exec(text)?.[1];
  const steps = text.replace(/\s*\/\*replayPath=.*\*\/\s*$/, "").split(/,(?=[A-Z][A-Za-z]*\()/);
  const replay = [
    "npm run check:invariants --",
    `--seed ${details.seed}`,
    `--path ${details.counterexamplePath}`,
    ...(replayPath ? [`--replay-path '${replayPath}'`] : []),
    ...(options.rateLimits === "off" ? ["--rate-limits off"] : []),
  ].join(" ");
  const broken =
    error instanceof InvariantViolation
      ? `${error.invariant}\n  ${error.message.slice(error.invariant.length + 2)}`
      : String((error as Error | undefined)?.stack ?? error);
  return [
    `The invariant checker found a violation (seed ${details.seed}, shrunk ${details.numShrinks} times):`,
    `  ${broken}`,
    ...(steps.length === 0 || steps[0] === ""
      ? ["in the set-up of a run, before its first step"]
      : [
          "after these steps, in a new application of the running service:",
          ...steps.map((step, index) => `  ${index + 1}. ${step}`),
        ]),
    `Replay it with: ${replay}`,
    options.path === undefined ? "" : "(this was a replay)",
  ].join("\n");
}

export { InvariantViolation };
