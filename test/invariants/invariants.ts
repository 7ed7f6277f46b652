import type { Json } from "../helpers/server.js";

/**
 * The invariants, as pure functions of what the checker read from the
 * service after a step (a {@link Snapshot}): each returns the differences
 * it found, in words, empty when the invariant holds. Every expected value
 * is recounted here from the listed records, never taken from the
 * service's own totals.
 */

/** Everything the checker read of one run's application after a step. */
export interface Snapshot {
  /** When the reads started (ms since the epoch). */
  readonly takenAt: number;
  /** Every customer of the environment, erased ones too, by id. */
  readonly customers: ReadonlyMap<string, Json>;
  readonly referrals: readonly Json[];
  readonly grants: readonly Json[];
  /** The kept balance of each customer that has grants or is one of the run's. */
  readonly balances: ReadonlyMap<string, Json>;
  /** The export (JSON) of each of the run's customers. */
  readonly exports: ReadonlyMap<string, Json>;
  /** The run's campaign. */
  readonly campaign: Json;
  /** `GET /stats` (the environment, UTC) over {@link period}: its totals. */
  readonly environmentTotals: Json;
  /** `GET /campaigns/{id}/stats` (the campaign's time zone) over the period: its totals. */
  readonly campaignTotals: Json;
  /** The first update of the campaign's stats stream over the period: its totals. */
  readonly streamTotals: Json;
  /** The campaign's leaderboard (all time), best first. */
  readonly leaderboard: readonly Json[];
  /** The public leaderboard's rows, when the campaign shows one. */
  readonly publicLeaderboard?: readonly Json[];
  /** The referrals export (CSV) of the environment. */
  readonly csv: string;
  /** Every answer read, as received, with what it was: searched for erased data. */
  readonly texts: readonly { readonly where: string; readonly text: string }[];
}

/** An amount in units of a currency (two decimals for every currency so far) in cents. */
const cents = (amount: number | null | undefined): number => Math.round((amount ?? 0) * 100);

const grantStatuses = [
  "pending",
  "approved",
  "fulfilled",
  "rejected",
  "voided",
  "expired",
  "capped",
] as const;
const clawbackStatuses = ["pending", "fulfilled", "rejected"] as const;
const holdingStatuses = new Set(["pending", "approved", "fulfilled"]);

/** Amount (cents) and count per status. */
type Tally = Map<string, { cents: number; count: number }>;

function add(tally: Tally, status: string, amountCents: number): void {
  const entry = tally.get(status) ?? { cents: 0, count: 0 };
  entry.cents += amountCents;
  entry.count += 1;
  tally.set(status, entry);
}

/**
 * Every kept balance equals the sum of the customer's listed grants, per
 * currency and status (earned and manual grants; clawbacks apart).
 */
export function balanceDifferences(snapshot: Snapshot): string[] {
  const differences: string[] = [];
  for (const [customerId, balance] of snapshot.balances) {
    const grants = new Map<string, Tally>();
    const clawbacks = new Map<string, Tally>();
    for (const grant of snapshot.grants) {
      if (grant.customerId !== customerId) continue;
      const currency = grant.value?.currency ?? "none";
      const into = grant.kind === "clawback" ? clawbacks : grants;
      const tally = into.get(currency) ?? new Map();
      into.set(currency, tally);
      add(tally, grant.status, cents(grant.value?.amount));
    }
    const kept = new Map<string, Json>(
      (balance.balances ?? []).map((entry: Json) => [entry.currency ?? "none", entry]),
    );
    for (const currency of new Set([...kept.keys(), ...grants.keys(), ...clawbacks.keys()])) {
      const entry = kept.get(currency);
      const compare = (statuses: readonly string[], listed: Tally | undefined, shown: Json) => {
        for (const status of statuses) {
          const want = listed?.get(status) ?? { cents: 0, count: 0 };
          const got = { cents: cents(shown?.[status]?.amount), count: shown?.[status]?.count ?? 0 };
          if (want.cents !== got.cents || want.count !== got.count) {
            differences.push(
              `customer ${customerId} ${currency} ${shown === entry?.clawbacks ? "clawbacks " : ""}${status}: ` +
                `the balance says ${got.cents / 100} / ${got.count}, its listed grants ${want.cents / 100} / ${want.count}`,
            );
          }
        }
      };
      compare(grantStatuses, grants.get(currency), entry);
      compare(clawbackStatuses, clawbacks.get(currency), entry?.clawbacks);
    }
  }
  return differences;
}

