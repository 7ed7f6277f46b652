import { timeZoneOfCampaign } from "./campaign-time.js";
import type { ReferralStatusName } from "./referral-status.js";
import type { RewardGrantStatusName } from "./reward-ledger.js";
import { conversionBinOf } from "./stats-time.js";

/**
 * What the program's numbers are made of, and how each change of a record
 * moves them. The engines apply the moves in the same atomic write as the
 * change (see `src/store/engine/stats-*.ts`); this file decides what they are,
 * once for both.
 */

/**
 * Where counters are kept: one campaign of an application's environment,
 * or the whole environment (`*`): the customers and checkpoints (which
 * belong to no campaign) and every campaign's numbers together.
 */
export function statsScope(
  applicationId: string,
  environment: string,
  campaignId: string | null,
): string {
  return `${applicationId}|${environment}|${campaignId ?? "*"}`;
}

/** The metric names of the counters; {@link metricOf} reads one back. */
export const metric = {
  identified: "identified",
  created: "created",
  reached: (status: ReferralStatusName) => `reached:${status}`,
  /** Of the referrals created in a bucket, those accepted now (+1 on acceptance, -1 on reversal). */
  cohortAccepted: "cohort:accepted",
  conversionBin: (bin: number) => `ttc:${bin}`,
  checkpoint: (name: string) => `checkpoint:${name}`,
  grants: (status: RewardGrantStatusName, currency: string | null) =>
    `grants:${status}:${currency ?? ""}`,
  grantsMinor: (status: RewardGrantStatusName, currency: string | null) =>
    `grantsMinor:${status}:${currency ?? ""}`,
  committedMinor: (currency: string) => `committedMinor:${currency}`,
  /** Grants committed, each once: reaching approved, or fulfilled without approval. */
  committed: (currency: string | null) => `committed:${currency ?? ""}`,
  /** Referrals created whose current verdicts have the rule acting so (or in shadow). */
  fraud: (rule: string, outcome: FraudOutcomeName) => `fraud:${outcome}:${rule}`,
  /** People's clicks on share links (a visitor's repeat within the hour excluded). */
  clicks: "clicks",
  /** Visitors: clicks that were their visitor's first on the campaign's links. */
  visitors: "visitors",
  /** Link previews' and crawlers' fetches, by reason. */
  bots: (reason: string) => `bots:${reason}`,
  /** People's clicks, by the channel their link named. */
  channel: (name: string) => `channel:${name}`,
} as const;

/**
 * Whether a metric counts clicks: kept as the clicks were made, while the
 * clicks themselves are removed when their window ends, so a recount from
 * the records cannot find them again.
 */
export function isClickMetric(name: string): boolean {
  return (
    name === metric.clicks ||
    name === metric.visitors ||
    name.startsWith("bots:") ||
    name.startsWith("channel:")
  );
}

/** What a fraud verdict counts as: its action, or `shadow` when it took none. */
export type FraudOutcomeName = "note" | "flag" | "hold_reward" | "reject" | "shadow";

/** Every checkpoint's metric name starts so (an engine's filter on them all). */
export const checkpointMetricPrefix = metric.checkpoint("");

/** What a metric name counts: the parts {@link metric} built it from. */
export type Metric =
  | { readonly kind: "identified" }
  | { readonly kind: "created" }
  | { readonly kind: "reached"; readonly status: ReferralStatusName }
  | { readonly kind: "cohortAccepted" }
  | { readonly kind: "conversionBin"; readonly bin: number }
  | { readonly kind: "checkpoint"; readonly name: string }
  | {
      readonly kind: "grants" | "grantsMinor";
      readonly status: RewardGrantStatusName;
      /** Null for grants without a currency (a percentage discount). */
      readonly currency: string | null;
    }
  | { readonly kind: "committedMinor"; readonly currency: string }
  | { readonly kind: "committed"; readonly currency: string | null }
  | { readonly kind: "fraud"; readonly rule: string; readonly outcome: FraudOutcomeName }
  | { readonly kind: "clicks" }
  | { readonly kind: "visitors" }
  | { readonly kind: "bots"; readonly reason: string }
  | { readonly kind: "channel"; readonly channel: string };

// Counters are summed by name, so the same names are read again and again.
const metricsRead = new Map<string, Metric | null>();
const metricsReadSize = 10_000;

