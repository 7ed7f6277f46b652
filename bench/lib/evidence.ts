import { statusFromRules } from "../../src/domain/attribution.js";
import {
  emailEvidence,
  emailLocalDistance,
  evidenceVersion,
  type NetworkEvidence,
  nameSimilarity,
  networkHashes,
  type ReferralEvidence,
  userAgentFamily,
} from "../../src/domain/fraud-evidence.js";
import {
  defaultRuleSettings,
  judgeAttribution,
  riskOf,
  type SuspectedFraud,
} from "../../src/domain/fraud-rules.js";
import { newId } from "../../src/domain/ids.js";
import type { ReferralStatusName } from "../../src/domain/referral-status.js";
import type { ReferralRisk, StatusChange } from "../../src/domain/referral-transitions.js";
import { disposableDomains } from "../../src/services/evidence.js";

/**
 * A campaign's history of referrals with fraud evidence, for the fraud
 * suite's backtest (`SeedPlan.evidenceReferrals` in seed.ts): who referred
 * whom, when, and what the evidence said, varied as a real program's is.
 * Everything but the ids and the clock is a function of the referral's
 * number (a fixed hash: the same in every run), except what depends on the
 * referrals before it, which {@link EvidenceHistory.next} works out in attribution order:
 * the velocity counts, the referrer's history, the verdicts of the
 * environment's default rules (the campaign has no policy of its own) and
 * the status they gave.
 *
 * The mix, of the referrals: 12% in bursts of 24 a minute apart by one of
 * 20 busy referrers (the last four of each burst pass the velocity
 * limit); the rest by referrers picked with a skew (a few popular ones
 * refer hundreds); referees 2% older than a week, 5% on disposable
 * domains, 3% on privacy relays, 2% one character off the referrer's
 * address, 1% on a subdomain of the deny domain of `lists`, 1% reusing an
 * earlier referee's mailbox, 0.4% the referrer's own mailbox (a `+` tag),
 * 3% a name one letter off the referrer's; networks: 8% none, 3% the
 * referrer's (a third its address), 4% the busy network of the day (one
 * of 50 in turn: past the network velocity limit from about 8,000
 * referrals), 4% one of 60 shared ones, 0.5% the referrer's device. What
 * reviewers and the reward trigger did later is in `laterChanges`.
 */

/** The days the referrals spread over, up to now. */
export const evidenceSpreadDays = 30;

/** The candidate's lists the history is made for: the domain denied, and the email trusted. */
export interface EvidenceLists {
  /** A busy referrer's address: its referrals, flagged by velocity when made, are then trusted. */
  readonly allowEmail: string;
  /** Referees on a subdomain of it (`mail.fraud.example`) are rejected. */
  readonly denyDomain: string;
}

/** One customer of the history: a referrer or a referee. */
export interface EvidenceCustomer {
  readonly externalUserId: string;
  readonly email: string;
  readonly name: string;
  readonly createdAt: Date;
  readonly network: NetworkEvidence | null;
}

/** One referral of the history, as its rules and its later moves left it. */
export interface EvidenceReferral {
  /** The referrer's number (see {@link EvidenceHistory.referrer}). */
  readonly referrer: number;
  readonly at: Date;
  readonly status: ReferralStatusName;
  readonly suspectedFrauds: SuspectedFraud[];
  readonly statusHistory: StatusChange[];
  readonly evidence: ReferralEvidence;
  readonly risk: ReferralRisk;
  readonly updatedAt: Date;
}

const second = 1000;
const hourMs = 3_600_000;
const dayMs = 24 * hourMs;
// As the service's evidence counts: beyond this they say nothing more.
const countCap = 100;

const denyDomain = "fraud.example";
const blockSize = 200;
const burstSize = 24;
const burstGapMs = 60 * second;
const busyReferrers = 20;
const referralsPerReferrer = 40;

