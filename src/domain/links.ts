import { isbotMatch } from "isbot";

/**
 * Share links (docs/links.md): a customer's referral link, `/r/{code}`, as
 * the service follows it. What a click is, who is a bot, where a friend
 * lands, and the page a link preview gets.
 */

/** A click's attribution window when the campaign sets none, and the longest it may set. */
export const defaultWindowDays = 30;
export const maxWindowDays = 400;

/** A visitor's repeat of the same link within this counts neither as a click nor as a visitor. */
export const repeatWindowMs = 60 * 60 * 1000;

/** The channels a link names (`?ch=`), beside a short custom word. */
export const knownChannels = ["email", "sms", "whatsapp", "x", "facebook", "copy", "qr"] as const;

const customChannel = /^[a-z][a-z0-9_-]{0,19}$/;

/**
 * A link's channel: a known one or a short custom word (lowercase letters,
 * digits, `-`, `_`, at most 20); null for none, or for anything else (a
 * friend's click is never refused for its link's parameters).
 */
export function channelOf(raw: string | undefined): string | null {
  if (raw === undefined || raw === "") return null;
  const word = raw.toLowerCase();
  return customChannel.test(word) ? word : null;
}

/** Why a fetch is a bot's: the previewer or crawler family it names. */
export type BotReasonName =
  | "slack"
  | "facebook"
  | "x"
  | "whatsapp"
  | "telegram"
  | "discord"
  | "linkedin"
  | "skype"
  | "apple"
  | "google"
  | "bing"
  | "headless"
  | "other";

const families: readonly [RegExp, BotReasonName][] = [
  [/slack/i, "slack"],
  // iMessage previews ask as facebookexternalhit with Facebot and Twitterbot.
  [/facebot.*twitterbot|twitterbot.*facebot/i, "apple"],
  [/facebook|facebot/i, "facebook"],
  [/twitterbot|xbot/i, "x"],
  [/whatsapp/i, "whatsapp"],
  [/telegram/i, "telegram"],
  [/discord/i, "discord"],
  [/linkedin/i, "linkedin"],
  [/skype/i, "skype"],
  [/applebot/i, "apple"],
  [/google|adsbot|mediapartners/i, "google"],
  [/bing|msnbot/i, "bing"],
  [/headless|phantom|puppeteer|playwright|selenium|lighthouse/i, "headless"],
];

/**
 * The bot a User-Agent names (`isbot`'s maintained list of crawlers, link
 * previewers and headless browsers), by family; null for a person's
 * browser. A fetch without a User-Agent is a tool's, not a friend's.
 */
export function botReasonOf(userAgent: string | undefined): BotReasonName | null {
  if (!userAgent) return "other";
  const match = isbotMatch(userAgent);
  if (!match) return null;
  for (const [pattern, family] of families) if (pattern.test(userAgent)) return family;
  return "other";
}

/**
 * Where a friend lands: the campaign's landing page with `ref` (the code)
 * and `rclk` (the click) added to its query, its own parameters kept; the
 * page alone for an unknown code.
 */
export function landingUrl(page: string, code: string | null, clickId: string | null): string {
  const url = new URL(page);
  if (code) url.searchParams.set("ref", code);
  if (clickId) url.searchParams.set("rclk", clickId);
  return url.toString();
}

const escapes: Readonly<Record<string, string>> = {
  "&": "&amp;",
  "<": "&lt;",
  ">": "&gt;",
  '"': "&quot;",
  "'": "&#39;",
};

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (character) => escapes[character] as string);
}

/**
 * The page a link preview gets: the campaign's name and invite message as
 * Open Graph tags, and a link to the landing page; no script, no redirect.
 */
export function previewPage(preview: {
  readonly title: string;
  readonly description: string | null;
  readonly url: string | null;
}): string {
  const title = escapeHtml(preview.title);
  const description = preview.description ? escapeHtml(preview.description) : "";
  const url = preview.url ? escapeHtml(preview.url) : "";
  return [
    "<!doctype html>",
    '<html lang="en"><head><meta charset="utf-8">',
    `<title>${title}</title>`,
    `<meta property="og:type" content="website">`,
    `<meta property="og:title" content="${title}">`,
    description ? `<meta property="og:description" content="${description}">` : "",
    description ? `<meta name="description" content="${description}">` : "",
    url ? `<meta property="og:url" content="${url}">` : "",
    `<meta name="twitter:card" content="summary">`,
    '<meta name="robots" content="noindex">',
    "</head><body>",
    `<h1>${title}</h1>`,
    description ? `<p>${description}</p>` : "",
    url ? `<p><a href="${url}">${url}</a></p>` : "",
    "</body></html>",
  ]
    .filter(Boolean)
    .join("\n");
}

/** A friend's page when the link leads nowhere: no landing page to send them to. */
export function nowherePage(): string {
  return previewPage({ title: "This invitation has no page", description: null, url: null });
}

/** A customer's link on one channel. */
export interface ShareLinkOf {
  readonly channel: string;
  readonly url: string;
}

/** The link of a code in a campaign on a channel, under the service's public address. */
export function shareUrl(
  publicUrl: string,
  code: string,
  campaignId: string,
  channel: string,
): string {
  const url = new URL(`${publicUrl}/r/${encodeURIComponent(code)}`);
  url.searchParams.set("c", campaignId);
  url.searchParams.set("ch", channel);
  return url.toString();
}

/** A code's links in a campaign, one per known channel, and its QR code's address. */
export function shareLinksOf(
  publicUrl: string,
  code: string,
  campaignId: string,
): { links: ShareLinkOf[]; qrCodeUrl: string } {
  const qr = new URL(`${publicUrl}/r/${encodeURIComponent(code)}/qr.svg`);
  qr.searchParams.set("c", campaignId);
  return {
    links: knownChannels.map((channel) => ({
      channel,
      url: shareUrl(publicUrl, code, campaignId, channel),
    })),
    qrCodeUrl: qr.toString(),
  };
}
