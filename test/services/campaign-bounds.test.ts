import { readFileSync } from "node:fs";
import test from "ava";
import { AdminService } from "../../gen/referral/v1/admin_pb.js";
import { CampaignSchema } from "../../gen/referral/v1/resources_pb.js";
import { fromPlain } from "../../src/contract/plain-codec.js";
import { limits } from "../../src/domain/limits.js";
import { call, callMessage, type Outcome } from "../helpers/callers.js";
import { tableAfter } from "../helpers/markdown.js";
import { discount, payout } from "../helpers/rewards.js";
import { type Json, keys, rest, useServer } from "../helpers/server.js";

/**
 * The bounds of a campaign (docs/admin.md, "Campaign bounds"): each value
 * out of bounds is refused on create and on update with invalid_argument
 * naming its field, in the same words on REST, Connect and gRPC, and
 * changes nothing; each value at a bound is accepted; and a campaign at
 * every maximum keeps `GET /campaigns` within the size the page states.
 */

const server = useServer();
const createCampaign = AdminService.method.createCampaign;
const updateCampaign = AdminService.method.updateCampaign;

/** The bounds' discount is in euros, beside a payout in dollars. */
const euroDiscount = (fields: Json = {}) => discount({ currency: "eur", ...fields });
const email = (fields: Json = {}) => ({
  type: "referrer:reward",
  subjectLine: "You earned $20",
  message: "Your friend subscribed.",
  buttonText: "Invite more friends",
  buttonColor: "#4f46e5",
  logoUrl: "https://example.com/logo.png",
  logoSize: 120,
  ...fields,
});
const page = (fields: Json = {}) => ({
  path: "/invite",
  name: "Invite friends",
  placementId: "home_banner",
  ...fields,
});
const faq = (fields: Json = {}) => ({
  question: "When am I paid?",
  answer: "14 days after your friend subscribes.",
  ...fields,
});

/** A campaign within every bound, which each case changes in one place. */
const valid: Json = {
  name: "Bounds",
  environment: "production",
  isLive: true,
  refereeLandingPageUrl: "https://example.com/welcome",
  termsUrl: "https://example.com/terms",
  proposedRewardTrigger: "purchase",
  inviteMessage: "Sign up with my code.",
  platforms: ["mobile", "web"],
  rewards: [payout(), euroDiscount()],
  emails: [email()],
  campaignPages: [page()],
  faqs: [faq()],
};

const limited = { limitUnit: "rewards", limitInterval: "month" };
const long = (length: number) => "x".repeat(length);
const longUrl = (length: number) => `https://example.com/${long(length - 20)}`;
const times = <T>(count: number, item: T): T[] => Array.from({ length: count }, () => item);

/** A value refused: the field the error names, and the campaign fields that carry it. */
interface Refusal {
  readonly field: string;
  readonly why: string;
  readonly change: Json;
  /** The campaign's environment; production unless given. */
  readonly environment?: "test";
  /** The error's description, when the case is about its words. */
  readonly says?: string;
}

const inReward = (why: string, field: string, fields: Json, says?: string): Refusal => ({
  field: `campaign.rewards[0].${field}`,
  why,
  change: { rewards: [payout(fields)] },
  says,
});
const inDiscount = (why: string, field: string, fields: Json, says?: string): Refusal => ({
  field: `campaign.rewards[0].${field}`,
  why,
  change: { rewards: [euroDiscount(fields)] },
  says,
});
const inEmail = (why: string, field: string, fields: Json): Refusal => ({
  field: `campaign.emails[0].${field}`,
  why,
  change: { emails: [email(fields)] },
});
const inPage = (why: string, field: string, fields: Json): Refusal => ({
  field: `campaign.campaignPages[0].${field}`,
  why,
  change: { campaignPages: [page(fields)] },
});
const inFaq = (why: string, field: string, fields: Json): Refusal => ({
  field: `campaign.faqs[0].${field}`,
  why,
  change: { faqs: [faq(fields)] },
});
const url = (
  field: "termsUrl" | "refereeLandingPageUrl",
  why: string,
  value: string,
  says?: string,
  environment?: "test",
): Refusal => ({ field: `campaign.${field}`, why, change: { [field]: value }, says, environment });

const maxAmount = limits.campaign.maxAmount;

