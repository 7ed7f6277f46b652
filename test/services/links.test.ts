import test from "ava";
import type { ClickDoc } from "../../src/store/documents.js";
import { protocols } from "../helpers/callers.js";
import { type Json, keys, rest, startServer, useServer } from "../helpers/server.js";
import { callStream } from "../helpers/streams.js";
import { rpc, tenantCalls } from "../helpers/tenant-calls.js";

/**
 * Share links (issue 43, docs/links.md): `/r/{code}` records a click and
 * redirects a person to the campaign's landing page with `ref` and `rclk`;
 * a repeat within the hour, a HEAD and a bot count no click; link previews
 * get a page of Open Graph tags; an unknown code still lands; the address
 * is limited. With the service's clock ours.
 */

let elapsedMs = 0;
const server = useServer({ clock: () => new Date(Date.now() + elapsedMs) });
const { admin, okBody, send } = tenantCalls(server);

const phone =
  "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Mobile/15E148 Safari/604.1";
const landing = "https://shop.example.com/join?utm_source=referral";

interface App {
  secretKey: string;
  publicKey: string;
  campaignId: string;
  applicationId: string;
}

let apps = 0;
async function newApplication(): Promise<App> {
  const created = await admin("POST", "/admin/applications", { name: `links ${++apps}` });
  const applicationId = created.application.id;
  const campaign = await admin("POST", `/admin/applications/${applicationId}/campaigns`, {
    name: "Give $10, get $10",
    environment: "production",
    isLive: true,
    isDefault: true,
    refereeLandingPageUrl: landing,
    inviteMessage: "Ada sent you $10 <off> your first order",
  });
  return {
    secretKey: created.secretKey,
    publicKey: created.publicKey,
    campaignId: campaign.id,
    applicationId,
  };
}

async function referrerOf(app: App, name: string): Promise<Json> {
  return okBody(
    "rest",
    "IdentifyCustomer",
    { externalUserId: name, name, email: `${name}@example.com` },
    app.secretKey,
  );
}

/** Follows a link without following its redirect. */
function follow(path: string, init: { userAgent?: string; method?: string } = {}) {
  return fetch(`${server.baseUrl}${path}`, {
    method: init.method ?? "GET",
    redirect: "manual",
    headers: init.userAgent === undefined ? {} : { "user-agent": init.userAgent },
  });
}

function clicksOf(app: App): Promise<ClickDoc[]> {
  return server.app.store.system.clicks
    .find({ applicationId: app.applicationId }, { sort: { createdAt: 1 } })
    .toArray();
}

test.serial(
  "a person's click redirects to the landing page with ref and rclk, once an hour",
  async (t) => {
    const app = await newApplication();
    const ada = await referrerOf(app, "ada");
    const response = await follow(`/r/${ada.referralCode}?c=${app.campaignId}&ch=whatsapp`, {
      userAgent: phone,
    });
    t.is(response.status, 302);
    t.is(response.headers.get("cache-control"), "no-store");
    t.is(response.headers.get("set-cookie"), null, "no cookie of ours");
    const location = new URL(response.headers.get("location") ?? "");
    t.is(`${location.origin}${location.pathname}`, "https://shop.example.com/join");
    t.is(location.searchParams.get("utm_source"), "referral", "the page's own parameters stay");
    t.is(location.searchParams.get("ref"), ada.referralCode);
    const clickId = location.searchParams.get("rclk") ?? "";
    t.regex(clickId, /^clk_/);
    const [click] = await clicksOf(app);
    t.like(click, {
      _id: clickId,
      campaignId: app.campaignId,
      referrerId: ada.id,
      code: ada.referralCode,
      channel: "whatsapp",
      bot: null,
      firstOfVisitor: true,
      userAgentFamily: "Safari on iOS",
    });
    t.regex(click?.visitorHash ?? "", /^[0-9a-f]{32}$/, "the visitor as a keyed hash");
    t.false(JSON.stringify(click).includes("127.0.0.1"), "no address is kept");

    // The same visitor again within the hour: the same click, nothing counted.
    const again = await follow(`/r/${ada.referralCode}?c=${app.campaignId}`, { userAgent: phone });
    t.is(new URL(again.headers.get("location") ?? "").searchParams.get("rclk"), clickId);
    // HEAD is answered and counted not at all.
    const head = await follow(`/r/${ada.referralCode}`, { userAgent: phone, method: "HEAD" });
    t.is(head.status, 302);
    t.is(new URL(head.headers.get("location") ?? "").searchParams.get("rclk"), null);
    t.is((await clicksOf(app)).length, 1);

    // Another customer's link is a new click, though not a new visitor.
    const grace = await referrerOf(app, "grace");
    await follow(`/r/${grace.referralCode}`, { userAgent: phone });
    // An hour later, Ada's link again is a click again.
    elapsedMs += 61 * 60 * 1000;
    await follow(`/r/${ada.referralCode}`, { userAgent: phone });
    const clicks = await clicksOf(app);
    t.deepEqual(
      clicks.map((c) => [c.code, c.firstOfVisitor, c.channel]),
      [
        [ada.referralCode, true, "whatsapp"],
        [grace.referralCode, false, null],
        [ada.referralCode, false, null],
      ],
    );
    // The clicks go with the customer they belong to.
    await rest(server, "DELETE", `/customers/${ada.id}`, { key: app.secretKey });
    t.deepEqual(
      (await clicksOf(app)).map((c) => c.code),
      [grace.referralCode],
    );
  },
);

