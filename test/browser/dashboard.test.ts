import test from "ava";
import type { Page } from "playwright-core";
import { dashboardContentSecurityPolicy } from "../../src/transport/dashboard.js";
import { useBrowser, withPage } from "../helpers/browser.js";
import { asUsersRunIt, type Json, keys, rest, useServer } from "../helpers/server.js";

const server = useServer(asUsersRunIt);
const browser = useBrowser();

/** How long the page may take to show a change the API made. */
const liveTimeoutMs = 8000;

async function productionCampaign(): Promise<Json> {
  const { body } = await rest(server, "GET", "/campaigns?environment=production", {
    key: keys.secret,
  });
  return body.find((campaign: Json) => campaign.isDefault) ?? body[0];
}

let customers = 0;

async function identify(externalUserId: string, name: string): Promise<Json> {
  const { status, body } = await rest(server, "POST", "/customers/identify", {
    key: keys.public,
    body: { externalUserId, name },
  });
  if (status >= 300) throw new Error(`identify: ${status} ${JSON.stringify(body)}`);
  return body;
}

/** A referral created and converted through the REST API, as an integration would. */
async function convertReferral(campaign: Json): Promise<void> {
  customers += 1;
  const referrer = await identify(`referrer-${customers}`, `Referrer ${customers}`);
  const referee = await identify(`referee-${customers}`, `Referee ${customers}`);
  const referral = await rest(server, "POST", "/referrals", {
    key: keys.public,
    body: { campaignId: campaign.id, referralCode: referrer.referralCode, refereeId: referee.id },
  });
  if (referral.status >= 300) throw new Error(`referral: ${JSON.stringify(referral.body)}`);
  const checkpoint = await rest(server, "POST", "/checkpoints/ingest", {
    key: keys.secret,
    body: {
      name: campaign.proposedRewardTrigger,
      externalUserId: referee.externalUserId,
      environment: "production",
    },
  });
  if (checkpoint.status >= 300) throw new Error(`checkpoint: ${JSON.stringify(checkpoint.body)}`);
}

/** A customer who refers itself: the default rules flag the referral (rule self_referral). */
async function selfReferral(campaign: Json): Promise<{ customer: Json; referral: Json }> {
  customers += 1;
  const customer = await identify(`self-${customers}`, `Self ${customers}`);
  const { status, body } = await rest(server, "POST", "/referrals", {
    key: keys.public,
    body: { campaignId: campaign.id, referralCode: customer.referralCode, refereeId: customer.id },
  });
  if (status >= 300) throw new Error(`referral: ${status} ${JSON.stringify(body)}`);
  return { customer, referral: body };
}