/** The parts of a metric name (the reverse of {@link metric}); null for a name it never builds. */
export function metricOf(name: string): Metric | null {
  let read = metricsRead.get(name);
  if (read === undefined) {
    read = readMetric(name);
    if (metricsRead.size < metricsReadSize) metricsRead.set(name, read);
  }
  return read;
}

function readMetric(name: string): Metric | null {
  if (name === metric.identified) return { kind: "identified" };
  if (name === metric.created) return { kind: "created" };
  if (name === metric.cohortAccepted) return { kind: "cohortAccepted" };
  if (name === metric.clicks) return { kind: "clicks" };
  if (name === metric.visitors) return { kind: "visitors" };
  const colon = name.indexOf(":");
  if (colon < 0) return null;
  const rest = name.slice(colon + 1);
  switch (name.slice(0, colon)) {
    case "reached":
      return { kind: "reached", status: rest as ReferralStatusName };
    case "ttc":
      return { kind: "conversionBin", bin: Number(rest) };
    // A checkpoint's name may hold colons: it is the whole rest.
    case "checkpoint":
      return { kind: "checkpoint", name: rest };
    case "grants":
    case "grantsMinor": {
      const [status, currency = ""] = rest.split(":");
      return {
        kind: name.startsWith("grantsMinor:") ? "grantsMinor" : "grants",
        status: status as RewardGrantStatusName,
        currency: currency === "" ? null : currency,
      };
    }
    case "committedMinor":
      return { kind: "committedMinor", currency: rest };
    case "committed":
      return { kind: "committed", currency: rest === "" ? null : rest };
    case "bots":
      return { kind: "bots", reason: rest };
    case "channel":
      return { kind: "channel", channel: rest };
    case "fraud": {
      const split = rest.indexOf(":");
      return {
        kind: "fraud",
        outcome: rest.slice(0, split) as FraudOutcomeName,
        rule: rest.slice(split + 1),
      };
    }
    default:
      return null;
  }
}

/**
 * The moves a change makes, as the engine applies them inside the write.
 * `at` is in milliseconds.
 */
export interface StatsMoves {
  count(scope: string, at: number, name: string, n: number): void;
  /** A referral joins its referrer's referrals in the scope (for referrersActive), at its creation. */
  attribute(scope: string, referralId: string, referrerId: string, at: number): void;
  /** A referral (created at `at`) leaves its referrer's referrals in the scope. */
  unattribute(scope: string, referralId: string, referrerId: string, at: number): void;
  /**
   * A campaign (`campaignScope`) was created (`previous` null) or its time
   * zone changed: its zone-day counters are built again for `timeZone`,
   * and its environment's keep `timeZone`'s days (and drop `previous`'s
   * once no campaign has it).
   */
  zoneChanged(campaignScope: string, timeZone: string, previous: string | null): void;
  /**
   * A referral of `referrerId` accepted (`delta` 1, at `acceptedAt`) or no
   * longer (-1): the campaign's leaderboard row and its acceptances (which
   * any other window ranks).
   */
  lead(
    scope: string,
    referralId: string,
    referrerId: string,
    delta: 1 | -1,
    acceptedAt: number,
  ): void;
}

/** The fields of a referral the numbers read. */
export interface ReferralFacts {
  _id: string;
  applicationId: string;
  environment: string;
  campaignId: string;
  referrerId: string;
  status: ReferralStatusName;
  createdAt: Date | string;
  updatedAt: Date | string;
  statusHistory?: readonly { toStatus: ReferralStatusName; changedAt: Date | string }[];
  suspectedFrauds?: readonly {
    readonly type: string;
    readonly action?: string | null;
    readonly shadow?: boolean | null;
  }[];
}

const ms = (value: Date | string | number): number =>
  value instanceof Date ? value.getTime() : new Date(value).getTime();

/**
 * Whether a record carries what its numbers need: one without (a partial
 * document a test or an import writes) moves nothing rather than failing
 * its write.
 */
function countable(record: { applicationId?: string; createdAt?: Date | string }): boolean {
  return Boolean(record.applicationId) && Number.isFinite(ms(record.createdAt ?? Number.NaN));
}

