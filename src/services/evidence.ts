import { randomBytes } from "node:crypto";
import { createRequire } from "node:module";
import { isIP } from "node:net";
import type { HandlerContext } from "@connectrpc/connect";
import { disposableEmailBlocklistSet } from "disposable-email-domains-js";
import type { EndUserContext } from "../../gen/referral/v1/resources_pb.js";
import { rememberBounded } from "../domain/bounded-map.js";
import {
  type DisposableDomains,
  type EndUser,
  emailEvidence,
  emailLocalDistance,
  evidenceVersion,
  type NetworkEvidence,
  type NetworkSourceName,
  nameSimilarity,
  networkEvidence,
  networkHashes,
  type ReferralEvidence,
  userAgentFamily,
} from "../domain/fraud-evidence.js";
import { type CompiledPolicy, compilePolicy } from "../domain/fraud-policy.js";
import type { FraudPolicy } from "../domain/fraud-rules.js";
import type { Clock } from "../domain/tenancy.js";
import type { CampaignDoc, CustomerDoc } from "../store/documents.js";
import type { SecretBox } from "../store/secret-box.js";
import type { TenantStore } from "../store/tenant-store.js";
import { type Caller, callClientKey } from "./context.js";
import { invalidArgument, permissionDenied } from "./errors.js";
import { opened } from "./identity.js";
import { optionalText } from "./validate.js";

/**
 * The fraud evidence's gathering (docs/fraud.md): the disposable domains,
 * the application's network key, the end user a call is made for, and the
 * evidence of one attribution, from the store's counts.
 */

/** What gathering needs. */
export interface EvidenceDeps {
  readonly clock: Clock;
  readonly secretBox: SecretBox;
  readonly disposableDomains: DisposableDomains;
  /** The environment's thresholds: the policy of campaigns without one. */
  readonly fraudPolicy: FraudPolicy;
}

const packageName = "disposable-email-domains-js";

/**
 * The disposable domains: the pinned package's list, with the operator's
 * additions and without its removals (DISPOSABLE_EMAIL_DOMAINS_ADD and
 * _REMOVE). Its version names both, so a verdict says what it was read
 * against.
 */
export function disposableDomains(
  additions: readonly string[] = [],
  removals: readonly string[] = [],
): DisposableDomains {
  const listed = disposableEmailBlocklistSet();
  const added = new Set(additions.map((domain) => domain.toLowerCase()));
  const removed = new Set(removals.map((domain) => domain.toLowerCase()));
  const { version } = createRequire(import.meta.url)(`${packageName}/package.json`) as {
    version: string;
  };
  const changes = [
    added.size > 0 ? `+${added.size}` : "",
    removed.size > 0 ? `-${removed.size}` : "",
  ].filter(Boolean);
  return {
    version: `${packageName}@${version}${changes.length > 0 ? ` ${changes.join(" ")}` : ""}`,
    has: (domain) => !removed.has(domain) && (added.has(domain) || listed.has(domain)),
  };
}

/** A checked end-user context, as a call sent it. */
export interface CheckedContext {
  readonly ip: string | null;
  readonly userAgent: string | null;
  readonly deviceId: string | null;
}

/**
 * The request's end-user context, checked: an address that parses, a
 * User-Agent and a device id of bounded length. A public key may send the
 * device id only: its address and User-Agent are its connection's
 * (PERMISSION_DENIED naming the field otherwise).
 */
export function checkedContext(
  caller: Caller,
  context: EndUserContext | undefined,
): CheckedContext | undefined {
  if (!context) return undefined;
  const ip = optionalText(context.ip, "context.ip");
  const userAgent = optionalText(context.userAgent, "context.userAgent", 512);
  const deviceId = optionalText(context.deviceId, "context.deviceId", 128);
  if (caller.keyKind !== "secret") {
    const sent =
      ip !== undefined ? "context.ip" : userAgent !== undefined ? "context.userAgent" : null;
    if (sent) {
      throw permissionDenied(
        sent,
        "is the backend's to send (a secret key): a public key's network facts are its connection's",
      );
    }
  }
  if (ip !== undefined && isIP(ip) === 0) {
    throw invalidArgument("context.ip", "must be an IPv4 or IPv6 address");
  }
  return { ip: ip ?? null, userAgent: userAgent ?? null, deviceId: deviceId ?? null };
}

