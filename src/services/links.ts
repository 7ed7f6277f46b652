import { rememberBounded } from "../domain/bounded-map.js";
import { visitorHash } from "../domain/fraud-evidence.js";
import { newId } from "../domain/ids.js";
import {
  type BotReasonName,
  botReasonOf,
  channelOf,
  defaultWindowDays,
  landingUrl,
  nowherePage,
  previewPage,
  repeatWindowMs,
  shareUrl,
} from "../domain/links.js";
import type { Clock, EnvironmentName, Tenant } from "../domain/tenancy.js";
import { findLatestVisit, insertClick } from "../store/clicks.js";
import type { Collections } from "../store/collection.js";
import type { CampaignDoc, ClickDoc, CustomerDoc } from "../store/documents.js";
import type { SecretBox } from "../store/secret-box.js";
import type { Store } from "../store/store.js";
import { networkKeyOf, rememberedNetworkFacts } from "./evidence.js";

/**
 * Following a share link, `/r/{code}` (docs/links.md): the customer of the
 * code, the campaign (the link's `c`, else the customer's environment's
 * default live campaign), the click recorded (a person's, once per visitor
 * an hour) or the bot's fetch counted, and what the visitor gets: a
 * redirect to the landing page with `ref` and `rclk`, a preview page for a
 * bot, or the landing page alone for a code that leads nowhere.
 */

/** What following a link answers. */
export type LinkAnswer =
  | { readonly kind: "redirect"; readonly location: string; readonly clickId: string | null }
  | { readonly kind: "page"; readonly html: string; readonly bot: BotReasonName | null };

/** A link as a request followed it. */
export interface LinkRequest {
  readonly code: string;
  /** `?c=`: the campaign, when the link names one. */
  readonly campaignId: string | undefined;
  /** `?ch=`: the channel it was shared on. */
  readonly channel: string | undefined;
  readonly address: string;
  readonly userAgent: string | undefined;
  /** A HEAD request: answered alike, counted not at all. */
  readonly head: boolean;
}

/** What following links needs. */
export interface LinkDeps {
  readonly store: Store;
  readonly clock: Clock;
  readonly secretBox: SecretBox;
  /** The base of the links a QR code shows (PUBLIC_URL). */
  readonly publicUrl: string;
}

const codeShape = /^[A-Za-z0-9_-]{1,64}$/;

/** Follows a link: see the module's comment. */
export async function followLink(deps: LinkDeps, request: LinkRequest): Promise<LinkAnswer> {
  const { campaign, referrer } = await linkTarget(deps.store, request);
  const bot = rememberedBotReason(request.userAgent);
  if (!campaign) return { kind: "page", html: nowherePage(), bot };
  const page = campaign.refereeLandingPageUrl;
  if (bot) {
    if (referrer && !request.head) await recordClick(deps, request, campaign, referrer, bot);
    return {
      kind: "page",
      bot,
      html: previewPage({
        title: campaign.name,
        description: campaign.inviteMessage,
        url: page ? landingUrl(page, referrer ? request.code : null, null) : null,
      }),
    };
  }
  if (!page) return { kind: "page", html: nowherePage(), bot: null };
  if (!referrer) return { kind: "redirect", location: landingUrl(page, null, null), clickId: null };
  const clickId = request.head ? null : await recordClick(deps, request, campaign, referrer, null);
  return {
    kind: "redirect",
    location: landingUrl(page, request.code, clickId),
    clickId,
  };
}

/**
 * The QR code of a customer's link for a campaign (its `qr` channel), as
 * SVG; null when the link leads nowhere (an unknown code, no campaign), so
 * the route makes codes of nobody's links.
 */
export async function linkQrCode(
  deps: LinkDeps,
  request: Pick<LinkRequest, "code" | "campaignId">,
): Promise<string | null> {
  const { campaign, referrer } = await linkTarget(deps.store, {
    ...request,
    channel: undefined,
    address: "",
    userAgent: undefined,
    head: true,
  });
  if (!campaign || !referrer) return null;
  const url = shareUrl(deps.publicUrl, referrer.referralCode, campaign._id, "qr");
  // Loaded with the first code drawn: most services never draw one.
  const { default: QRCode } = await import("qrcode");
  return QRCode.toString(url, { type: "svg", errorCorrectionLevel: "M", margin: 2 });
}