const refusals: Refusal[] = [
  // Money.
  inReward("1e308", "payoutAmount", { payoutAmount: 1e308 }, "must be at most 1,000,000"),
  inReward("one cent over the maximum", "payoutAmount", { payoutAmount: maxAmount + 0.01 }),
  inReward("negative", "payoutAmount", { payoutAmount: -0.01 }, "must not be negative"),
  inReward(
    "finer than a cent",
    "payoutAmount",
    { payoutAmount: 10.005 },
    "must have at most 2 decimal places",
  ),
  inReward("a tiny fraction", "payoutAmount", { payoutAmount: 1e-9 }),
  inDiscount("over the maximum", "discountAmount", {
    discountPercentage: undefined,
    discountAmount: 2 * maxAmount,
  }),
  inDiscount("negative", "discountAmount", { discountPercentage: undefined, discountAmount: -5 }),
  // Percentages, counts, durations.
  inDiscount("zero", "discountPercentage", { discountPercentage: 0 }),
  inDiscount("over 100", "discountPercentage", { discountPercentage: 100.01 }),
  inDiscount("negative", "discountPercentage", { discountPercentage: -20 }),
  inDiscount("zero months", "discountDurationInMonth", { discountDurationInMonth: 0 }),
  inDiscount("121 months", "discountDurationInMonth", { discountDurationInMonth: 121 }),
  inReward(
    "zero",
    "limit",
    { limit: 0, ...limited },
    "must be a whole number from 1 to 1,000,000 (to grant nothing, set disabled)",
  ),
  inReward("negative", "limit", { limit: -5, ...limited }),
  inReward("over the maximum", "limit", { limit: maxAmount + 1, ...limited }),
  inReward(
    "zero days",
    "holdPeriod",
    { holdPeriod: "0d" },
    "must be more than 0 (leave it out for none)",
  ),
  inReward("zero seconds", "expiresAfter", { expiresAfter: "0s" }),
  inReward("words", "holdPeriod", { holdPeriod: "30 days" }),
  inReward("over 3650 days", "expiresAfter", { expiresAfter: "3651d" }),
  // URLs.
  url("termsUrl", "javascript:", "javascript:alert(1)", "must be an absolute https URL"),
  url("termsUrl", "not a URL", "not a url at all", "must be an absolute https URL"),
  url("termsUrl", "a space", "https://example.com/our terms", "must not contain spaces"),
  url("termsUrl", "a relative URL", "/terms", "must be an absolute https URL"),
  url("termsUrl", "ftp", "ftp://example.com/terms"),
  url("termsUrl", "data:", "data:text/html,<script>alert(1)</script>"),
  url(
    "termsUrl",
    "http in production",
    "http://example.com/terms",
    "must use https (http is allowed in test campaigns only)",
  ),
  url(
    "termsUrl",
    "credentials",
    "https://user:secret@example.com/terms",
    "must not contain credentials",
  ),
  url("termsUrl", "a user name", "https://user@example.com/terms"),
  url("termsUrl", "empty", "", "must not be empty"),
  url("termsUrl", "over the maximum", longUrl(limits.url + 1), "must be at most 2048 characters"),
  url(
    "refereeLandingPageUrl",
    "javascript: in a test campaign",
    "javascript:alert(1)",
    undefined,
    "test",
  ),
  url(
    "refereeLandingPageUrl",
    "credentials in a test campaign",
    "http://a:b@localhost/",
    undefined,
    "test",
  ),
  url("refereeLandingPageUrl", "no host", "https://", "must be an absolute https URL"),
  inEmail("javascript:", "logoUrl", { logoUrl: "javascript:alert(1)" }),
  inEmail("http in production", "logoUrl", { logoUrl: "http://example.com/logo.png" }),
  inPage("an absolute URL", "path", { path: "https://example.com/invite" }),
  inPage("another host", "path", { path: "//example.com/invite" }),
  inPage("another host by backslash", "path", { path: "/\\example.com/invite" }),
  inPage("no leading slash", "path", { path: "invite" }),
  inPage("missing", "path", { path: "" }),
  inPage("a space", "path", { path: "/in vite" }),
  // Checkpoint names.
  {
    field: "campaign.proposedRewardTrigger",
    why: "over the checkpoint name maximum",
    change: { proposedRewardTrigger: long(limits.checkpointName + 1) },
    says: "must be at most 128 characters",
  },
  {
    field: "campaign.manualRewardTrigger",
    why: "blank",
    change: { manualRewardTrigger: "   " },
  },
  // Texts.
  { field: "campaign.name", why: "over the maximum", change: { name: long(limits.shortText + 1) } },
  {
    field: "campaign.inviteMessage",
    why: "over the maximum",
    change: { inviteMessage: long(limits.note + 1) },
  },
  {
    field: "campaign.copiedFromCampaignId",
    why: "over the maximum",
    change: { copiedFromCampaignId: long(limits.shortText + 1) },
  },
  {
    field: "campaign.timeZone",
    why: "over the maximum",
    change: { timeZone: long(limits.shortText + 1) },
  },
  {
    field: "campaign.timeZone",
    why: "an offset off the quarter hour the counters keep",
    change: { timeZone: "+00:07" },
  },
  inReward("over the maximum", "name", { name: long(limits.shortText + 1) }),
  inReward("over the maximum", "description", { description: long(limits.note + 1) }),
  inEmail("over the maximum", "message", { message: long(limits.longText + 1) }),
  inEmail("over the maximum", "subjectLine", { subjectLine: long(limits.shortText + 1) }),
  inEmail("over the maximum", "buttonText", { buttonText: long(limits.shortText + 1) }),
  inEmail("over the maximum", "buttonColor", { buttonColor: long(limits.shortText + 1) }),
  inEmail("blank", "subjectLine", { subjectLine: "  " }),
  inEmail("zero", "logoSize", { logoSize: 0 }),
  inEmail("over the maximum", "logoSize", { logoSize: limits.campaign.maxLogoSize + 1 }),
  inPage("over the maximum", "path", { path: `/${long(limits.shortText)}` }),
  inPage("over the maximum", "name", { name: long(limits.shortText + 1) }),
  inPage("over the maximum", "placementId", { placementId: long(limits.shortText + 1) }),
  inFaq("over the maximum", "question", { question: long(limits.shortText + 1) }),
  inFaq("over the maximum", "answer", { answer: long(limits.note + 1) }),
  inFaq("missing", "answer", { answer: "" }),
  // The text rule every text follows (services/validate.ts) holds for a campaign's too.
  inFaq("a control character", "answer", { answer: "Paid\u0007 soon." }),
  inFaq("missing", "question", { question: undefined }),
  // Lists.
  {
    field: "campaign.rewards",
    why: "one too many",
    change: { rewards: times(limits.campaign.rewards + 1, payout()) },
    says: `must have at most ${limits.campaign.rewards} entries`,
  },
  {
    field: "campaign.emails",
    why: "one too many",
    change: { emails: times(limits.campaign.emails + 1, email()) },
  },
  {
    field: "campaign.campaignPages",
    why: "one too many",
    change: { campaignPages: times(limits.campaign.pages + 1, page()) },
  },
  {
    field: "campaign.faqs",
    why: "one too many",
    change: { faqs: times(limits.campaign.faqs + 1, faq()) },
  },
  {
    field: "campaign.platforms[1]",
    why: "a repeat",
    change: { platforms: ["web", "web"] },
    says: "repeats web",
  },
];

