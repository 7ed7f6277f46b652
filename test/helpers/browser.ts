import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test, { type ExecutionContext } from "ava";
import { type BrowserContext, chromium, type Page } from "playwright-core";

/** Debian's Chromium. The tests never download a browser. */
export const chromiumPath = "/usr/bin/chromium";

/**
 * Headless, and quiet on a closed network: without these, Chromium keeps
 * trying to reach Google's services (sync, component updates, QUIC probes).
 */
const chromiumArgs = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

/** A headless Chromium with a fresh profile of its own. */
export interface TestBrowser {
  /** A new tab; closed by `withPage` or when the browser closes. */
  newPage(): Promise<Page>;
  /** Closes the browser and removes its profile. */
  close(): Promise<void>;
}

/**
 * Starts Chromium with a new temporary user-data directory. Fails, rather
 * than skips, when Chromium is missing: the browser tests are part of the
 * suite, and CI installs it (`.ci/run`).
 */
export async function launchBrowser(): Promise<TestBrowser> {
  if (!existsSync(chromiumPath)) {
    throw new Error(
      `the browser tests need Chromium at ${chromiumPath}: install Debian's chromium package (sudo apt-get install chromium); .ci/run installs it in CI`,
    );
  }
  const userDataDir = mkdtempSync(join(tmpdir(), "referrals-chromium-"));
  let context: BrowserContext;
  try {
    context = await chromium.launchPersistentContext(userDataDir, {
      executablePath: chromiumPath,
      args: chromiumArgs,
      headless: true,
      timeout: 30_000,
    });
  } catch (error) {
    rmSync(userDataDir, { recursive: true, force: true });
    throw error;
  }
  return {
    newPage: () => context.newPage(),
    async close() {
      await context.close();
      rmSync(userDataDir, { recursive: true, force: true });
    },
  };
}

/**
 * One browser for the test file: launched in a serial `before` hook,
 * closed afterwards. The handle forwards to it once launched.
 */
export function useBrowser(): TestBrowser {
  let launched: TestBrowser | undefined;
  test.serial.before(async () => {
    launched = await launchBrowser();
  });
  test.after.always(async () => {
    await launched?.close();
  });
  return {
    newPage() {
      if (!launched) throw new Error("the browser is not launched yet");
      return launched.newPage();
    },
    close: async () => launched?.close(),
  };
}

/**
 * Runs `use` with a new tab. When `use` throws, the page's errors and
 * console errors are logged to the test, and a screenshot is saved to the
 * temporary directory (never into the repository) and its path logged.
 */
export async function withPage<T>(
  t: ExecutionContext,
  browser: TestBrowser,
  use: (page: Page) => Promise<T>,
): Promise<T> {
  const page = await browser.newPage();
  const pageErrors: string[] = [];
  page.on("pageerror", (error) => pageErrors.push(`page error: ${error.message}`));
  page.on("console", (message) => {
    if (message.type() === "error") pageErrors.push(`console error: ${message.text()}`);
  });
  try {
    return await use(page);
  } catch (error) {
    for (const line of pageErrors) t.log(line);
    const path = join(tmpdir(), `referrals-${t.title.replace(/\W+/g, "-").slice(0, 80)}.png`);
    await page.screenshot({ path, fullPage: true }).then(
      () => t.log(`screenshot: ${path}`),
      () => {},
    );
    throw error;
  } finally {
    await page.close();
  }
}