test.serial(
  "link previews and crawlers get a page of Open Graph tags, counted apart by reason",
  async (t) => {
    const app = await newApplication();
    const ada = await referrerOf(app, "ada");
    for (const [userAgent, reason] of [
      ["Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)", "slack"],
      ["WhatsApp/2.23.20.0", "whatsapp"],
      [
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_11_1) AppleWebKit/601.2.4 (KHTML, like Gecko) Version/9.0.1 Safari/601.2.4 facebookexternalhit/1.1 Facebot Twitterbot/1.0",
        "apple",
      ],
      [
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/120.0.0.0 Safari/537.36",
        "headless",
      ],
    ] as const) {
      const response = await follow(`/r/${ada.referralCode}`, { userAgent });
      t.is(response.status, 200, reason);
      t.regex(response.headers.get("content-type") ?? "", /^text\/html/);
      const html = await response.text();
      t.true(html.includes('<meta property="og:title" content="Give $10, get $10">'), reason);
      t.true(
        html.includes("Ada sent you $10 &lt;off&gt; your first order"),
        "the invite message, escaped",
      );
      t.false(html.includes("<script"), "no script");
    }
    const clicks = await clicksOf(app);
    t.deepEqual(
      clicks.map((c) => c.bot),
      ["slack", "whatsapp", "apple", "headless"],
    );
    t.true(
      clicks.every((c) => c.visitorHash === null && !c.firstOfVisitor),
      "a bot is no visitor",
    );
    t.true(
      clicks.every((c) => c.addressHash === null && c.networkHash === null),
      "a preview's address is the sender's or the platform's: it is not kept",
    );
  },
);

test.serial(
  "an unknown code still lands: the landing page without ref and rclk, or a page of its own",
  async (t) => {
    const app = await newApplication();
    const named = await follow(`/r/NOSUCH23?c=${app.campaignId}`, { userAgent: phone });
    t.is(named.status, 302);
    t.is(named.headers.get("location"), landing);
    const unnamed = await follow("/r/NOSUCH23", { userAgent: phone });
    t.is(unnamed.status, 200);
    t.regex(await unnamed.text(), /This invitation has no page/);
    const odd = await follow(`/r/${encodeURIComponent("<script>")}?c=cmp_nope&ch=%3Cx%3E`, {
      userAgent: phone,
    });
    t.is(odd.status, 200, "never an error page a friend sees");
    t.deepEqual(await clicksOf(app), []);
  },
);