/** Refusals only the binary protocols can send: numbers JSON has no literal for, unknown enum numbers. */
interface BinaryRefusal {
  readonly field: string;
  readonly why: string;
  readonly change: (campaign: Json) => void;
}

const binaryRefusals: BinaryRefusal[] = [
  {
    field: "campaign.rewards[0].payoutAmount",
    why: "NaN",
    change: (c: Json) => {
      c.rewards[0].payoutAmount = Number.NaN;
    },
  },
  {
    field: "campaign.rewards[0].payoutAmount",
    why: "Infinity",
    change: (c: Json) => {
      c.rewards[0].payoutAmount = Number.POSITIVE_INFINITY;
    },
  },
  {
    field: "campaign.rewards[1].discountPercentage",
    why: "NaN",
    change: (c: Json) => {
      c.rewards[1].discountPercentage = Number.NaN;
    },
  },
  {
    field: "campaign.rewards[0].method",
    why: "an enum number the contract lacks",
    change: (c: Json) => {
      c.rewards[0].method = 99;
    },
  },
  {
    field: "campaign.rewards[0].currency",
    why: "an enum number the contract lacks",
    change: (c: Json) => {
      c.rewards[0].currency = 99;
    },
  },
  {
    field: "campaign.emails[0].type",
    why: "an enum number the contract lacks",
    change: (c: Json) => {
      c.emails[0].type = 99;
    },
  },
  {
    field: "campaign.platforms[0]",
    why: "an enum number the contract lacks",
    change: (c: Json) => {
      c.platforms = [99];
    },
  },
];