/**
 * No reward limit exceeded in any window: the grants holding room under a
 * reward's limit (pending, approved, fulfilled; not `ignoresLimit`) of one
 * recipient in one window count at most the limit (rewards), or sum to at
 * most it (amount). Grants keep the terms they were made under; a grant
 * holds room from its making until it leaves those statuses, never again
 * after, so the holders now were all holding when the last of them was
 * made, under its limit: the highest limit among them bounds them.
 */
export function limitExcesses(snapshot: Snapshot): string[] {
  const windows = new Map<string, Json[]>();
  for (const grant of snapshot.grants) {
    const reward = grant.reward;
    if (grant.kind === "clawback" || grant.ignoresLimit || !reward?.limit) continue;
    if (!holdingStatuses.has(grant.status) || grant.limitWindow === null) continue;
    const key = [grant.rewardId, grant.customerId, grant.limitWindow, reward.limitUnit].join(" ");
    windows.set(key, [...(windows.get(key) ?? []), grant]);
  }
  const excesses: string[] = [];
  for (const [key, holders] of windows) {
    const limit = Math.max(...holders.map((grant) => grant.reward.limit as number));
    const unit = holders[0]?.reward.limitUnit;
    const used =
      unit === "amount"
        ? holders.reduce((sum, grant) => sum + cents(grant.value.amount), 0) / 100
        : holders.length;
    if (used > limit) {
      excesses.push(
        `reward, customer, window, unit ${key}: ${used} held under a limit of ${limit} (${holders
          .map((grant) => `${grant.id} ${grant.status} ${grant.kind}`)
          .join(", ")})`,
      );
    }
  }
  return excesses;
}

/** The program's numbers recounted from the records, as docs/insights.md defines each. */
export interface Recount {
  readonly customersIdentified: number;
  readonly referrersActive: number;
  readonly referralsCreated: number;
  readonly referralsReached: Record<string, number>;
  readonly checkpoints: Record<string, number>;
  /** Referrals accepted now, of those created in the period. */
  readonly cohortAccepted: number;
  /** Per currency ("" without one), per status reached: count and cents. */
  readonly rewards: Map<string, Tally>;
  /** Per currency: the cents committed (reaching approved, or fulfilled without approval first). */
  readonly committed: Map<string, number>;
}

/** The history of a record as the moves it made: each entry whose status differs from the one before. */
function statusMoves(record: Json): { from: string | null; to: string }[] {
  const history: Json[] = record.statusHistory ?? [];
  const moves: { from: string | null; to: string }[] = [];
  let previous: string | null = null;
  for (const entry of history) {
    if (entry.toStatus !== previous) moves.push({ from: previous, to: entry.toStatus });
    previous = entry.toStatus;
  }
  return moves;
}

/**
 * Recounts the numbers of the environment (`campaignId` null) or of one
 * campaign from the listed records, over a period that holds them all.
 * Customers and checkpoints belong to the application, so a campaign's
 * numbers count the environment's.
 */
