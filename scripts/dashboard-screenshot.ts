/**
 * Renders docs/images/dashboard.png: the operator's dashboard (`/dashboard`)
 * over two months of made-up activity, in headless Chromium at 1280×900.
 *
 *   node --import tsx scripts/dashboard-screenshot.ts
 *
 * The service runs in-process on a temporary embedded store with a clock
 * the script moves: customers, referrals and conversions happen on the
 * days they are dated, and the page's clock is set to the same "now", so
 * the picture is the same on every run (a seeded generator, fixed dates).
 * Needs Chromium at /usr/bin/chromium, as the browser tests do.
 */
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { buildApp } from "../src/app.js";
import { loadConfig } from "../src/config.js";

const secretKey = "sk_screenshot_secret_key_000000000000000000";
const publicKey = "pk_screenshot_public_key_000000000000000000";
const chromiumPath = "/usr/bin/chromium";
const output = join(
  dirname(fileURLToPath(import.meta.url)),
  "..",
  "docs",
  "images",
  "dashboard.png",
);

/** The "now" of the picture: the last day of the 30 shown. */
const now = new Date("2026-11-20T16:30:00Z");
const dayMs = 86_400_000;
const hourMs = 3_600_000;

/** Mulberry32: a small seeded generator, so every run draws the same activity. */
function seeded(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

const referrerNames = [
  "Ada Lovelace",
  "Grace Hopper",
  "Alan Turing",
  "Katherine Johnson",
  "Edsger Dijkstra",
  "Barbara Liskov",
  "Donald Knuth",
  "Margaret Hamilton",
  "Ken Thompson",
  "Radia Perlman",
  "John McCarthy",
  "Frances Allen",
  "Tim Berners-Lee",
  "Hedy Lamarr",
];

/** The fields of a campaign the script reads. */
interface Campaign {
  readonly id: string;
  readonly isDefault: boolean;
  readonly proposedRewardTrigger: string;
}

/** The fields of a customer the script reads. */
interface Customer {
  readonly id: string;
  readonly referralCode: string;
}

/** One dated call; the clock is set to `at` before it is sent. */
interface Step {
  readonly at: number;
  readonly run: () => Promise<void>;
}

let clockNow = now.getTime();
const dataDir = mkdtempSync(join(tmpdir(), "referrals-screenshot-"));
const app = await buildApp(
  loadConfig({
    DATA_DIR: dataDir,
    BOOTSTRAP_SECRET_KEY: secretKey,
    BOOTSTRAP_PUBLIC_KEY: publicKey,
    LOG_LEVEL: "silent",
    RATE_LIMIT_PUBLIC: "1000000/1s",
    RATE_LIMIT_SECRET: "1000000/1s",
    RATE_LIMIT_UNAUTHENTICATED: "1000000/1s",
  }),
  { clock: () => new Date(clockNow) },
);

try {
  const port = await app.listen(0, "127.0.0.1");
  const baseUrl = `http://127.0.0.1:${port}`;

  /** A REST call; the parsed body, typed as far as the script reads it. */
  async function call<T = unknown>(
    method: string,
    path: string,
    key: string,
    body?: unknown,
  ): Promise<T> {
    const response = await fetch(`${baseUrl}${path}`, {
      method,
      headers: { authorization: key, ...(body ? { "content-type": "application/json" } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    const json = await response.json();
    if (!response.ok)
      throw new Error(`${method} ${path}: ${response.status} ${JSON.stringify(json)}`);
    return json as T;
  }

  const campaigns = await call<Campaign[]>("GET", "/campaigns?environment=production", secretKey);
  const campaign = campaigns.find((c) => c.isDefault) ?? campaigns[0];
  if (!campaign) throw new Error("the demo tenant has no production campaign");
  const trigger = campaign.proposedRewardTrigger;

  const random = seeded(20261120);
  const steps: Step[] = [];
  const referralCodes: string[] = [];
  const start = now.getTime() - 61 * dayMs;
  steps.push({
    at: start,
    run: async () => {
      for (const [index, name] of referrerNames.entries()) {
        const referrer = await call<Customer>("POST", "/customers/identify", publicKey, {
          externalUserId: `user-${index + 1}`,
          name,
        });
        referralCodes.push(referrer.referralCode);
      }
    },
  });

  let referees = 0;
  const today = Math.floor(now.getTime() / dayMs) * dayMs;
  for (let day = 59; day >= 0; day -= 1) {
    const midnight = today - day * dayMs;
    // Growing through the two months, busier on weekdays.
    const weekday = new Date(midnight).getUTCDay() % 6 !== 0;
    const expected = 2 + (59 - day) / 12 + (weekday ? 1.5 : 0);
    const referrals = Math.max(0, Math.round(expected + (random() - 0.5) * 4));
    for (let n = 0; n < referrals; n += 1) {
      const at = midnight + (8 + random() * 12) * hourMs;
      if (at > now.getTime()) continue;
      referees += 1;
      const friend = referees;
      const externalUserId = `friend-${friend}`;
      // A few referrers bring most friends, as on every real program.
      const referrerIndex = Math.min(
        referrerNames.length - 1,
        Math.floor(random() ** 2.2 * referrerNames.length),
      );
      steps.push({
        at,
        run: async () => {
          const referee = await call<Customer>("POST", "/customers/identify", publicKey, {
            externalUserId,
            name: `Friend ${friend}`,
          });
          await call("POST", "/referrals", publicKey, {
            campaignId: campaign.id,
            referralCode: referralCodes[referrerIndex],
            refereeId: referee.id,
          });
        },
      });
      if (random() < 0.52) {
        const draw = random();
        const delay =
          draw < 0.25
            ? random() * hourMs
            : draw < 0.7
              ? hourMs + random() * 23 * hourMs
              : draw < 0.95
                ? dayMs + random() * 6 * dayMs
                : 7 * dayMs + random() * 20 * dayMs;
        const convertedAt = at + delay;
        if (convertedAt <= now.getTime()) {
          steps.push({
            at: convertedAt,
            run: async () => {
              await call("POST", "/checkpoints/ingest", secretKey, {
                name: trigger,
                externalUserId,
                environment: "production",
              });
            },
          });
        }
      }
    }
    // Customers who sign up without a referral, or do not refer yet.
    const visitors = Math.round(3 + random() * 4);
    for (let n = 0; n < visitors; n += 1) {
      const at = midnight + random() * 20 * hourMs;
      if (at > now.getTime()) continue;
      const externalUserId = `visitor-${day}-${n}`;
      steps.push({
        at,
        run: async () => {
          await call("POST", "/customers/identify", publicKey, {
            externalUserId,
            name: `Visitor ${day}-${n}`,
          });
        },
      });
    }
  }

  steps.sort((a, b) => a.at - b.at);
  for (const step of steps) {
    clockNow = step.at;
    await step.run();
  }
  clockNow = now.getTime();
  await app.sweepRewards();
  console.log(`${steps.length} dated steps, ${referees} referrals`);

  const browser = await chromium.launch({
    executablePath: chromiumPath,
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    // The page computes "the last 30 days" from its own clock: the service's.
    await page.clock.setFixedTime(now);
    await page.goto(`${baseUrl}/dashboard`);
    await page.fill("#key", secretKey);
    await page.click("#controls button[type=submit]");
    await page.locator("#series-chart[data-previous=shown]").waitFor({ timeout: 15_000 });
    await page.locator("#live", { hasText: "updated" }).waitFor({ timeout: 15_000 });
    mkdirSync(dirname(output), { recursive: true });
    await page.screenshot({ path: output, fullPage: true });
    console.log(`wrote ${output}`);
  } finally {
    await browser.close();
  }
} finally {
  await app.close();
  rmSync(dataDir, { recursive: true, force: true });
}