const commonDomains = ["gmail.com", "outlook.com", "yahoo.com", "icloud.com", "proton.me"];
const throwaway = ["mailinator.com", "yopmail.com", "guerrillamail.com", "10minutemail.com"];
const relays = ["privaterelay.appleid.com", "duck.com", "mozmail.com"];
const firstNames = `Ada Alan Grace Linus Margaret Ken Barbara Dennis Frances John Radia Tim
  Sophie Edsger Hedy Niklaus Karen Donald Shafi Leslie`.split(/\s+/);
const lastNames = `Lovelace Turing Hopper Torvalds Hamilton Thompson Liskov Ritchie Allen Backus
  Perlman Berners-Lee Wilson Dijkstra Lamarr Wirth Jones Knuth Goldwasser Lamport`.split(/\s+/);
const userAgents = [
  "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1",
  "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Mobile Safari/537.36",
  "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36",
  "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_4) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Safari/605.1.15",
  "Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0",
];
const families = userAgents.map(userAgentFamily);
// The keyed hashes are the service's own (HMAC-SHA256); the key is the bench's.
const networkKey = Buffer.alloc(32, 7);

/** A fixed pseudo-random number in [0, 1) for `(n, salt)`: the same in every run. */
function unit(n: number, salt: number): number {
  let h = Math.imul(n ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(salt + 0x632be5ab, 0xc2b2ae35);
  h ^= h >>> 16;
  h = Math.imul(h, 0x7feb352d);
  h ^= h >>> 15;
  h = Math.imul(h, 0x846ca68b);
  h ^= h >>> 16;
  return (h >>> 0) / 2 ** 32;
}

function pick<T>(list: readonly T[], n: number, salt: number): T {
  return list[Math.floor(unit(n, salt) * list.length)] as T;
}

/** What the referee of a referral is, by kind of email. */
type EmailKind = "self" | "disposable" | "relay" | "denied" | "similar" | "common";

/** The history of `referrals` referrals ending at `now`; see the module's comment. */
export class EvidenceHistory {
  /** How many referrers: one per 40 referrals, the last 20 of them the busy ones. */
  readonly referrers: number;
  readonly lists: EvidenceLists;
  private readonly start: number;
  private readonly normalGapMs: number;
  /** The pinned disposable list, as the service reads it. */
  private readonly disposable = disposableDomains();
  private readonly settings = defaultRuleSettings();
  private readonly referrerCustomers: EvidenceCustomer[] = [];
  /** The address behind each referrer's network, to put referees on it. */
  private readonly referrerAddresses: string[] = [];
  // What `next` has seen so far, in attribution order.
  private nextNumber = 0;
  private readonly referrerTimes = new Map<number, number[]>();
  private readonly networkTimes = new Map<string, number[]>();
  private readonly referrerFlagged = new Map<number, number>();
  private readonly referrerRejected = new Map<number, number>();

  constructor(
    readonly referrals: number,
    private readonly now: Date,
    /** The API key the creations and reviews are recorded as made by. */
    private readonly actorId: string,
  ) {
    this.referrers = Math.max(busyReferrers + 1, Math.round(referrals / referralsPerReferrer));
    const spread = evidenceSpreadDays * dayMs;
    const bursts = this.burstsBefore(referrals);
    const normal = referrals - bursts;
    this.normalGapMs = normal > 0 ? Math.max(second, (spread - bursts * burstGapMs) / normal) : 0;
    const total = bursts * burstGapMs + normal * this.normalGapMs;
    this.start = now.getTime() - Math.max(total, spread);
    for (let j = 0; j < this.referrers; j++) this.referrerCustomers.push(this.makeReferrer(j));
    this.lists = {
      allowEmail: (this.referrerCustomers[this.busyReferrer(0)] as EvidenceCustomer).email,
      denyDomain,
    };
  }

  /** Referrer `j` (`f-<j>`): created before the history began, most with a network. */
  referrer(j: number): EvidenceCustomer {
    return this.referrerCustomers[j] as EvidenceCustomer;
  }

  /** The referrer of referral `k`: a burst's busy referrer, or one picked with a skew. */
  referrerOf(k: number): number {
    if (k % blockSize < burstSize) return this.busyReferrer(Math.floor(k / blockSize));
    const u = unit(k, 1);
    return Math.min(this.referrers - 1, Math.floor(this.referrers * u * u));
  }

  /** When referral `k` was attributed: strictly later than `k - 1`, the last one before now. */
  at(k: number): Date {
    const bursts = this.burstsBefore(k);
    return new Date(Math.floor(this.start + bursts * burstGapMs + (k - bursts) * this.normalGapMs));
  }

  /** The referee of referral `k` (`g-<k>`). */
  referee(k: number): EvidenceCustomer {
    const j = this.referrerOf(k);
    const referrer = this.referrer(j);
    const at = this.at(k).getTime();
    const ageSeconds =
      unit(k, 2) < 0.02
        ? Math.floor((8 + unit(k, 3) * 400) * 86_400)
        : Math.floor(5 + unit(k, 3) * 7200);
    const similarName = unit(k, 4) < 0.03;
    return {
      externalUserId: `g-${k}`,
      email: this.refereeEmail(k, referrer),
      name: similarName ? oneLetterOff(referrer.name, k) : personName(k),
      createdAt: new Date(at - ageSeconds * 1000),
      network: this.refereeNetwork(k, j, new Date(at)),
    };
  }

  /**
   * The evidence, verdicts and status of referral `k`; called for every
   * referral in order, from 0, as the counts depend on the ones before.
   */
  next(k: number, ids: { referrerId: string; refereeId: string }): EvidenceReferral {
    if (k !== this.nextNumber) throw new Error(`evidence history: referral ${k} out of order`);
    this.nextNumber += 1;
    const j = this.referrerOf(k);
    const referrer = this.referrer(j);
    const referee = this.referee(k);
    const at = this.at(k);
    const time = at.getTime();
    const referrerEmail = emailEvidence(referrer.email, this.disposable);
    const refereeEmail = emailEvidence(referee.email, this.disposable);
    const times = this.referrerTimes.get(j) ?? [];
    const network = referee.network?.networkHash;
    const fromNetwork = network ? (this.networkTimes.get(network) ?? []) : null;
    const evidence: ReferralEvidence = {
      version: evidenceVersion,
      gatheredAt: at,
      referrerEmail,
      refereeEmail,
      disposableListVersion: this.disposable.version,
      nameSimilarity: nameSimilarity(referrer.name, referee.name),
      emailLocalDistance: emailLocalDistance(referrerEmail, refereeEmail),
      refereeAgeSeconds: secondsBetween(referee.createdAt, at),
      referrerAgeSeconds: secondsBetween(referrer.createdAt, at),
      referrerFlagged: Math.min(countCap, this.referrerFlagged.get(j) ?? 0),
      referrerRejected: Math.min(countCap, this.referrerRejected.get(j) ?? 0),
      referrerReferralsLastHour: countSince(times, time - hourMs),
      referrerReferralsLastDay: countSince(times, time - dayMs),
      networkReferralsLastDay: fromNetwork ? countSince(fromNetwork, time - dayMs) : null,
      refereeMailboxReferred: this.reusesMailbox(k),
      refereeNetwork: referee.network,
      referrerNetwork: referrer.network,
    };
    times.push(time);
    this.referrerTimes.set(j, times);
    if (network && fromNetwork) {
      fromNetwork.push(time);
      this.networkTimes.set(network, fromNetwork);
    }
    // The campaign has no policy of its own: the environment's default rules judged it.
    const frauds = judgeAttribution({ ...ids, evidence }, this.settings);
    const created: StatusChange = {
      fromStatus: null,
      toStatus: statusFromRules(frauds),
      cause: "created",
      actorId: this.actorId,
      reason: actingTypes(frauds) || null,
      changedAt: at,
    };
    const history = [created, ...this.laterChanges(k, created, frauds)];
    const last = history[history.length - 1] as StatusChange;
    if (last.toStatus === "flagged") {
      this.referrerFlagged.set(j, (this.referrerFlagged.get(j) ?? 0) + 1);
    }
    if (last.toStatus === "rejected") {
      this.referrerRejected.set(j, (this.referrerRejected.get(j) ?? 0) + 1);
    }
    return {
      referrer: j,
      at,
      status: last.toStatus,
      suspectedFrauds: frauds,
      statusHistory: history,
      evidence,
      risk: riskOf(frauds),
      updatedAt: last.changedAt,
    };
  }

  /**
   * What happened after the creation. Reviewers rejected 8 in 10 referrals
   * flagged as a self-referral or for velocity a day later; of the other
   * flagged ones, they accepted 6 in 10 (back to pending) and rejected 1;
   * the rest still wait. A third of the pending ones were then accepted by
   * the reward trigger two hours later. Never after now.
   */
  private laterChanges(
    k: number,
    created: StatusChange,
    frauds: readonly SuspectedFraud[],
  ): StatusChange[] {
    const changes: StatusChange[] = [];
    let status = created.toStatus;
    const move = (toStatus: ReferralStatusName, after: number, review: string | null) => {
      const changedAt = new Date(Math.min(this.now.getTime(), created.changedAt.getTime() + after));
      changes.push({
        fromStatus: status,
        toStatus,
        cause: review ? "review" : "checkpoint",
        actorId: review ? this.actorId : newId("chk", changedAt),
        reason: review ? `fraud review ${review}: bench` : 'checkpoint "purchase"',
        changedAt,
      });
      status = toStatus;
    };
    if (status === "flagged") {
      const type = frauds.find((fraud) => fraud.action === "flag")?.type ?? "review";
      const ring = frauds.some(
        (fraud) => fraud.type === "self_referral" || fraud.type === "velocity",
      );
      const u = unit(k, 20);
      if (ring ? u < 0.8 : u >= 0.6 && u < 0.7) move("rejected", dayMs, `rejected (${type})`);
      else if (!ring && u < 0.6) move("pending", dayMs, `accepted (${type})`);
    }
    if (status === "pending" && unit(k, 21) < 1 / 3) {
      move("accepted", (changes.length > 0 ? dayMs : 0) + 2 * hourMs, null);
    }
    return changes;
  }

  private burstsBefore(k: number): number {
    return Math.floor(k / blockSize) * burstSize + Math.min(k % blockSize, burstSize);
  }

  /** The `i`th busy referrer, in turn: the last {@link busyReferrers} referrers. */
  private busyReferrer(i: number): number {
    return this.referrers - busyReferrers + (i % busyReferrers);
  }

  private makeReferrer(j: number): EvidenceCustomer {
    const name = personName(1_000_000 + j);
    const local = `${name.toLowerCase().replace(/[^a-z]+/g, ".")}${j}`;
    const createdAt = new Date(this.start - (1 + Math.floor(unit(j, 10) * 365)) * dayMs);
    const address = `${100 + (j >> 16)}.${(j >> 8) & 255}.${j & 255}.${10 + (j % 200)}`;
    this.referrerAddresses[j] = address;
    return {
      externalUserId: `f-${j}`,
      email: `${local}@${pick(commonDomains, j, 11)}`,
      name,
      createdAt,
      network:
        unit(j, 12) < 0.8
          ? networkOf(address, pick(families, j, 13), `device-f-${j}`, createdAt)
          : null,
    };
  }

  private emailKind(k: number): EmailKind {
    const u = unit(k, 5);
    if (u < 0.004) return "self";
    if (u < 0.054) return "disposable";
    if (u < 0.084) return "relay";
    if (u < 0.094) return "denied";
    if (u < 0.114) return "similar";
    return "common";
  }

  private reusesMailbox(k: number): boolean {
    return k >= 7 && unit(k, 6) < 0.01;
  }

  private refereeEmail(k: number, referrer: EvidenceCustomer): string {
    // An earlier referee's mailbox, spelled otherwise (a `+` tag).
    if (this.reusesMailbox(k)) {
      const earlier = this.ownEmail(k - 7, this.referrer(this.referrerOf(k - 7)));
      const at = earlier.lastIndexOf("@");
      return `${earlier.slice(0, at)}+again${k}${earlier.slice(at)}`;
    }
    return this.ownEmail(k, referrer);
  }

  /** Referee `k`'s email by its kind, before any reuse of another's mailbox. */
  private ownEmail(k: number, referrer: EvidenceCustomer): string {
    const [local, domain] = referrer.email.split("@") as [string, string];
    const person = `${personName(k)
      .toLowerCase()
      .replace(/[^a-z]+/g, ".")}${k}`;
    switch (this.emailKind(k)) {
      case "self":
        return `${local}+${k}@${domain}`;
      case "disposable":
        return `${person}@${pick(throwaway, k, 7)}`;
      case "relay":
        return `${person.replace(/\./g, "")}@${pick(relays, k, 7)}`;
      case "denied":
        return `${person}@mail.${denyDomain}`;
      case "similar":
        return `${local}${String.fromCharCode(97 + (k % 26))}@${domain}`;
      case "common":
        return `${person}@${pick(commonDomains, k, 7)}`;
    }
  }

  private refereeNetwork(k: number, j: number, at: Date): NetworkEvidence | null {
    const referrer = this.referrer(j);
    const u = unit(k, 8);
    if (u < 0.08) return null;
    const family = pick(families, k, 9);
    const sharesDevice = referrer.network && unit(k, 14) < 0.005;
    const device = sharesDevice
      ? (referrer.network?.deviceId ?? null)
      : unit(k, 15) < 0.6
        ? `device-g-${k}`
        : null;
    const host = 1 + Math.floor(unit(k, 16) * 250);
    let address: string;
    if (u < 0.11 && referrer.network) {
      // The referrer's address (a third), or another of its /24.
      const own = this.referrerAddresses[j] as string;
      address = unit(k, 17) < 1 / 3 ? own : `${own.slice(0, own.lastIndexOf("."))}.${host}`;
    } else if (u < 0.15) {
      // A busy network of the day (one of 50 in turn), then one of 60 shared ones.
      const day = Math.floor((at.getTime() - this.start) / dayMs);
      address = `198.51.${100 + (day % 50)}.${host}`;
    } else if (u < 0.19) {
      address = `203.0.${Math.floor(unit(k, 18) * 60)}.${host}`;
    } else {
      address = `${10 + (k >> 16)}.${(k >> 8) & 255}.${k & 255}.${host}`;
    }
    return networkOf(address, family, device, at);
  }
}

function networkOf(
  address: string,
  family: string | null,
  deviceId: string | null,
  seenAt: Date,
): NetworkEvidence {
  const hashes = networkHashes(address, networkKey);
  if (!hashes) throw new Error(`not an address: ${address}`);
  return { ...hashes, userAgentFamily: family, deviceId, source: "connection", seenAt };
}

function personName(n: number): string {
  return `${pick(firstNames, n, 30)} ${pick(lastNames, n, 31)}`;
}

/** `name` with one letter changed: a near-namesake. */
function oneLetterOff(name: string, n: number): string {
  const at = 1 + (n % (name.length - 1));
  const letter = String.fromCharCode(97 + (n % 26));
  const changed = name[at] === letter ? "z" : letter;
  return `${name.slice(0, at)}${changed}${name.slice(at + 1)}`;
}

/** How many of the sorted `times` are at or after `since`, at most the cap: what the rules read. */
function countSince(times: readonly number[], since: number): number {
  let count = 0;
  for (let i = times.length - 1; i >= 0 && count < countCap; i--) {
    if ((times[i] as number) < since) break;
    count++;
  }
  return count;
}

function secondsBetween(from: Date, to: Date): number {
  return Math.max(0, Math.floor((to.getTime() - from.getTime()) / 1000));
}

/** The types of the verdicts that act, as a creation's reason names them. */
function actingTypes(frauds: readonly SuspectedFraud[]): string {
  return frauds
    .filter((fraud) => fraud.action !== "note")
    .map((fraud) => fraud.type)
    .join(", ");
}