export function recount(snapshot: Snapshot, campaignId: string | null): Recount {
  const referrals = snapshot.referrals.filter(
    (referral) => campaignId === null || referral.campaignId === campaignId,
  );
  const reached: Record<string, number> = {
    pending: 0,
    flagged: 0,
    accepted: 0,
    rejected: 0,
    reversed: 0,
  };
  for (const referral of referrals) {
    for (const move of statusMoves(referral)) reached[move.to] = (reached[move.to] ?? 0) + 1;
  }
  const checkpoints: Record<string, number> = {};
  const seen = new Set<string>();
  for (const exported of snapshot.exports.values()) {
    for (const checkpoint of exported.checkpoints ?? []) {
      if (seen.has(checkpoint.id)) continue;
      seen.add(checkpoint.id);
      checkpoints[checkpoint.name] = (checkpoints[checkpoint.name] ?? 0) + 1;
    }
  }
  const rewards = new Map<string, Tally>();
  const committed = new Map<string, number>();
  for (const grant of snapshot.grants) {
    if (grant.kind === "clawback") continue;
    if (campaignId !== null && grant.campaignId !== campaignId) continue;
    const currency = grant.value?.currency ?? "";
    const amount = cents(grant.value?.amount);
    const tally = rewards.get(currency) ?? new Map();
    rewards.set(currency, tally);
    for (const move of statusMoves(grant)) {
      add(tally, move.to, amount);
      const commits =
        move.to === "approved" || (move.to === "fulfilled" && move.from !== "approved");
      if (commits && currency && amount !== 0) {
        committed.set(currency, (committed.get(currency) ?? 0) + amount);
      }
    }
  }
  return {
    customersIdentified: snapshot.customers.size,
    referrersActive: new Set(referrals.map((referral) => referral.referrerId)).size,
    referralsCreated: referrals.length,
    referralsReached: reached,
    checkpoints,
    cohortAccepted: referrals.filter((referral) => referral.status === "accepted").length,
    rewards,
    committed,
  };
}

/** Where the service's totals differ from a recount. */
export function statsDifferences(totals: Json, wanted: Recount, what: string): string[] {
  const differences: string[] = [];
  const expect = (field: string, got: unknown, want: number) => {
    if (Number(got ?? 0) !== want) differences.push(`${what} ${field}: ${got}, recounted ${want}`);
  };
  expect("customersIdentified", totals.customersIdentified, wanted.customersIdentified);
  expect("referrersActive", totals.referrersActive, wanted.referrersActive);
  expect("referralsCreated", totals.referralsCreated, wanted.referralsCreated);
  for (const [status, n] of Object.entries(wanted.referralsReached)) {
    expect(`referralsReached.${status}`, totals.referralsReached?.[status], n);
  }
  const shownCheckpoints = new Map<string, number>(
    (totals.checkpoints ?? []).map((entry: Json) => [entry.name, Number(entry.count)]),
  );
  for (const name of new Set([...shownCheckpoints.keys(), ...Object.keys(wanted.checkpoints)])) {
    expect(`checkpoints.${name}`, shownCheckpoints.get(name) ?? 0, wanted.checkpoints[name] ?? 0);
  }
  const accepted = wanted.referralsReached.accepted ?? 0;
  expect("conversionRate.numerator", totals.conversionRate?.numerator, accepted);
  expect("conversionRate.denominator", totals.conversionRate?.denominator, wanted.referralsCreated);
  expect(
    "cohortConversionRate.numerator",
    totals.cohortConversionRate?.numerator,
    wanted.cohortAccepted,
  );
  expect("kFactor.denominator", totals.kFactor?.denominator, wanted.customersIdentified);
  const shownRewards = new Map<string, Json>(
    (totals.rewards ?? []).map((entry: Json) => [entry.currency ?? "", entry]),
  );
  for (const currency of new Set([...shownRewards.keys(), ...wanted.rewards.keys()])) {
    const shown = shownRewards.get(currency);
    const tally = wanted.rewards.get(currency);
    for (const status of grantStatuses) {
      const want = tally?.get(status) ?? { cents: 0, count: 0 };
      expect(
        `rewards.${currency || "none"}.${status}.count`,
        shown?.[status]?.count ?? 0,
        want.count,
      );
      expect(
        `rewards.${currency || "none"}.${status}.amount (cents)`,
        cents(shown?.[status]?.amount),
        want.cents,
      );
    }
  }
  const shownCost = new Map<string, Json>(
    (totals.costPerAcquisition ?? []).map((entry: Json) => [entry.currency, entry]),
  );
  for (const currency of new Set([...shownCost.keys(), ...wanted.committed.keys()])) {
    expect(
      `costPerAcquisition.${currency}.committedAmount (cents)`,
      cents(shownCost.get(currency)?.committedAmount),
      wanted.committed.get(currency) ?? 0,
    );
  }
  return differences;
}

