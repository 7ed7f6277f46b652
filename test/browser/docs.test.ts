import test from "ava";
import document from "../../openapi/openapi.json" with { type: "json" };
import { useBrowser, withPage } from "../helpers/browser.js";
import { asUsersRunIt, keys, useServer } from "../helpers/server.js";

const server = useServer(asUsersRunIt);
const browser = useBrowser();

// One test, one page load: Swagger UI's bundle is 1.7 MB of script to parse.
test("/docs lists every path of the OpenAPI document, and try-it sends the key entered under Authorize to this service", async (t) => {
  await withPage(t, browser, async (page) => {
    const response = await page.goto(`${server.baseUrl}/docs`);
    t.is(response?.status(), 200);
    const paths = page.locator(".opblock-summary-path");
    await paths.first().waitFor();
    const listed = new Set(await paths.evaluateAll((spans) => spans.map((s) => s.dataset.path)));
    t.true(listed.has("/customers/identify"));
    t.true(listed.has("/campaigns"));
    t.deepEqual([...listed].sort(), Object.keys(document.paths).sort());

    const operation = page.locator("#operations-CampaignsService-ListCampaigns");
    await operation.locator(".opblock-summary-control").click();
    await operation.locator(".try-out__btn").click();
    const status = operation.locator(".live-responses-table .response .response-col_status");

    // Before authorizing, the same call is refused: the 200 below is the key's doing.
    await operation.locator(".execute").click();
    await t.notThrowsAsync(status.filter({ hasText: "401" }).waitFor());

    await page.locator(".auth-wrapper .authorize").click();
    const scheme = page.locator(".auth-container", { hasText: "accessKey" });
    await scheme.locator("input").fill(keys.public);
    await scheme.locator("button.authorize").click();
    await page.locator(".modal-ux .close-modal").click();

    await operation.locator(".btn-clear").click();
    await operation.locator(".execute").click();
    await status.filter({ hasText: "200" }).waitFor();
    const body = await operation
      .locator(".live-responses-table .response .response-col_description")
      .innerText();
    t.regex(body, /Give \$20, get \$20/);
    const curl = await operation.locator(".curl-command").innerText();
    t.true(curl.includes(`${server.baseUrl}/campaigns`), curl);
    t.true(curl.includes(`Authorization: ${keys.public}`), curl);
  });
});