/** Waits until a table row's cells read `expected`; the failure names the last cells seen. */
async function waitForCells(page: Page, selector: string, expected: string[]): Promise<void> {
  const deadline = Date.now() + liveTimeoutMs;
  let seen: string[] = [];
  for (;;) {
    seen = await page
      .locator(selector)
      .locator("th, td")
      .allTextContents()
      .catch(() => []);
    if (JSON.stringify(seen) === JSON.stringify(expected)) return;
    if (Date.now() > deadline) {
      throw new Error(`${selector} shows ${JSON.stringify(seen)}, not ${JSON.stringify(expected)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Waits until an element's text is `expected`; the failure names the last text seen. */
async function waitForText(page: Page, selector: string, expected: string): Promise<void> {
  const exactly = new RegExp(`^${expected.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}$`);
  try {
    await page.locator(selector).filter({ hasText: exactly }).waitFor({ timeout: liveTimeoutMs });
  } catch {
    const seen = await page
      .locator(selector)
      .textContent({ timeout: 100 })
      .catch(() => null);
    throw new Error(`${selector} shows ${JSON.stringify(seen)}, not ${JSON.stringify(expected)}`);
  }
}

async function openWithKey(page: Page, key: string) {
  const response = await page.goto(`${server.baseUrl}/dashboard`);
  await page.fill("#key", key);
  await page.click("#controls button[type=submit]");
  return response;
}

test.serial("the page and its assets come from this service with a strict CSP", async (t) => {
  const expected = [
    ["/dashboard", "text/html"],
    ["/dashboard/dashboard.js", "text/javascript"],
    ["/dashboard/dashboard.css", "text/css"],
    ["/dashboard/uplot.js", "text/javascript"],
    ["/dashboard/uplot.css", "text/css"],
  ];
  for (const [path, type] of expected) {
    const response = await fetch(`${server.baseUrl}${path}`);
    t.is(response.status, 200, path);
    t.true(response.headers.get("content-type")?.startsWith(type), path);
    t.is(response.headers.get("content-security-policy"), dashboardContentSecurityPolicy, path);
    t.is(response.headers.get("cache-control"), "no-cache", path);
    const etag = response.headers.get("etag") ?? "";
    const again = await fetch(`${server.baseUrl}${path}`, { headers: { "if-none-match": etag } });
    t.is(again.status, 304, path);
  }
  t.regex(dashboardContentSecurityPolicy, /script-src 'self'(;|$)/);
  t.regex(dashboardContentSecurityPolicy, /connect-src 'self'(;|$)/);
});

test.serial("a wrong key and a public key are refused plainly on the page", async (t) => {
  await withPage(t, browser, async (page) => {
    await openWithKey(page, "sk_not_a_key_of_this_service");
    await page.locator("#error", { hasText: "401" }).waitFor({ timeout: liveTimeoutMs });
    await page.fill("#key", keys.public);
    await page.click("#controls button[type=submit]");
    await page.locator("#error", { hasText: "public key" }).waitFor({ timeout: liveTimeoutMs });
    t.true(await page.locator("#report").isHidden());
  });
});

test.serial(
  "the funnel shows the API's numbers and follows a conversion live, without a reload",
  async (t) => {
    const campaign = await productionCampaign();
    // Numbers other than zero before the page opens, so a match means something.
    await convertReferral(campaign);
    // A grant approved and then fulfilled is one reward, not two.
    const approved = await rest(server, "GET", "/reward-grants?status=approved&limit=100", {
      key: keys.secret,
    });
    for (const grant of approved.body.data) {
      const paid = await rest(server, "PATCH", `/reward-grants/${grant.id}`, {
        key: keys.secret,
        body: { status: "fulfilled", fulfillment: { reference: `PAID-${grant.id}` } },
      });
      t.is(paid.status, 200);
    }
    const origin = new URL(server.baseUrl).origin;
    await withPage(t, browser, async (page) => {
      const requested: string[] = [];
      page.on("request", (request) => requested.push(request.url()));
      // A CSP violation is a console error: none may occur.
      const problems: string[] = [];
      page.on("console", (message) => {
        if (message.type() === "error") problems.push(message.text());
      });
      page.on("pageerror", (error) => problems.push(error.message));
      let navigations = 0;
      page.on("framenavigated", (frame) => {
        if (frame === page.mainFrame()) navigations += 1;
      });

      const response = await openWithKey(page, keys.secret);
      t.is(response?.headers()["content-security-policy"], dashboardContentSecurityPolicy);
      await page.locator(`#campaign option[value="${campaign.id}"]`).waitFor({ state: "attached" });
      await page.selectOption("#campaign", campaign.id);

      // The page's default period is the API's default: 30 days ending today.
      const { body } = await rest(
        server,
        "GET",
        `/campaigns/${campaign.id}/stats?environment=production&interval=day`,
        { key: keys.secret },
      );
      const totals = body.report.totals;
      const sumOf = (count: (reward: Json) => number) =>
        totals.rewards.reduce((sum: number, reward: Json) => sum + count(reward), 0);
      const rewarded = sumOf((reward) => reward.committed.count);
      t.true(rewarded >= 1);
      t.true(
        sumOf((reward) => reward.approved.count + reward.fulfilled.count) > rewarded,
        "status moves would count a paid grant twice",
      );
      t.true(totals.referralsReached.accepted >= 1);
      await waitForText(page, "#funnel-identified", String(totals.customersIdentified));
      await waitForText(page, "#funnel-referred", String(totals.referralsCreated));
      await waitForText(page, "#funnel-converted", String(totals.referralsReached.accepted));
      await waitForText(page, "#funnel-rewarded", String(rewarded));
      const { numerator, denominator } = totals.conversionRate;
      t.true(
        (await page.locator("#funnel-converted-ratio").textContent())?.includes(
          `(${numerator} / ${denominator})`,
        ),
      );
      await page.locator("#series-chart canvas").waitFor();
      await page.locator("#leaderboard tr").first().waitFor();

      // Live: the stream moves the funnel; the page is not loaded again.
      await page.locator("#live[data-mode=on]").waitFor({ timeout: liveTimeoutMs });
      const before = navigations;
      await convertReferral(campaign);
      await waitForText(page, "#funnel-converted", String(totals.referralsReached.accepted + 1));
      await waitForText(page, "#funnel-referred", String(totals.referralsCreated + 1));
      t.is(navigations, before);

      // The key stays in the tab: not in localStorage, a cookie or any URL.
      const stored = await page.evaluate(() => ({
        local: JSON.stringify({ ...localStorage }),
        session: JSON.stringify({ ...sessionStorage }),
      }));
      t.false(stored.local.includes(keys.secret));
      t.true(stored.session.includes(keys.secret));
      const cookies = await page.context().cookies();
      t.false(JSON.stringify(cookies).includes(keys.secret));
      t.false(page.url().includes(keys.secret));
      for (const url of requested) {
        t.false(url.includes(keys.secret), url);
        if (!url.startsWith("data:")) t.is(new URL(url).origin, origin, url);
      }
      t.true(requested.some((url) => url.includes("/stats/stream")));
      t.deepEqual(problems, []);
    });
  },
);