/**
 * The campaign's leaderboard equals a recount: one row per referrer with
 * referrals accepted now (erased referrers left out), with its count, its
 * referrals made in the campaign, its name and external id, and its
 * balances as the balance endpoint keeps them; best first.
 */
export function leaderboardDifferences(snapshot: Snapshot, campaignId: string): string[] {
  const differences: string[] = [];
  const accepted = new Map<string, number>();
  const made = new Map<string, number>();
  for (const referral of snapshot.referrals) {
    if (referral.campaignId !== campaignId) continue;
    made.set(referral.referrerId, (made.get(referral.referrerId) ?? 0) + 1);
    if (referral.status === "accepted") {
      accepted.set(referral.referrerId, (accepted.get(referral.referrerId) ?? 0) + 1);
    }
  }
  const wanted = [...accepted].filter(([id]) => !snapshot.customers.get(id)?.deletedAt);
  const rows = new Map<string, Json>(snapshot.leaderboard.map((row) => [row.customerId, row]));
  for (const [customerId, count] of wanted) {
    const row = rows.get(customerId);
    if (!row) {
      differences.push(
        `referrer ${customerId} (${count} accepted) is missing from the leaderboard`,
      );
      continue;
    }
    const customer = snapshot.customers.get(customerId);
    if (Number(row.referralsAccepted) !== count)
      differences.push(
        `${customerId} referralsAccepted: ${row.referralsAccepted}, recounted ${count}`,
      );
    if (Number(row.referralsMade) !== made.get(customerId))
      differences.push(
        `${customerId} referralsMade: ${row.referralsMade}, recounted ${made.get(customerId)}`,
      );
    if (customer && (row.name !== customer.name || row.externalUserId !== customer.externalUserId))
      differences.push(`${customerId} is shown as ${row.name} / ${row.externalUserId}`);
    const balance = snapshot.balances.get(customerId);
    if (balance && JSON.stringify(row.rewards) !== JSON.stringify(balance.balances))
      differences.push(
        `${customerId} rewards ${JSON.stringify(row.rewards)}, its balance ${JSON.stringify(balance.balances)}`,
      );
  }
  for (const row of snapshot.leaderboard) {
    if (!wanted.some(([id]) => id === row.customerId))
      differences.push(`the leaderboard shows ${row.customerId}, who has no accepted referral`);
  }
  snapshot.leaderboard.forEach((row, index) => {
    const next = snapshot.leaderboard[index + 1];
    if (next && Number(next.referralsAccepted) > Number(row.referralsAccepted))
      differences.push(`rank ${row.rank} has fewer acceptances than rank ${next.rank}`);
  });
  return differences;
}

/**
 * The public leaderboard masks every name: no row shows an email or a
 * customer's last name (each run's last names are its tokens).
 */
export function publicLeaderboardLeaks(rows: readonly Json[], tokens: readonly string[]): string[] {
  return rows
    .filter(
      (row) =>
        String(row.displayName).includes("@") ||
        tokens.some((token) => String(row.displayName).toLowerCase().includes(token.toLowerCase())),
    )
    .map((row) => `rank ${row.rank} is shown as "${row.displayName}"`);
}

/** Where an erased customer's token (any of its personal data) appears in `texts`. */
export function erasedDataFound(
  texts: readonly { readonly where: string; readonly text: string }[],
  tokens: readonly string[],
): string[] {
  const found: string[] = [];
  for (const { where, text } of texts) {
    const lower = text.toLowerCase();
    for (const token of tokens) {
      const at = lower.indexOf(token.toLowerCase());
      if (at >= 0) {
        found.push(`${where} holds ${token}: …${text.slice(Math.max(0, at - 80), at + 40)}…`);
      }
    }
  }
  return found;
}