test.serial(
  "a click flood from one network counts once per visitor and feeds the fraud evidence",
  async (t) => {
    const app = await newApplication();
    const ada = await referrerOf(app, "ada");
    const setPolicy = (fraudPolicy: Json) =>
      admin("PATCH", `/admin/campaigns/${app.campaignId}?updateMask=fraudPolicy`, {
        fraudPolicy,
      });
    // Gathered without the click rule first: its count stays unknown.
    await setPolicy({ rules: [{ type: "similar_name", action: "note" }] });
    // Five browsers on one network, each clicking three times; a preview bot's fetches.
    for (let visitor = 0; visitor < 5; visitor++) {
      for (let repeat = 0; repeat < 3; repeat++) {
        await follow(`/r/${ada.referralCode}`, { userAgent: `${phone} flood/${visitor}` });
      }
    }
    await follow(`/r/${ada.referralCode}`, { userAgent: "WhatsApp/2.23.20.0" });
    const clicks = await clicksOf(app);
    t.is(clicks.filter((click) => click.bot === null).length, 5, "a visitor's repeats count once");
    t.is(new Set(clicks.map((click) => click.networkHash).filter(Boolean)).size, 1);

    const refer = async (referee: string, ip: string) => {
      await okBody(
        "rest",
        "IdentifyCustomer",
        { externalUserId: referee, name: referee },
        app.secretKey,
      );
      return okBody(
        "rest",
        "CreateReferral",
        { referralCode: ada.referralCode, refereeExternalUserId: referee, context: { ip } },
        app.secretKey,
      );
    };
    // The loopback's network is the clicks' network.
    const unjudged = await refer("before-rule", "127.0.0.77");
    t.is(unjudged.status, "pending");
    t.is(unjudged.evidence.networkClicksLastDay, null, "not gathered: no rule read it");

    const policy = { rules: [{ type: "click_flood", action: "flag", params: { perDay: 5 } }] };
    // A backtest recounts the clicks a referral's evidence was gathered without.
    const streamed = await callStream(
      server,
      "rest",
      rpc("TestFraudPolicy"),
      { campaignId: app.campaignId, policy },
      app.secretKey,
    );
    t.like((streamed.messages.at(-1) as Json).result, {
      referrals: 1,
      would: { flag: 1 },
      rules: [{ type: "click_flood", hits: 1, newHits: 1 }],
    });

    await setPolicy(policy);
    const flooded = await refer("same-network", "127.0.0.78");
    t.is(flooded.status, "flagged");
    t.like(flooded.suspectedFrauds, [
      { type: "click_flood", action: "flag", evidence: { networkClicksLastDay: 5 } },
    ]);
    const elsewhere = await refer("elsewhere", "198.51.100.7");
    t.is(elsewhere.status, "pending");
    t.is(elsewhere.evidence.networkClicksLastDay, 0);

    // A day later the flood is past.
    elapsedMs += 25 * 60 * 60 * 1000;
    const later = await refer("next-day", "127.0.0.79");
    t.is(later.status, "pending");
    t.is(later.evidence.networkClicksLastDay, 0);
  },
);

test("a click flood from one address is refused past RATE_LIMIT_LINKS", async (t) => {
  const limited = await startServer({ env: { RATE_LIMIT_LINKS: "3/1m" } });
  try {
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) {
      const response = await fetch(`${limited.baseUrl}/r/NOSUCH23`, { redirect: "manual" });
      statuses.push(response.status);
      if (i === 3) {
        t.truthy(response.headers.get("retry-after"));
        t.regex(response.headers.get("ratelimit") ?? "", /"links";r=0/);
      }
    }
    t.deepEqual(statuses, [200, 200, 200, 429]);
    t.like((await (await fetch(`${limited.baseUrl}/r/NOSUCH23`)).json()) as Json, {
      code: "resource_exhausted",
    });
  } finally {
    await limited.stop();
  }
});

test("RATE_LIMIT_LINKS is checked at start", async (t) => {
  await t.throwsAsync(startServer({ env: { RATE_LIMIT_LINKS: "many" } }), {
    message: /RATE_LIMIT_LINKS/,
  });
});

