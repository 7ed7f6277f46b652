import {
  balanceDifferences,
  erasedDataFound,
  exportDifferences,
  leaderboardDifferences,
  limitExcesses,
  lostWrites,
  publicLeaderboardLeaks,
  recount,
  statsDifferences,
} from "./invariants.js";
import type { Model } from "./model.js";
import { readSnapshot } from "./snapshot.js";
import type { System } from "./system.js";

/** The invariants' names, as a failure reports them. */
export const invariant = {
  balances: "every kept balance equals the sum of its listed grants",
  limits: "no reward limit exceeded in any window",
  stats: "stats totals and the leaderboard equal a recount from the listed records",
  erasure: "an erased customer's data is absent from every read",
  lost: "no acknowledged write lost across kill -9 and restart",
  answers: "every call answers as documented",
  export: "the referrals export lists the referrals of customers not erased",
} as const;

/** How many differences of one invariant a failure quotes. */
const quoted = 5;

/**
 * Reads everything after a step and checks every invariant on it (and,
 * after a restart, that nothing read before it is lost); throws the first
 * broken one. Then the model learns what was read.
 */
export async function checkAfterStep(
  system: System,
  model: Model,
  options: { step: number; restarted: boolean },
): Promise<void> {
  let snapshot: Awaited<ReturnType<typeof readSnapshot>>;
  try {
    snapshot = await readSnapshot(system, model, options.step);
  } catch (error) {
    // A refused read is the violation to report, not the read's failure.
    system.throwViolations();
    throw error;
  }
  const app = model.app;
  if (!app) throw new Error("the run has no application");
  const report = (name: string, differences: readonly string[]) => {
    if (differences.length === 0) return;
    const more = differences.length > quoted ? ` (${differences.length - quoted} more)` : "";
    system.violated(name, `${differences.slice(0, quoted).join("; ")}${more}`);
  };
  report(invariant.balances, balanceDifferences(snapshot));
  report(invariant.limits, limitExcesses(snapshot));
  const environment = recount(snapshot, null);
  const campaign = recount(snapshot, app.campaignId);
  report(invariant.stats, [
    ...statsDifferences(snapshot.environmentTotals, environment, "GET /stats"),
    ...statsDifferences(snapshot.campaignTotals, campaign, "the campaign's stats"),
    ...statsDifferences(snapshot.streamTotals, campaign, "the campaign's stats stream"),
    ...leaderboardDifferences(snapshot, app.campaignId),
  ]);
  report(invariant.export, exportDifferences(snapshot));
  const erased = model.erased();
  reportLeaks(system, [
    ...erasedDataFound(
      snapshot.texts,
      erased.map((slot) => slot.token),
    ),
    ...deliveriesAfterErasure(system, model),
  ]);
  if (snapshot.publicLeaderboard) {
    report(
      "the public leaderboard masks every name",
      publicLeaderboardLeaks(
        snapshot.publicLeaderboard,
        model.slots.map((slot) => slot.token),
      ),
    );
  }
  if (options.restarted && model.snapshot)
    report(invariant.lost, lostWrites(model.snapshot, snapshot));
  system.throwViolations();
  model.learn(snapshot);
}

/**
 * Reports where erased data was found, one violation per kind of place
 * (each is kept by other code, so a fix of one leaves the others).
 */
export function reportLeaks(system: System, found: readonly string[]): void {
  const byKind = new Map<string, string[]>();
  for (const where of found) {
    const kind = leakKind(where);
    byKind.set(kind, [...(byKind.get(kind) ?? []), where]);
  }
  for (const [kind, places] of byKind) {
    const more = places.length > quoted ? ` (${places.length - quoted} more)` : "";
    system.violated(invariant.erasure, `${places.slice(0, quoted).join("; ")}${more}`, kind);
  }
}

/** The kind of place a leak was found in, from its description. */
function leakKind(where: string): string {
  if (where.includes("Idempotency-Key")) return "an idempotent replay";
  if (where.startsWith("the redelivery")) return "a webhook redelivery";
  if (where.startsWith("the webhook delivery")) return "a webhook delivery";
  if (/\/customers\/[^/ ]+\/export/.test(where)) return "a customer export";
  if (where.includes("/referrals/export")) return "the referrals export";
  if (where.includes("leaderboard")) return "a leaderboard";
  if (where.includes("stream")) return "the stats stream";
  return "a read of the API";
}

/**
 * The webhook deliveries of the run attempted after an erasure was
 * acknowledged (their `webhook-timestamp` in a later second) that hold the
 * erased customer's data.
 */
export function deliveriesAfterErasure(system: System, model: Model): string[] {
  const app = model.app;
  if (!app) return [];
  const found: string[] = [];
  for (const slot of model.erased()) {
    const erasedAt = slot.erasedAt ?? 0;
    // An attempt stamped in a second that starts after the erasure began after it.
    const after = system.receiver.received.filter(
      (request) =>
        request.path === app.webhookPath &&
        Number(request.headers["webhook-timestamp"]) * 1000 >= erasedAt,
    );
    found.push(
      ...erasedDataFound(
        after.map((request) => ({
          where: `the webhook delivery of ${request.headers["webhook-id"]} at ${request.headers["webhook-timestamp"]}`,
          text: request.body,
        })),
        [slot.token],
      ),
    );
  }
  return found;
}
