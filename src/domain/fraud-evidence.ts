import { createHmac } from "node:crypto";
import Bowser from "bowser";
import { distance } from "fastest-levenshtein";
import ipaddr from "ipaddr.js";
import { canonicalEmail } from "./email.js";

/**
 * The evidence kept with a referral (docs/fraud.md): what the fraud rules
 * judge it by, gathered when it is created or re-attributed, so a verdict
 * can be explained and a candidate policy replayed later. Pure: the store
 * gathers the counts, the transport the connection's facts.
 */

/** The shape's version: stored with each evidence, so older ones stay readable. */
export const evidenceVersion = 1;

/** What an email address says. */
export interface EmailEvidence {
  /** The mailbox it reaches (see `canonicalEmail`). */
  readonly canonical: string;
  readonly domain: string;
  /** Its domain is on the disposable list (with the operator's additions, without their removals). */
  readonly disposable: boolean;
  /** A privacy relay's: a real person hiding an address, never disposable. */
  readonly masked: boolean;
}

/** Where a party's network facts came from. */
export type NetworkSourceName = "connection" | "backend";

/**
 * A party's network, as keyed hashes only (HMAC-SHA256 with the
 * application's network key): the address is never kept.
 */
export interface NetworkEvidence {
  readonly addressHash: string;
  /** The same of its /24 (IPv4) or /64 (IPv6). */
  readonly networkHash: string;
  /** Browser and system, as `bowser` names them ("Safari on iOS"); null when unknown. */
  readonly userAgentFamily: string | null;
  readonly deviceId: string | null;
  readonly source: NetworkSourceName;
  readonly seenAt: Date;
}

/** The evidence of one attribution of a referral. */
export interface ReferralEvidence {
  readonly version: number;
  readonly gatheredAt: Date;
  readonly referrerEmail: EmailEvidence | null;
  readonly refereeEmail: EmailEvidence | null;
  /** The disposable list the email facts were read from: its package version and the operator's changes. */
  readonly disposableListVersion: string;
  /** How alike the names are, from 0 (nothing shared) to 1 (the same); null without both. */
  readonly nameSimilarity: number | null;
  /** Edits between the canonical local parts, when both emails share a domain; null otherwise. */
  readonly emailLocalDistance: number | null;
  readonly refereeAgeSeconds: number;
  readonly referrerAgeSeconds: number;
  /*
   * The counts below are gathered when a rule of the campaign's policy
   * reads them (see `factsRead`), null otherwise: a count no rule reads
   * is a query each referral would pay for nothing.
   */
  /** The referrer's other referrals flagged, and rejected, when this one was gathered. */
  readonly referrerFlagged: number | null;
  readonly referrerRejected: number | null;
  /** Referrals attributed to the referrer in the hour and the day before, this one excluded. */
  readonly referrerReferralsLastHour: number | null;
  readonly referrerReferralsLastDay: number | null;
  /** Referrals from the referee's network in the day before; null without network facts. */
  readonly networkReferralsLastDay: number | null;
  /**
   * People's clicks on the referrer's share links from the referee's network
   * in the day before (a visitor's repeat within the hour counted once, bots
   * never); null without network facts, or on evidence gathered before clicks.
   */
  readonly networkClicksLastDay?: number | null;
  /** Another customer whose email reaches the referee's mailbox was already referred. */
  readonly refereeMailboxReferred: boolean | null;
  readonly refereeNetwork: NetworkEvidence | null;
  readonly referrerNetwork: NetworkEvidence | null;
}

/**
 * Privacy relays: addresses that forward to a real person's mailbox
 * (Apple's Hide My Email, DuckDuckGo, SimpleLogin, Firefox Relay, addy).
 * People use them to keep their address private, so they are `masked`,
 * never disposable.
 */
const maskedDomains: ReadonlySet<string> = new Set([
  "privaterelay.appleid.com",
  "duck.com",
  "simplelogin.com",
  "simplelogin.co",
  "simplelogin.fr",
  "slmail.me",
  "aleeas.com",
  "8alias.com",
  "mozmail.com",
  "addy.io",
  "anonaddy.com",
  "anonaddy.me",
]);

/** The domains counted disposable, and the version to record with what they say. */
export interface DisposableDomains {
  readonly version: string;
  has(domain: string): boolean;
}

/** What an email says, or null without one. */
export function emailEvidence(
  email: string | null,
  disposable: DisposableDomains,
  /** The email's canonical form when known already (a customer keeps it). */
  known?: string | null,
): EmailEvidence | null {
  if (!email) return null;
  const canonical = known ?? canonicalEmail(email);
  const domain = canonical.slice(canonical.lastIndexOf("@") + 1);
  const masked = isMaskedDomain(domain);
  return { canonical, domain, disposable: !masked && disposable.has(domain), masked };
}