/**
 * The referrals export lists every referral of the environment whose
 * customers are not erased, each with its status, and no other.
 */
export function exportDifferences(snapshot: Snapshot): string[] {
  const rows = parseCsv(snapshot.csv);
  const [header, ...records] = rows;
  if (!header) return ["the referrals export has no header row"];
  const column = (name: string) => header.indexOf(name);
  const listed = new Map(records.map((row) => [row[column("id")], row[column("status")]]));
  const differences: string[] = [];
  for (const referral of snapshot.referrals) {
    const erased = [referral.referrerId, referral.refereeId].some(
      (id) => snapshot.customers.get(id)?.deletedAt,
    );
    const status = listed.get(referral.id);
    if (erased && status !== undefined)
      differences.push(`the export lists ${referral.id}, whose customer is erased`);
    if (!erased && status !== referral.status)
      differences.push(
        `the export shows ${referral.id} as ${status ?? "missing"}, listed ${referral.status}`,
      );
  }
  return differences;
}

/** RFC 4180 records: quoted fields may hold commas, quotes and line breaks. */
export function parseCsv(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let field = "";
  let quoted = false;
  for (let index = 0; index < text.length; index++) {
    const char = text[index];
    if (quoted) {
      if (char === '"' && text[index + 1] === '"') {
        field += '"';
        index++;
      } else if (char === '"') quoted = false;
      else field += char;
    } else if (char === '"') quoted = true;
    else if (char === ",") {
      row.push(field);
      field = "";
    } else if (char === "\n" || (char === "\r" && text[index + 1] === "\n")) {
      if (char === "\r") index++;
      row.push(field);
      rows.push(row);
      row = [];
      field = "";
    } else field += char;
  }
  if (field !== "" || row.length > 0) rows.push([...row, field]);
  return rows;
}

/**
 * Nothing acknowledged is lost across a kill: every customer, referral,
 * grant and the campaign read before it reads the same after the restart.
 * The one change allowed is the reward sweep's own (a pending grant whose
 * hold ended approved, an approved one expired); records may be added
 * (what the sweep makes after a crash).
 */
export function lostWrites(before: Snapshot, after: Snapshot): string[] {
  const lost: string[] = [];
  const compare = (what: string, earlier: readonly Json[], later: readonly Json[]) => {
    const now = new Map(later.map((record) => [record.id, record]));
    for (const record of earlier) {
      const found = now.get(record.id);
      if (!found) lost.push(`${what} ${record.id} is gone`);
      else if (JSON.stringify(found) !== JSON.stringify(record) && !sweptSince(record, found))
        lost.push(
          `${what} ${record.id} was ${JSON.stringify(record)}, now ${JSON.stringify(found)}`,
        );
    }
  };
  compare("customer", [...before.customers.values()], [...after.customers.values()]);
  compare("referral", before.referrals, after.referrals);
  compare("reward grant", before.grants, after.grants);
  compare("campaign", [before.campaign], [after.campaign]);
  return lost;
}

/** Whether a grant's only changes are the reward sweep's moves. */
function sweptSince(before: Json, after: Json): boolean {
  const history: Json[] = after.statusHistory ?? [];
  const earlier: Json[] = before.statusHistory ?? [];
  if (JSON.stringify(history.slice(0, earlier.length)) !== JSON.stringify(earlier)) return false;
  const added = history.slice(earlier.length);
  if (added.length === 0) return false;
  if (!added.every((entry) => ["hold_ended", "expiry"].includes(entry.cause))) return false;
  const stable = (grant: Json) => {
    // A move's reason is its own: the sweep's moves carry none.
    const {
      status: _s,
      statusReason: _r,
      statusHistory: _h,
      updatedAt: _u,
      expiresAt: _e,
      ...rest
    } = grant;
    return JSON.stringify(rest);
  };
  return stable(before) === stable(after);
}