/** The campaign and the customer a link leads to; either may be missing. */
async function linkTarget(
  store: Store,
  request: LinkRequest,
): Promise<{ campaign: CampaignDoc | null; referrer: CustomerDoc | null }> {
  const db = store.system;
  const named =
    request.campaignId && campaignIdShape.test(request.campaignId)
      ? await ownerOfCampaign(db, request.campaignId)
      : null;
  const code = codeShape.test(request.code) ? request.code : null;
  const referrer = code
    ? await db.customers.findOne(
        named
          ? {
              applicationId: named.tenant.applicationId,
              referralCode: code,
              environment: named.environment,
              deletedAt: null,
            }
          : { referralCode: code, deletedAt: null },
      )
    : null;
  // The campaigns come from the application's cached list: a click reads
  // the store for its customer and its visitor only.
  const campaign = named
    ? await store.forTenant(named.tenant).campaigns.find(named.campaignId)
    : null;
  // A campaign since deleted leads where the code alone would.
  if (campaign) return { campaign, referrer };
  if (!referrer) return { campaign: null, referrer: null };
  const fallback = await store
    .forTenant(tenantOf(referrer.organizationId, referrer.applicationId))
    .campaigns.findDefault(referrer.environment);
  return { campaign: fallback?.isLive ? fallback : null, referrer };
}

const campaignIdShape = /^cmp_[A-Za-z0-9_-]{1,64}$/;

/** Who owns a campaign: what never changes of it, so it is remembered. */
interface CampaignOwner {
  readonly campaignId: string;
  readonly tenant: Tenant;
  readonly environment: EnvironmentName;
}

const campaignOwners = new Map<string, CampaignOwner>();

/** The application and environment of a campaign by id; null when there is none. */
async function ownerOfCampaign(db: Collections, campaignId: string): Promise<CampaignOwner | null> {
  const known = campaignOwners.get(campaignId);
  if (known) return known;
  const campaign = await db.campaigns.findOne({ _id: campaignId, deletedAt: null });
  if (!campaign) return null;
  const owner = {
    campaignId,
    tenant: tenantOf(campaign.organizationId, campaign.applicationId),
    environment: campaign.environment,
  };
  rememberBounded(campaignOwners, campaignId, owner, 10_000);
  return owner;
}

// One tenant object per application: the store keeps a tenant's
// repositories per tenant object, so each click reuses them.
const tenants = new Map<string, Tenant>();

function tenantOf(organizationId: string, applicationId: string): Tenant {
  let tenant = tenants.get(applicationId);
  if (!tenant) {
    tenant = Object.freeze({ organizationId, applicationId });
    rememberBounded(tenants, applicationId, tenant, 10_000);
  }
  return tenant;
}

// A visitor's User-Agent is one of a few thousand: what isbot makes of it is
// worked out once per process, within bounds.
const botReasons = new Map<string, BotReasonName | null>();

function rememberedBotReason(userAgent: string | undefined): BotReasonName | null {
  if (userAgent === undefined) return botReasonOf(userAgent);
  let reason = botReasons.get(userAgent);
  if (reason === undefined) {
    reason = botReasonOf(userAgent);
    rememberBounded(botReasons, userAgent, reason, 1_000);
  }
  return reason;
}

/**
 * Records a click (or a bot's fetch), unless it repeats the visitor's
 * click on the same link within the hour; the click's id either way, null
 * for a bot's.
 */
async function recordClick(
  deps: LinkDeps,
  request: LinkRequest,
  campaign: CampaignDoc,
  referrer: CustomerDoc,
  bot: BotReasonName | null,
): Promise<string | null> {
  const tenant = tenantOf(referrer.organizationId, referrer.applicationId);
  const now = deps.clock();
  const key = await networkKeyOf(deps.store.forTenant(tenant), deps.secretBox);
  const userAgent = request.userAgent ?? null;
  const visitor = key ? visitorHash(request.address, userAgent, key) : null;
  // A bot's fetch keeps no address: a preview is fetched from the sender's
  // address (iMessage) or the platform's, never the visitor's, so it must
  // not count toward a network's clicks.
  const hashes = key && !bot ? rememberedNetworkFacts.hashes(request.address, key) : null;
  const latest =
    visitor && !bot
      ? await findLatestVisit(deps.store.system, tenant, visitor, campaign._id)
      : null;
  if (
    latest &&
    latest.code === request.code &&
    now.getTime() - latest.createdAt.getTime() < repeatWindowMs
  ) {
    return latest._id;
  }
  const windowDays = campaign.attribution?.windowDays || defaultWindowDays;
  const click: ClickDoc = {
    _id: newId("clk", now),
    organizationId: referrer.organizationId,
    applicationId: referrer.applicationId,
    environment: referrer.environment,
    campaignId: campaign._id,
    referrerId: referrer._id,
    code: request.code,
    channel: channelOf(request.channel),
    bot,
    visitorHash: bot ? null : visitor,
    addressHash: hashes?.addressHash ?? null,
    networkHash: hashes?.networkHash ?? null,
    userAgentFamily: rememberedNetworkFacts.family(userAgent),
    firstOfVisitor: !bot && visitor !== null && latest === null,
    createdAt: now,
    expiresAt: new Date(now.getTime() + windowDays * 86_400_000),
  };
  await insertClick(deps.store.system, click, deps.store.engine === "embedded");
  return bot ? null : click._id;
}