function isMaskedDomain(domain: string): boolean {
  if (maskedDomains.has(domain)) return true;
  // SimpleLogin and addy also serve subdomains of their users' own.
  for (const relay of maskedDomains) if (domain.endsWith(`.${relay}`)) return true;
  return false;
}

/** A name as the comparison reads it: lowercase, without accents, spaces or punctuation. */
function comparableName(name: string): string {
  return name
    .normalize("NFKD")
    .replace(/\p{M}/gu, "")
    .toLowerCase()
    .replace(/[^\p{L}\p{N}]/gu, "");
}

/** How alike two names are: 1 minus their edit distance over the longer's length. */
export function nameSimilarity(a: string | null, b: string | null): number | null {
  if (!a || !b) return null;
  const left = comparableName(a);
  const right = comparableName(b);
  const longest = Math.max(left.length, right.length);
  if (longest === 0) return null;
  return Math.round((1 - distance(left, right) / longest) * 1000) / 1000;
}

/** Edits between two emails' canonical local parts when they share a domain; null otherwise. */
export function emailLocalDistance(
  a: EmailEvidence | null,
  b: EmailEvidence | null,
): number | null {
  if (!a || !b || a.domain !== b.domain) return null;
  const local = (email: EmailEvidence) =>
    email.canonical.slice(0, email.canonical.lastIndexOf("@"));
  return distance(local(a), local(b));
}

/** What a call says of the end user's device: its address, User-Agent and device id. */
export interface EndUser {
  readonly address: string | null;
  readonly userAgent: string | null;
  readonly deviceId: string | null;
}

/**
 * A party's network facts from what its call said, hashed with the
 * application's network key; null without an address that parses.
 */
export function networkEvidence(
  endUser: EndUser,
  networkKey: Buffer,
  source: NetworkSourceName,
  seenAt: Date,
  /** How the hashes and the family are made: `networkHashes` and `userAgentFamily`, or a memo of them. */
  read: {
    readonly hashes: typeof networkHashes;
    readonly family: typeof userAgentFamily;
  } = { hashes: networkHashes, family: userAgentFamily },
): NetworkEvidence | null {
  const hashes = read.hashes(endUser.address, networkKey);
  if (!hashes) return null;
  return {
    ...hashes,
    userAgentFamily: read.family(endUser.userAgent),
    deviceId: endUser.deviceId,
    source,
    seenAt,
  };
}

/** The keyed hashes of an address and of its network; null when it is not an address. */
export function networkHashes(
  address: string | null,
  networkKey: Buffer,
): { readonly addressHash: string; readonly networkHash: string } | null {
  const network = networkOf(address);
  if (!network) return null;
  return {
    addressHash: keyedHash(networkKey, `address:${network.address}`),
    networkHash: keyedHash(networkKey, `network:${network.prefix}`),
  };
}

/** An address and its /24 (IPv4) or /64 (IPv6), in one spelling; null when it is not one. */
function networkOf(address: string | null): { address: string; prefix: string } | null {
  if (!address || !ipaddr.isValid(address)) return null;
  const parsed = ipaddr.process(address);
  if (parsed.kind() === "ipv4") {
    const octets = (parsed as ipaddr.IPv4).octets;
    return { address: parsed.toString(), prefix: `${octets.slice(0, 3).join(".")}.0/24` };
  }
  const parts = (parsed as ipaddr.IPv6).parts;
  const prefix = `${parts
    .slice(0, 4)
    .map((part) => part.toString(16))
    .join(":")}::/64`;
  return { address: parsed.toNormalizedString(), prefix };
}

/** 128 bits of HMAC-SHA256, in hex: enough to tell addresses apart, nothing to read them back by. */
/**
 * A visitor of a share link: its address and full User-Agent, keyed like
 * the network facts (one person's browser on one network, never its
 * address); null without an address.
 */
export function visitorHash(
  address: string | null,
  userAgent: string | null,
  networkKey: Buffer,
): string | null {
  if (!address) return null;
  return keyedHash(networkKey, `visitor:${address}\n${userAgent ?? ""}`);
}

function keyedHash(key: Buffer, value: string): string {
  return createHmac("sha256", key).update(value).digest("hex").slice(0, 32);
}

/** "Safari on iOS", "Chrome on Android"; null when the User-Agent names no browser. */
export function userAgentFamily(userAgent: string | null): string | null {
  if (!userAgent) return null;
  const parsed = Bowser.parse(userAgent);
  const browser = parsed.browser.name;
  if (!browser) return null;
  return parsed.os.name ? `${browser} on ${parsed.os.name}` : browser;
}