/** When a referral last changed status: its newest history entry. */
function lastChangeAt(referral: ReferralFacts): number {
  const last = referral.statusHistory?.at(-1);
  return ms(last?.changedAt ?? referral.updatedAt);
}

/** When a referral was accepted: its history's acceptance. */
function acceptedAt(referral: ReferralFacts): number {
  const entry = referral.statusHistory?.findLast((change) => change.toStatus === "accepted");
  return ms(entry?.changedAt ?? referral.updatedAt);
}

/** How a referral's creation or change moves the numbers. */
export function moveReferralStats(
  before: ReferralFacts | null,
  after: ReferralFacts,
  moves: StatsMoves,
): void {
  if (!countable(after)) return;
  const scopes = [
    statsScope(after.applicationId, after.environment, after.campaignId),
    statsScope(after.applicationId, after.environment, null),
  ];
  const createdAt = ms(after.createdAt);
  if (!before) {
    for (const scope of scopes) {
      moves.count(scope, createdAt, metric.created, 1);
      moves.count(scope, createdAt, metric.reached(after.status), 1);
      moves.attribute(scope, after._id, after.referrerId, createdAt);
      countVerdicts(after, scope, createdAt, 1, moves);
    }
    if (after.status === "accepted") accepted(after, scopes, moves);
    return;
  }
  if (before.referrerId !== after.referrerId) {
    for (const scope of scopes) {
      moves.unattribute(scope, before._id, before.referrerId, createdAt);
      moves.attribute(scope, after._id, after.referrerId, createdAt);
      countVerdicts(before, scope, createdAt, -1, moves);
      countVerdicts(after, scope, createdAt, 1, moves);
    }
  }
  if (before.status === after.status) return;
  const changedAt = lastChangeAt(after);
  for (const scope of scopes) moves.count(scope, changedAt, metric.reached(after.status), 1);
  if (before.status === "accepted") unaccepted(before, scopes, moves);
  if (after.status === "accepted") accepted(after, scopes, moves);
}

/**
 * A referral's current verdicts, counted at its creation per rule and what
 * each did: a re-attribution takes its old verdicts back and counts the
 * new ones, so the counts are those of the referrals created in a period
 * as their verdicts stand (as a recount from the records finds them).
 */
function countVerdicts(
  referral: ReferralFacts,
  scope: string,
  createdAt: number,
  delta: 1 | -1,
  moves: StatsMoves,
): void {
  for (const verdict of referral.suspectedFrauds ?? []) {
    // A verdict stored before actions flagged.
    const outcome = verdict.shadow ? "shadow" : ((verdict.action ?? "flag") as FraudOutcomeName);
    moves.count(scope, createdAt, metric.fraud(verdict.type, outcome), delta);
  }
}

function accepted(referral: ReferralFacts, scopes: string[], moves: StatsMoves): void {
  const at = acceptedAt(referral);
  const createdAt = ms(referral.createdAt);
  const bin = metric.conversionBin(conversionBinOf(Math.floor((at - createdAt) / 1000)));
  for (const scope of scopes) {
    moves.count(scope, createdAt, metric.cohortAccepted, 1);
    moves.count(scope, at, bin, 1);
  }
  const [campaign] = scopes as [string];
  moves.lead(campaign, referral._id, referral.referrerId, 1, at);
}

function unaccepted(referral: ReferralFacts, scopes: string[], moves: StatsMoves): void {
  const at = acceptedAt(referral);
  for (const scope of scopes) moves.count(scope, ms(referral.createdAt), metric.cohortAccepted, -1);
  const [campaign] = scopes as [string];
  moves.lead(campaign, referral._id, referral.referrerId, -1, at);
}

/** The fields of a campaign the numbers read. */
export interface CampaignFacts {
  _id: string;
  applicationId: string;
  environment: string;
  timeZone?: string;
}

/**
 * A campaign created or given another time zone: its zone-day counters are
 * built again, and its environment's keep that zone's days too.
 */
export function moveCampaignStats(
  before: CampaignFacts | null,
  after: CampaignFacts,
  moves: StatsMoves,
): void {
  if (!after.applicationId) return;
  const zone = timeZoneOfCampaign(after);
  const previous = before ? timeZoneOfCampaign(before) : null;
  if (previous === zone) return;
  moves.zoneChanged(statsScope(after.applicationId, after.environment, after._id), zone, previous);
}