/** Values at a bound, each accepted on create and on update. */
const accepted: Array<{
  why: string;
  change: Json;
  environment?: "test";
  /** The top-level texts as stored, where the text rule cleans them. */
  stored?: Json;
}> = [
  {
    why: "texts with surrounding spaces, stored trimmed",
    change: { termsUrl: "  https://example.com/terms ", inviteMessage: " Join me\r\nnow " },
    stored: { termsUrl: "https://example.com/terms", inviteMessage: "Join me\nnow" },
  },
  { why: "a payout of 0", change: { rewards: [payout({ payoutAmount: 0 })] } },
  { why: "a payout of one cent", change: { rewards: [payout({ payoutAmount: 0.01 })] } },
  { why: "the largest payout", change: { rewards: [payout({ payoutAmount: maxAmount })] } },
  {
    why: "the largest payout with cents",
    change: { rewards: [payout({ payoutAmount: maxAmount - 0.01 })] },
  },
  { why: "a 100% discount", change: { rewards: [euroDiscount({ discountPercentage: 100 })] } },
  { why: "a 0.5% discount", change: { rewards: [euroDiscount({ discountPercentage: 0.5 })] } },
  { why: "a limit of 1", change: { rewards: [payout({ limit: 1, ...limited })] } },
  {
    why: "the largest amount limit",
    change: {
      rewards: [payout({ limit: maxAmount, limitUnit: "amount", limitInterval: "lifetime" })],
    },
  },
  {
    why: "the shortest and longest durations",
    change: { rewards: [payout({ holdPeriod: "1s", expiresAfter: "3650d" })] },
  },
  {
    why: "discounts of 1 and 120 months",
    change: {
      rewards: [
        euroDiscount({ discountDurationInMonth: 1 }),
        euroDiscount({ discountDurationInMonth: 120 }),
      ],
    },
  },
  { why: "a URL of the largest length", change: { termsUrl: longUrl(limits.url) } },
  {
    why: "a URL with a query, a fragment and a port",
    change: { termsUrl: "https://example.com:8443/terms?lang=fr#refunds" },
  },
  {
    why: "http URLs in a test campaign",
    environment: "test",
    change: {
      termsUrl: "http://localhost:3000/terms",
      refereeLandingPageUrl: "http://127.0.0.1/welcome",
      emails: [email({ logoUrl: "http://localhost:3000/logo.png" })],
    },
  },
  { why: "a page path with a query", change: { campaignPages: [page({ path: "/invite?x=1" })] } },
  {
    why: "a reward trigger of the largest checkpoint name",
    change: { manualRewardTrigger: long(limits.checkpointName) },
  },
  { why: "logo sizes of 1", change: { emails: [email({ logoSize: 1 })] } },
  { why: "an email without a button", change: { emails: [email({ buttonText: "" })] } },
  { why: "no platforms", change: { platforms: [] } },
  {
    why: "a time zone in any case, stored in its canonical spelling",
    change: { timeZone: "eUrOpE/pArIs" },
    stored: { timeZone: "Europe/Paris" },
  },
  {
    why: "an offset of whole quarter hours, stored as ±HH:MM",
    change: { timeZone: "+0545" },
    stored: { timeZone: "+05:45" },
  },
];

let applicationId = "";
let publicKey = "";
const campaignIds = { production: "", test: "" };

/** The application's campaigns as the SDKs read them. */
async function campaignsOf(key: string): Promise<Json> {
  const response = await rest(server, "GET", "/campaigns", { key });
  if (response.status !== 200) throw new Error(`GET /campaigns: ${response.status}`);
  return response.body;
}

async function newApplication(
  name: string,
): Promise<{ id: string; publicKey: string; secretKey: string }> {
  const created = await rest(server, "POST", "/admin/applications", {
    key: keys.admin,
    body: { name },
  });
  return {
    id: created.body.application.id,
    publicKey: created.body.publicKey,
    secretKey: created.body.secretKey,
  };
}