test.serial(
  "the fraud review card shows the campaign's queue and its verdicts per rule, and follows them live",
  async (t) => {
    const campaign = await productionCampaign();
    const first = await selfReferral(campaign);
    t.is(first.referral.status, "flagged");
    t.like(first.referral.suspectedFrauds, [{ type: "self_referral", action: "flag" }]);

    // What the API says, which the page must show: the earlier conversions carry no verdict.
    const reviewsPath = `/fraud-reviews?campaignId=${campaign.id}&environment=production`;
    const { body: queue } = await rest(server, "GET", reviewsPath, { key: keys.secret });
    t.false(queue.truncated);
    t.is(queue.reviews.length, 1);
    const [review] = queue.reviews;
    t.like(review, {
      ruleType: "self_referral",
      referrerId: first.customer.id,
      flagged: 1,
      held: 0,
      risk: "high",
      deadline: null,
      message: "the referee is the referrer",
    });
    const statsPath = `/campaigns/${campaign.id}/stats?environment=production&interval=day`;
    const { body: stats } = await rest(server, "GET", statsPath, { key: keys.secret });
    // The counts are int64: compared as numbers, whichever way the JSON writes them.
    const verdicts = ["noted", "flagged", "held", "rejected", "shadow"];
    t.deepEqual(
      stats.report.totals.fraud.map((rule: Json) => [
        rule.rule,
        ...verdicts.map((v) => Number(rule[v])),
      ]),
      [["self_referral", 0, 1, 0, 0, 0]],
    );

    await withPage(t, browser, async (page) => {
      const problems: string[] = [];
      page.on("console", (message) => {
        if (message.type() === "error") problems.push(message.text());
      });
      page.on("pageerror", (error) => problems.push(error.message));
      await openWithKey(page, keys.secret);
      await page.locator(`#campaign option[value="${campaign.id}"]`).waitFor({ state: "attached" });
      await page.selectOption("#campaign", campaign.id);

      const reviewRow = `#fraud-reviews tr:has-text("${first.customer.id}")`;
      await page.locator(reviewRow).waitFor({ timeout: liveTimeoutMs });
      t.is(await page.locator("#fraud-reviews tr").count(), 1);
      const cells = await page.locator(reviewRow).locator("th, td").allTextContents();
      t.deepEqual(
        [...cells.slice(0, 5), ...cells.slice(6)],
        [
          "self_referral",
          first.customer.id,
          "1",
          "0",
          "high",
          "none",
          "the referee is the referrer",
        ],
      );
      // The last hit on the campaign's calendar, like the period: "Mar 5, 2026, 14:03".
      const lastHit = page.locator(`${reviewRow} time`);
      t.is(await lastHit.getAttribute("datetime"), review.lastHitAt);
      t.regex((await lastHit.textContent()) ?? "", /^[A-Z][a-z]{2} \d{1,2}, \d{4}, \d{2}:\d{2}$/);
      t.true(await page.locator("#fraud-reviews-empty").isHidden());
      t.true(await page.locator("#fraud-reviews-truncated").isHidden());
      t.is(await page.locator("#fraud-signals tr").count(), queue.sharedSignals.length);
      t.regex(
        (await page.locator("section[aria-labelledby=fraud-heading] .note").textContent()) ?? "",
        /Decisions are made through the API/,
      );

      await waitForCells(page, "#fraud-rules tr", ["self_referral", "0", "1", "0", "0", "0"]);
      t.true(await page.locator("#fraud-rules-empty").isHidden());

      // Live: another self-referral reaches both tables without a reload.
      await page.locator("#live[data-mode=on]").waitFor({ timeout: liveTimeoutMs });
      const second = await selfReferral(campaign);
      t.is(second.referral.status, "flagged");
      await waitForCells(page, "#fraud-rules tr", ["self_referral", "0", "2", "0", "0", "0"]);
      await page
        .locator(`#fraud-reviews tr:has-text("${second.customer.id}")`)
        .waitFor({ timeout: liveTimeoutMs });
      // The latest hit first.
      t.true(
        ((await page.locator("#fraud-reviews tr").first().textContent()) ?? "").includes(
          second.customer.id,
        ),
      );
      t.is(await page.locator("#fraud-reviews tr").count(), 2);
      t.deepEqual(problems, []);
    });
  },
);