for (const protocol of protocols) {
  test.serial(
    `${protocol}: a click attributes a referral in its window; the first click wins, or the last`,
    async (t) => {
      const app = await newApplication();
      const ada = await referrerOf(app, `ada-${protocol}`);
      const bob = await referrerOf(app, `bob-${protocol}`);
      const grace = `grace-${protocol}`;
      await referrerOf(app, grace);
      const clickOn = async (code: string) => {
        const response = await follow(`/r/${code}`, { userAgent: `${phone} ${protocol}` });
        return new URL(response.headers.get("location") ?? "").searchParams.get("rclk") as string;
      };
      const refer = (fields: Json, key = app.secretKey) =>
        send(protocol, "CreateReferral", { refereeExternalUserId: grace, ...fields }, key);
      const adaClick = await clickOn(ada.referralCode);
      const byClick = await refer({ clickId: adaClick });
      t.true(byClick.ok, JSON.stringify(byClick));
      const referral = byClick.ok ? byClick.body : {};
      t.is(referral.referrerId, ada.id, "the click names the code");
      t.like(referral.attribution, { method: "click", clickId: adaClick });
      t.truthy(referral.attribution.clickedAt);

      // First click (the default): Bob's later click moves nothing.
      const bobClick = await clickOn(bob.referralCode);
      const kept = await refer({ clickId: bobClick });
      t.like(kept, { ok: true, body: { id: referral.id, referrerId: ada.id } });
      // Last click: it moves the undecided referral to Bob.
      await send(
        protocol,
        "UpdateCampaign",
        {
          id: app.campaignId,
          campaign: { attribution: { windowDays: 30, model: "last_click" } },
          updateMask: ["attribution"],
        },
        keys.admin,
      );
      const moved = await refer({ clickId: bobClick });
      t.like(moved, {
        ok: true,
        body: {
          id: referral.id,
          referrerId: bob.id,
          attribution: { method: "click", clickId: bobClick },
        },
      });
      // A code attributes as before, and says so.
      const carol = `carol-${protocol}`;
      await referrerOf(app, carol);
      const byCode = await refer({ referralCode: ada.referralCode, refereeExternalUserId: carol });
      t.like(byCode, { ok: true, body: { attribution: { method: "code" } } });

      // Clear answers: an unknown click, a click and a code that disagree, an old click.
      t.like(await refer({ clickId: "clk_missing" }), { ok: false, code: "not_found" });
      t.like(await refer({ clickId: bobClick, referralCode: ada.referralCode }), {
        ok: false,
        code: "invalid_argument",
      });
      t.like(await refer({}), { ok: false, code: "invalid_argument" }, "a code or a click");
      const late = await clickOn(ada.referralCode);
      elapsedMs += 31 * 24 * 60 * 60 * 1000;
      const tooLate = await refer({ clickId: late });
      t.like(tooLate, { ok: false, code: "failed_precondition" });
      if (!tooLate.ok) t.regex(tooLate.message, /30-day attribution window/);
    },
  );
}

for (const protocol of protocols) {
  test.serial(`${protocol}: identify with a click attaches a new customer to it`, async (t) => {
    const app = await newApplication();
    const ada = await referrerOf(app, `ada-identify-${protocol}`);
    const response = await follow(`/r/${ada.referralCode}`, {
      userAgent: `${phone} id-${protocol}`,
    });
    const rclk = new URL(response.headers.get("location") ?? "").searchParams.get("rclk");
    const identify = (externalUserId: string, clickId: string) =>
      send(
        protocol,
        "IdentifyCustomer",
        { externalUserId, name: "Friend", clickId },
        app.secretKey,
      );
    const created = await identify(`friend-${protocol}`, rclk as string);
    t.like(created, { ok: true, body: { referredBy: { id: ada.id } } });
    const listed = await okBody(protocol, "ListReferrals", { referrerId: ada.id }, app.secretKey);
    t.like(listed.data, [{ status: "pending", attribution: { method: "click", clickId: rclk } }]);
    // An existing customer is not attached; an unknown click changes nothing.
    const again = await identify(`friend-${protocol}`, rclk as string);
    t.true(again.ok);
    t.is((await okBody(protocol, "ListReferrals", { referrerId: ada.id }, app.secretKey)).total, 1);
    const unknown = await identify(`stranger-${protocol}`, "clk_missing");
    t.like(unknown, { ok: false, code: "not_found" });
    const customers = await okBody(
      protocol,
      "ListCustomers",
      { externalUserId: `stranger-${protocol}` },
      app.secretKey,
    );
    t.is(customers.total, 0, "nothing was written");
  });
}