const createPath = (id: string) => `/admin/applications/${id}/campaigns`;
const updatePath = (id: string, change: Json) =>
  `/admin/campaigns/${id}?${Object.keys(change)
    .map((name) => `updateMask=${name}`)
    .join("&")}`;

test.serial.before(async () => {
  const application = await newApplication("Bounds");
  applicationId = application.id;
  publicKey = application.publicKey;
  for (const environment of ["production", "test"] as const) {
    const created = await rest(server, "POST", createPath(applicationId), {
      key: keys.admin,
      body: { ...valid, environment, isLive: environment === "test" },
    });
    if (created.status !== 201) throw new Error(JSON.stringify(created.body));
    campaignIds[environment] = created.body.id;
  }
});

for (const refusal of refusals) {
  const { field, why, change, environment = "production", says } = refusal;
  test.serial(
    `${field}: ${why} is refused alike on every protocol, changing nothing`,
    async (t) => {
      const before = await campaignsOf(publicKey);
      const campaign = { ...valid, environment, ...change };
      const created = await rest(server, "POST", createPath(applicationId), {
        key: keys.admin,
        body: campaign,
      });
      t.is(created.status, 400, JSON.stringify(created.body));
      t.is(created.body.code, "invalid_argument");
      t.is(created.body.details?.[0]?.field, field, created.body.message);
      const message: string = created.body.message;
      t.true(message.startsWith(`${field} `), message);
      if (says) t.is(message, `${field} ${says}`);
      const refused: Outcome = { ok: false, code: "invalid_argument", message };

      const target = campaignIds[environment];
      const updated = await rest(server, "PATCH", updatePath(target, change), {
        key: keys.admin,
        body: change,
      });
      t.is(updated.status, 400, JSON.stringify(updated.body));
      t.is(updated.body.details?.[0]?.field, field);
      t.is(updated.body.message, message, "an update is refused as a creation");

      for (const protocol of ["connect", "grpc"] as const) {
        t.deepEqual(
          await call(server, protocol, createCampaign, { applicationId, campaign }, keys.admin),
          refused,
          `${protocol} CreateCampaign`,
        );
        const request = { id: target, campaign: change, updateMask: Object.keys(change) };
        t.deepEqual(
          await call(server, protocol, updateCampaign, request, keys.admin),
          refused,
          `${protocol} UpdateCampaign`,
        );
      }
      t.deepEqual(await campaignsOf(publicKey), before, "the campaigns are as they were");
    },
  );
}

for (const { field, why, change } of binaryRefusals) {
  test.serial(
    `${field}: ${why} is refused on the binary protocols, changing nothing`,
    async (t) => {
      const before = await campaignsOf(publicKey);
      const campaign: Json = fromPlain(CampaignSchema, valid);
      change(campaign);
      const outcomes = [];
      for (const protocol of ["grpc", "connect-binary"] as const) {
        outcomes.push(
          await callMessage(
            server,
            protocol,
            createCampaign,
            { applicationId, campaign },
            keys.admin,
          ),
          await callMessage(
            server,
            protocol,
            updateCampaign,
            {
              id: campaignIds.production,
              campaign,
              updateMask: ["rewards", "emails", "platforms"],
            },
            keys.admin,
          ),
        );
      }
      const [first] = outcomes;
      t.like(first, { ok: false, code: "invalid_argument" });
      t.true(first?.ok === false && first.message.startsWith(`${field} `), JSON.stringify(first));
      for (const outcome of outcomes) t.deepEqual(outcome, first);
      t.deepEqual(await campaignsOf(publicKey), before, "the campaigns are as they were");
    },
  );
}

test("values at a bound are accepted on create and on update", async (t) => {
  const application = await newApplication("Bounds accepted");
  for (const { why, change, environment = "production", stored = {} } of accepted) {
    const created = await rest(server, "POST", createPath(application.id), {
      key: keys.admin,
      body: { ...valid, environment, ...change },
    });
    t.is(created.status, 201, `${why}: ${JSON.stringify(created.body)}`);
    const target = await rest(server, "POST", createPath(application.id), {
      key: keys.admin,
      body: { ...valid, environment },
    });
    const updated = await rest(server, "PATCH", updatePath(target.body.id, change), {
      key: keys.admin,
      body: change,
    });
    t.is(updated.status, 200, `${why}: ${JSON.stringify(updated.body)}`);
    for (const [name, value] of Object.entries(change)) {
      if (typeof value === "string") t.is(updated.body[name], stored[name] ?? value, why);
    }
  }
});