/** Phones' browsers: each user agent on the same address is another visitor. */
const phones = [
  "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Mobile/15E148 Safari/604.1",
  "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Mobile Safari/537.36",
  "Mozilla/5.0 (Linux; Android 13; SM-S911B) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/123.0.0.0 Mobile Safari/537.36",
];
const slackPreview = "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)";

/** Follows a share link as a browser or a link preview would, without following its redirect. */
async function followLink(referralCode: string, userAgent: string): Promise<number> {
  const response = await fetch(`${server.baseUrl}/r/${referralCode}?ch=whatsapp`, {
    redirect: "manual",
    headers: { "user-agent": userAgent },
  });
  await response.arrayBuffer();
  return response.status;
}

test.serial(
  "the funnel starts at the click, with the clicks per channel and the bots' fetches apart",
  async (t) => {
    const campaign = await productionCampaign();
    const statsPath = `/campaigns/${campaign.id}/stats?environment=production&interval=day`;
    const totalsNow = async (): Promise<Json> =>
      (await rest(server, "GET", statsPath, { key: keys.secret })).body.report.totals;
    const channelClicks = (totals: Json, channel: string) =>
      Number(totals.channels.find((c: Json) => c.channel === channel)?.clicks ?? 0);
    const botCount = (totals: Json, reason: string) =>
      Number(totals.botFetches.find((b: Json) => b.reason === reason)?.count ?? 0);
    const before = await totalsNow();

    // Without `?c=` the link goes to the default live campaign of the code's environment.
    customers += 1;
    const { status, body: referrer } = await rest(server, "POST", "/customers/identify", {
      key: keys.secret,
      body: { externalUserId: `sharer-${customers}`, name: `Sharer ${customers}` },
    });
    t.true(status < 300, JSON.stringify(referrer));
    t.is(await followLink(referrer.referralCode, phones[0] as string), 302);
    t.is(await followLink(referrer.referralCode, phones[1] as string), 302);
    t.is(await followLink(referrer.referralCode, slackPreview), 200);

    // What the API says, which the page must show.
    const totals = await totalsNow();
    t.is(Number(totals.clicks), Number(before.clicks) + 2);
    t.is(Number(totals.visitors), Number(before.visitors) + 2);
    t.is(channelClicks(totals, "whatsapp"), channelClicks(before, "whatsapp") + 2);
    t.is(botCount(totals, "slack"), botCount(before, "slack") + 1);
    t.like(totals.clickToReferral, { denominator: totals.clicks });

    await withPage(t, browser, async (page) => {
      const problems: string[] = [];
      page.on("console", (message) => {
        if (message.type() === "error") problems.push(message.text());
      });
      page.on("pageerror", (error) => problems.push(error.message));
      await openWithKey(page, keys.secret);
      await page.locator(`#campaign option[value="${campaign.id}"]`).waitFor({ state: "attached" });
      await page.selectOption("#campaign", campaign.id);

      await waitForText(page, "#funnel-clicks", String(totals.clicks));
      await waitForText(page, "#funnel-visitors", `${totals.visitors} visitors`);
      // The first step is the click, the former steps follow with their own ids.
      t.is(
        await page.locator("#funnel > li").first().locator(".step-value").getAttribute("id"),
        "funnel-clicks",
      );
      await waitForText(page, "#funnel-identified", String(totals.customersIdentified));
      const { numerator, denominator } = totals.clickToReferral;
      t.regex(
        (await page.locator("#funnel-clicks-ratio").textContent()) ?? "",
        new RegExp(`\\(${numerator} / ${denominator}\\) referred / clicked$`),
      );

      const clicks = Number(totals.clicks);
      const whatsapp = channelClicks(totals, "whatsapp");
      const share = new Intl.NumberFormat("en-US", {
        style: "percent",
        maximumFractionDigits: 1,
      }).format(whatsapp / clicks);
      await waitForCells(page, '#channels tr:has-text("whatsapp")', [
        "whatsapp",
        String(whatsapp),
        share,
      ]);
      t.is(await page.locator("#channels tr").count(), totals.channels.length);
      t.true(await page.locator("#channels-empty").isHidden());
      await waitForCells(page, '#bot-fetches tr:has-text("slack")', [
        "slack",
        String(botCount(totals, "slack")),
      ]);
      t.is(await page.locator("#bot-fetches tr").count(), totals.botFetches.length);
      t.true(await page.locator("#bot-fetches-empty").isHidden());
      t.is(await page.locator("section[aria-labelledby=funnel-heading] caption").count(), 2);

      // Live: another phone's click reaches the funnel and the channels without a reload.
      await page.locator("#live[data-mode=on]").waitFor({ timeout: liveTimeoutMs });
      t.is(await followLink(referrer.referralCode, phones[2] as string), 302);
      await waitForText(page, "#funnel-clicks", String(clicks + 1));
      await waitForCells(page, '#channels tr:has-text("whatsapp")', [
        "whatsapp",
        String(whatsapp + 1),
        new Intl.NumberFormat("en-US", { style: "percent", maximumFractionDigits: 1 }).format(
          (whatsapp + 1) / (clicks + 1),
        ),
      ]);
      t.deepEqual(problems, []);
    });
  },
);