/**
 * The end user a call is made for: a public key's connection (address and
 * User-Agent) with the device id it sent; a secret key's context when it
 * passed an address. Null when there is none to take.
 */
export function endUserOf(
  caller: Caller,
  context: HandlerContext,
  sent: CheckedContext | undefined,
): (EndUser & { source: NetworkSourceName }) | null {
  if (caller.keyKind === "secret") {
    if (!sent?.ip) return null;
    return {
      address: sent.ip,
      userAgent: sent.userAgent,
      deviceId: sent.deviceId,
      source: "backend",
    };
  }
  const client = context.values.get(callClientKey);
  if (!client) return null;
  return {
    address: client.address,
    userAgent: client.userAgent,
    deviceId: sent?.deviceId ?? null,
    source: "connection",
  };
}

/**
 * The application's network key: made (random, sealed) at its first need;
 * null when the application keeps no network facts.
 */
export async function networkKeyOf(
  store: TenantStore,
  secretBox: SecretBox,
): Promise<Buffer | null> {
  const application = await store.application.find();
  if (!application || application.networkFacts === "off") return null;
  const sealed =
    application.networkKeySealed ??
    (await store.application.ensureNetworkKey(secretBox.seal(randomBytes(32).toString("hex"))));
  if (!sealed) return null;
  let key = networkKeys.get(sealed);
  if (!key) {
    key = Buffer.from(opened(secretBox, sealed), "hex");
    rememberBounded(networkKeys, sealed, key, 1_000);
  }
  return key;
}

// Every public-key identify and referral reads these, and the same few
// come back (an app's users share a handful of browsers; a user calls from
// one address): each is worked out once per process, within bounds.
const networkKeys = new Map<string, Buffer>();
const hashesByKey = new WeakMap<Buffer, Map<string, ReturnType<typeof networkHashes>>>();
const families = new Map<string, string | null>();
/** The network hashes and User-Agent families worked out before, within bounds. */
export const rememberedNetworkFacts = {
  hashes(address: string | null, key: Buffer): ReturnType<typeof networkHashes> {
    if (address === null) return null;
    let known = hashesByKey.get(key);
    if (!known) {
      known = new Map();
      hashesByKey.set(key, known);
    }
    let hashes = known.get(address);
    if (hashes === undefined) {
      hashes = networkHashes(address, key);
      rememberBounded(known, address, hashes, 10_000);
    }
    return hashes;
  },
  family(userAgent: string | null): string | null {
    if (userAgent === null) return null;
    let family = families.get(userAgent);
    if (family === undefined) {
      family = userAgentFamily(userAgent);
      rememberBounded(families, userAgent, family, 1_000);
    }
    return family;
  },
};

/** The network facts of the end user a call is made for; null without any, or with them off. */
export async function networkOfCall(
  store: TenantStore,
  deps: EvidenceDeps,
  endUser: (EndUser & { source: NetworkSourceName }) | null,
): Promise<NetworkEvidence | null> {
  if (!endUser) return null;
  const key = await networkKeyOf(store, deps.secretBox);
  return key
    ? networkEvidence(endUser, key, endUser.source, deps.clock(), rememberedNetworkFacts)
    : null;
}

// A campaign's document is replaced when it changes, so a policy compiled
// from one stays right for as long as the document is the cached one.
const compiledPolicies = new WeakMap<CampaignDoc, CompiledPolicy>();

/**
 * The policy a campaign's referrals are judged by (see `compilePolicy`):
 * its own, or the environment's defaults. Network list entries are hashed
 * with the application's network key, read only when a list has some.
 */