test("an ingested checkpoint name is bounded by the rule reward triggers follow", async (t) => {
  const ingest = (name: string) =>
    rest(server, "POST", "/checkpoints/ingest", {
      key: keys.secret,
      body: { name, externalUserId: "nobody", environment: "test" },
    });
  const over = await ingest(long(limits.checkpointName + 1));
  t.is(over.status, 400);
  t.is(over.body.message, `name must be at most ${limits.checkpointName} characters`);
  // At the bound the name passes, and the missing customer is what is refused.
  t.is((await ingest(long(limits.checkpointName))).status, 404);
});

/**
 * Every text of a campaign with its maximum in characters: the campaign's
 * own (with `lastPingOrigin`, set by pings, not by operators), then one item
 * of each list's.
 */
const textMaxima = {
  campaign: {
    name: limits.shortText,
    refereeLandingPageUrl: limits.url,
    termsUrl: limits.url,
    proposedRewardTrigger: limits.checkpointName,
    manualRewardTrigger: limits.checkpointName,
    inviteMessage: limits.note,
    copiedFromCampaignId: limits.shortText,
    timeZone: limits.shortText,
    lastPingOrigin: limits.url,
  },
  rewards: {
    name: limits.shortText,
    description: limits.note,
    holdPeriod: 8,
    expiresAfter: 8,
  },
  emails: {
    subjectLine: limits.shortText,
    message: limits.longText,
    buttonText: limits.shortText,
    buttonColor: limits.shortText,
    logoUrl: limits.url,
  },
  campaignPages: { path: limits.shortText, name: limits.shortText, placementId: limits.shortText },
  faqs: { question: limits.shortText, answer: limits.note },
};
const listMaxima = {
  rewards: limits.campaign.rewards,
  emails: limits.campaign.emails,
  campaignPages: limits.campaign.pages,
  faqs: limits.campaign.faqs,
};
type ListName = keyof typeof listMaxima;
const lists = Object.keys(listMaxima) as ListName[];
const sum = (values: Record<string, number>) =>
  Object.values(values).reduce((total, value) => total + value, 0);

/** The most characters of text one campaign holds. */
const campaignCharacters =
  sum(textMaxima.campaign) +
  lists.reduce((total, list) => total + listMaxima[list] * sum(textMaxima[list]), 0);

const adminPage = readFileSync(new URL("../../docs/admin.md", import.meta.url), "utf8");

test("docs/admin.md lists every text and list bound as the service applies it", (t) => {
  const rows = tableAfter(adminPage, "<!-- checked: campaign bounds -->");
  const boundOf = (name: string): string | undefined =>
    rows.find((row) =>
      (row.field ?? "")
        .replaceAll("`", "")
        .split(", ")
        .some((cell) => cell === name),
    )?.bound;
  const number = (text: string | undefined, unit: string) => {
    const match = new RegExp(`([\\d,]+) ${unit}`).exec(text ?? "");
    return match ? Number((match[1] as string).replaceAll(",", "")) : undefined;
  };
  for (const [name, max] of Object.entries(textMaxima.campaign)) {
    if (name === "lastPingOrigin") continue;
    t.is(number(boundOf(name), "characters"), max, name);
  }
  for (const list of lists) {
    t.is(number(boundOf(list), "entries"), listMaxima[list], list);
    for (const [name, max] of Object.entries(textMaxima[list])) {
      t.is(number(boundOf(`${list}[].${name}`), "characters"), max, `${list}[].${name}`);
    }
  }
  t.true(
    adminPage.includes(`${campaignCharacters.toLocaleString("en")} characters`),
    `the page states ${campaignCharacters} characters of text`,
  );
});

/**
 * The largest campaign the page states, in bytes of `GET /campaigns` JSON:
 * 3 bytes a character of text, and what the rest of the JSON adds.
 */
function statedLargestCampaign(): { bytes: number; beyondText: number } {
  const number = (pattern: RegExp) => {
    const match = pattern.exec(adminPage);
    if (!match) throw new Error(`docs/admin.md states nothing like ${pattern}`);
    return Number((match[1] as string).replaceAll(",", ""));
  };
  return {
    bytes: number(/largest campaign is \*\*([\d,]+) bytes\*\*/),
    beyondText: number(/enum words add at most ([\d,]+) bytes/),
  };
}