for (const protocol of protocols) {
  test.serial(
    `${protocol}: a customer's share links per channel, and a QR code of its link`,
    async (t) => {
      const app = await newApplication();
      const ada = await referrerOf(app, `ada-links-${protocol}`);
      const listed = await okBody(protocol, "ListShareLinks", { id: ada.id }, app.secretKey);
      t.is(listed.campaignId, app.campaignId);
      t.is(listed.referralCode, ada.referralCode);
      t.deepEqual(
        listed.links.map((link: Json) => link.channel),
        ["email", "sms", "whatsapp", "x", "facebook", "copy", "qr"],
      );
      const whatsapp = new URL(listed.links[2].url);
      t.is(whatsapp.pathname, `/r/${ada.referralCode}`);
      t.is(whatsapp.searchParams.get("c"), app.campaignId);
      t.is(whatsapp.searchParams.get("ch"), "whatsapp");
      // Followed on this service, the link lands with its channel.
      const followed = await follow(`${whatsapp.pathname}${whatsapp.search}`, { userAgent: phone });
      t.is(followed.status, 302);
      const qr = new URL(listed.qrCodeUrl);
      const image = await fetch(`${server.baseUrl}${qr.pathname}${qr.search}`);
      t.is(image.status, 200);
      t.is(image.headers.get("content-type"), "image/svg+xml");
      t.regex(await image.text(), /^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
      t.is((await fetch(`${server.baseUrl}/r/NOSUCH23/qr.svg`)).status, 404);
      // A public key needs the customer's userHash.
      const created = await admin("GET", "/admin/applications");
      t.truthy(created);
      const byPublic = await send(protocol, "ListShareLinks", { id: ada.id }, keys.public);
      t.false(byPublic.ok);
    },
  );
}

for (const protocol of protocols) {
  test.serial(
    `${protocol}: the funnel from the click: clicks, visitors, bots by reason, channels`,
    async (t) => {
      const app = await newApplication();
      const ada = await referrerOf(app, `ada-funnel-${protocol}`);
      const grace = await referrerOf(app, `grace-funnel-${protocol}`);
      const visitor = (n: number) => `${phone} funnel-${protocol}-${n}`;
      const open = (code: string, userAgent: string, channel?: string) =>
        follow(`/r/${code}${channel ? `?ch=${channel}` : ""}`, { userAgent });
      const first = await open(ada.referralCode, visitor(1), "whatsapp");
      await open(ada.referralCode, visitor(1), "whatsapp"); // a repeat: nothing
      await open(grace.referralCode, visitor(1), "email"); // a click, not a visitor
      await open(ada.referralCode, visitor(2), "whatsapp");
      await open(ada.referralCode, visitor(3));
      await open(ada.referralCode, "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)");
      await open(ada.referralCode, "WhatsApp/2.23.20.0");
      await open(ada.referralCode, "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)");
      // One of the clicks signs up.
      const rclk = new URL(first.headers.get("location") ?? "").searchParams.get("rclk");
      await okBody(
        protocol,
        "IdentifyCustomer",
        { externalUserId: `friend-funnel-${protocol}`, name: "Friend", clickId: rclk },
        app.secretKey,
      );
      const stats = await okBody(
        protocol,
        "GetCampaignStats",
        { id: app.campaignId },
        app.secretKey,
      );
      const totals = stats.report.totals;
      const n = (value: unknown) => Number(value);
      t.is(n(totals.clicks), 4);
      t.is(n(totals.visitors), 3);
      t.deepEqual(
        totals.botFetches.map((bot: Json) => [bot.reason, n(bot.count)]),
        [
          ["slack", 2],
          ["whatsapp", 1],
        ],
      );
      t.deepEqual(
        totals.channels.map((channel: Json) => [channel.channel, n(channel.clicks)]),
        [
          ["whatsapp", 2],
          ["email", 1],
        ],
      );
      t.like(
        {
          numerator: n(totals.clickToReferral.numerator),
          denominator: n(totals.clickToReferral.denominator),
        },
        { numerator: 1, denominator: 4 },
      );
      t.is(totals.clickToReferral.value, 0.25);
    },
  );
}