/** The campaign of a scope; null for the environment's. */
export function campaignOfScope(scope: string): string | null {
  const campaign = scope.slice(scope.lastIndexOf("|") + 1);
  return campaign === "*" ? null : campaign;
}

/** The fields of a customer the numbers read. */
export interface CustomerFacts {
  applicationId: string;
  environment: string;
  createdAt: Date | string;
}

/** A customer identified for the first time. */
export function moveCustomerStats(
  before: CustomerFacts | null,
  after: CustomerFacts,
  moves: StatsMoves,
): void {
  countCreation(before, after, metric.identified, moves);
}

/** A record created: one more of `name` in its environment, at its creation. */
function countCreation(
  before: CustomerFacts | null,
  after: CustomerFacts,
  name: string,
  moves: StatsMoves,
): void {
  if (before || !countable(after)) return;
  moves.count(
    statsScope(after.applicationId, after.environment, null),
    ms(after.createdAt),
    name,
    1,
  );
}

/** The fields of a checkpoint the numbers read. */
export interface CheckpointFacts {
  applicationId: string;
  environment: string;
  name: string;
  createdAt: Date | string;
}

/** A checkpoint ingested. */
export function moveCheckpointStats(
  before: CheckpointFacts | null,
  after: CheckpointFacts,
  moves: StatsMoves,
): void {
  countCreation(before, after, metric.checkpoint(after.name), moves);
}

/** The fields of a reward grant the numbers read. */
export interface GrantFacts {
  applicationId: string;
  environment: string;
  campaignId: string | null;
  kind: string;
  status: RewardGrantStatusName;
  value: { currency: string | null };
  amountMinor: number | null;
  createdAt: Date | string;
  updatedAt: Date | string;
  statusHistory?: readonly { changedAt: Date | string }[];
}

/**
 * A grant created or moved: it reaches its status, with its amount; its
 * value is committed when it is approved, or fulfilled without approval.
 * Clawbacks are not acquisition costs and are left out.
 */
export function moveGrantStats(
  before: GrantFacts | null,
  after: GrantFacts,
  moves: StatsMoves,
): void {
  if (after.kind === "clawback" || !countable(after)) return;
  if (before && before.status === after.status) return;
  const at = before
    ? ms(after.statusHistory?.at(-1)?.changedAt ?? after.updatedAt)
    : ms(after.createdAt);
  const currency = after.value.currency;
  const amount = after.amountMinor ?? 0;
  const committed =
    after.status === "approved" || (after.status === "fulfilled" && before?.status !== "approved");
  const scopes = [statsScope(after.applicationId, after.environment, null)];
  if (after.campaignId)
    scopes.unshift(statsScope(after.applicationId, after.environment, after.campaignId));
  for (const scope of scopes) {
    moves.count(scope, at, metric.grants(after.status, currency), 1);
    if (amount !== 0) moves.count(scope, at, metric.grantsMinor(after.status, currency), amount);
    if (committed) moves.count(scope, at, metric.committed(currency), 1);
    if (committed && currency && amount !== 0)
      moves.count(scope, at, metric.committedMinor(currency), amount);
  }
}

/** The fields of a click the numbers read. */
export interface ClickFacts {
  applicationId: string;
  environment: string;
  campaignId: string;
  channel: string | null;
  bot: string | null;
  firstOfVisitor: boolean;
  createdAt: Date | string;
}

/**
 * A click recorded (clicks are never changed): a person's counts as a
 * click, as a visitor when it was the visitor's first, and on its channel;
 * a bot's fetch by its reason. In its campaign and its environment.
 */
export function moveClickStats(
  before: ClickFacts | null,
  after: ClickFacts,
  moves: StatsMoves,
): void {
  if (before || !countable(after)) return;
  const at = ms(after.createdAt);
  for (const scope of [
    statsScope(after.applicationId, after.environment, after.campaignId),
    statsScope(after.applicationId, after.environment, null),
  ]) {
    if (after.bot) {
      moves.count(scope, at, metric.bots(after.bot), 1);
      continue;
    }
    moves.count(scope, at, metric.clicks, 1);
    if (after.firstOfVisitor) moves.count(scope, at, metric.visitors, 1);
    if (after.channel) moves.count(scope, at, metric.channel(after.channel), 1);
  }
}