test("a campaign at every maximum stays within the size docs/admin.md states", async (t) => {
  // Each character takes the most bytes a text may hold: 3 in UTF-8 JSON.
  // Every other value is its longest JSON: false over true, a percentage of
  // 24 characters, the longest enum words, timestamps with nanoseconds.
  const fill = (length: number, prefix = "") => prefix + "€".repeat(length - prefix.length);
  const deletedAt = "2026-01-01T00:00:00.123456789Z";
  const text = textMaxima;
  const campaign = {
    name: fill(text.campaign.name),
    environment: "production",
    isLive: false,
    isDefault: false,
    refereeLandingPageUrl: fill(text.campaign.refereeLandingPageUrl, "https://example.com/"),
    termsUrl: fill(text.campaign.termsUrl, "https://example.com/"),
    proposedRewardTrigger: fill(text.campaign.proposedRewardTrigger),
    manualRewardTrigger: fill(text.campaign.manualRewardTrigger),
    inviteMessage: fill(text.campaign.inviteMessage),
    copiedFromCampaignId: fill(text.campaign.copiedFromCampaignId),
    timeZone: "America/Argentina/ComodRivadavia",
    platforms: ["mobile", "web"],
    rewards: times(listMaxima.rewards, {
      name: fill(text.rewards.name),
      description: fill(text.rewards.description),
      type: "discount",
      party: "referrer",
      method: "amazon_gift_card",
      currency: "usd",
      discountPercentage: 0.0000012345678901234567,
      discountDurationInMonth: 120,
      limit: maxAmount,
      limitUnit: "rewards",
      limitInterval: "lifetime",
      disabled: false,
      approval: "automatic",
      holdPeriod: "9999999s",
      expiresAfter: "9999999s",
      deletedAt,
    }),
    emails: times(listMaxima.emails, {
      type: "referrer:reward",
      subjectLine: fill(text.emails.subjectLine),
      message: fill(text.emails.message),
      buttonText: fill(text.emails.buttonText),
      buttonColor: fill(text.emails.buttonColor),
      logoUrl: fill(text.emails.logoUrl, "https://example.com/"),
      logoSize: limits.campaign.maxLogoSize,
      deletedAt,
    }),
    campaignPages: times(listMaxima.campaignPages, {
      path: fill(text.campaignPages.path, "/"),
      isEmpty: false,
      name: fill(text.campaignPages.name),
      placementId: fill(text.campaignPages.placementId),
      platform: "mobile",
    }),
    faqs: times(listMaxima.faqs, {
      question: fill(text.faqs.question),
      answer: fill(text.faqs.answer),
    }),
  };
  const application = await newApplication("Largest campaign");
  const created = await rest(server, "POST", createPath(application.id), {
    key: keys.admin,
    body: campaign,
  });
  t.is(created.status, 201, JSON.stringify(created.body).slice(0, 500));
  const pinged = await rest(server, "POST", `/campaigns/${created.body.id}/ping`, {
    key: application.publicKey,
    headers: { origin: `https://${"a".repeat(limits.url - "https://".length)}` },
  });
  t.is(pinged.status, 200);

  // A draft (`false` is a byte longer than `true`), so the secret key lists
  // it: a public key sees live campaigns only.
  const response = await fetch(`${server.baseUrl}/campaigns`, {
    headers: { authorization: application.secretKey },
  });
  const bytes = (await response.arrayBuffer()).byteLength;
  const { bytes: stated, beyondText } = statedLargestCampaign();
  t.is(stated, 3 * campaignCharacters + beyondText, "the stated figure is the page's sum");
  const [listed] = (await campaignsOf(application.secretKey)) as Json[];
  t.is(listed.lastPingOrigin.length, limits.url);
  t.is(listed.emails.length, listMaxima.emails);
  // One campaign, in a bare array: two brackets.
  t.true(bytes <= stated + 2, `GET /campaigns is ${bytes} bytes, more than the ${stated} stated`);
  t.true(
    bytes >= stated * 0.95,
    `GET /campaigns is ${bytes} bytes, far under the ${stated} stated: state a tighter figure`,
  );
  t.log(`${campaignCharacters} characters of text, GET /campaigns ${bytes} bytes`);
});