export async function policyOfCampaign(
  store: TenantStore,
  deps: EvidenceDeps,
  campaign: CampaignDoc,
): Promise<CompiledPolicy> {
  let policy = compiledPolicies.get(campaign);
  if (policy) return policy;
  const own = campaign.fraudPolicy ?? null;
  const listsNetworks = Boolean(own?.allow?.networks?.length || own?.deny?.networks?.length);
  const key = listsNetworks ? await networkKeyOf(store, deps.secretBox) : null;
  policy = compilePolicy(own, deps.fraudPolicy, key);
  compiledPolicies.set(campaign, policy);
  return policy;
}

// A busy referrer's next referral costs no more than its last: the counts
// stop at the policy's `countCap`.
const hourMs = 60 * 60 * 1000;
const dayMs = 24 * hourMs;

/**
 * The evidence of one attribution of `referee` to `referrer`: the emails,
 * names and ages, the referrer's history and velocity, and both parties'
 * networks (the referee's as this call, or its earlier attribution, saw
 * it, else as its last identify did; the referrer's as its last identify
 * did).
 */
export async function gatherEvidence(
  store: TenantStore,
  deps: EvidenceDeps,
  policy: CompiledPolicy,
  referrer: CustomerDoc,
  referee: CustomerDoc,
  refereeNetwork: NetworkEvidence | null,
  at: Date,
): Promise<ReferralEvidence> {
  const network = refereeNetwork ?? referee.network ?? null;
  const since = (ms: number) => new Date(at.getTime() - ms);
  const reads = policy.reads;
  // Only the counts a rule of the policy reads are queried (see `factsRead`),
  // in one read of the store.
  const [counts, networkClicks, refereeMailboxReferred] = await Promise.all([
    store.referrals.countEvidence(
      {
        referrerId: referrer._id,
        velocity: reads.has("velocity") ? { hour: since(hourMs), day: since(dayMs) } : null,
        history: reads.has("history"),
        network:
          reads.has("networkVelocity") && network
            ? { hash: network.networkHash, since: since(dayMs) }
            : null,
      },
      policy.countCap,
    ),
    reads.has("clickFlood") && network
      ? store.clicks.countFromNetwork(
          referrer._id,
          network.networkHash,
          since(dayMs),
          at,
          policy.countCap,
        )
      : null,
    !reads.has("mailbox")
      ? null
      : referee.emailCanonical
        ? store.referrals.isMailboxAlreadyReferred(
            referee.environment,
            referee.emailCanonical,
            referee._id,
          )
        : false,
  ]);
  const referrerEmail = emailEvidence(
    referrer.email,
    deps.disposableDomains,
    referrer.emailCanonical,
  );
  const refereeEmail = emailEvidence(referee.email, deps.disposableDomains, referee.emailCanonical);
  return {
    version: evidenceVersion,
    gatheredAt: at,
    referrerEmail,
    refereeEmail,
    disposableListVersion: deps.disposableDomains.version,
    nameSimilarity: nameSimilarity(referrer.name, referee.name),
    emailLocalDistance: emailLocalDistance(referrerEmail, refereeEmail),
    refereeAgeSeconds: secondsBetween(referee.createdAt, at),
    referrerAgeSeconds: secondsBetween(referrer.createdAt, at),
    referrerFlagged: counts.flagged,
    referrerRejected: counts.rejected,
    referrerReferralsLastHour: counts.lastHour,
    referrerReferralsLastDay: counts.lastDay,
    networkReferralsLastDay: counts.fromNetwork,
    networkClicksLastDay: networkClicks,
    refereeMailboxReferred,
    refereeNetwork: network,
    referrerNetwork: referrer.network ?? null,
  };
}

function secondsBetween(from: Date, to: Date): number {
  return Math.max(0, Math.floor((to.getTime() - from.getTime()) / 1000));
}
