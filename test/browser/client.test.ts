import type { DescMethod } from "@bufbuild/protobuf";
import test from "ava";
import type { Page } from "playwright-core";
import { type ExampleServer, serveExample } from "../../examples/web/serve.js";
import { Access } from "../../gen/referral/v1/options_pb.js";
import { methodAccess } from "../../src/contract/options.js";
import { httpRouteOf } from "../../src/transport/rest/http-rules.js";
import { useBrowser, withPage } from "../helpers/browser.js";
import { contractServices } from "../helpers/contract.js";
import {
  asUsersRunIt,
  keys,
  rest,
  startServer,
  type TestServer,
  useServer,
} from "../helpers/server.js";

// The service allows any origin (the default); the page is served from
// another port, so every call it makes is cross-origin.
const server = useServer(asUsersRunIt);
const browser = useBrowser();
let example: ExampleServer;

test.serial.before(async () => {
  example = await serveExample({ port: 0, host: "127.0.0.1" });
});

test.after.always(async () => {
  await example?.close();
});

/** The RPCs a public key may call, by their `(referral.v1.access)` option. */
const publicMethods: DescMethod[] = (await contractServices())
  .flatMap((service) => service.methods)
  .filter((method) => methodAccess(method) === Access.PUBLIC);

/** A request for the page to send with `fetch`. */
interface PageRequest {
  readonly label: string;
  readonly url: string;
  readonly method: string;
  readonly headers: Record<string, string>;
  /** Text, or bytes as numbers (structured clone into the page). */
  readonly body?: string | number[];
}

/** What the page could read of the response; `error` when fetch threw (a CORS refusal is a TypeError). */
interface PageResponse {
  readonly label: string;
  readonly status?: number;
  /** The response headers the page could read, by lowercase name (null when hidden or absent). */
  readonly headers?: Record<string, string | null>;
  readonly body?: string;
  readonly error?: string;
}

/** The response headers the tests read in the page. */
const readHeaders = ["x-request-id", "grpc-status"];

/**
 * A response header, or for gRPC-Web the same name in the trailers at the
 * end of the body, where an error's status and metadata travel.
 */
function headerOrTrailer(response: PageResponse, name: string): string | null | undefined {
  const header = response.headers?.[name];
  if (header) return header;
  return new RegExp(`(?<![\\w-])${name}: ([^\\r\\n]*)`).exec(response.body ?? "")?.[1];
}

/** Sends the requests from the page, as its own script would, all at once. */
function fetchFromPage(page: Page, requests: PageRequest[]): Promise<PageResponse[]> {
  return page.evaluate(
    ({ all, names }) =>
      Promise.all(
        all.map(async (request) => {
          try {
            const response = await fetch(request.url, {
              method: request.method,
              headers: request.headers,
              body:
                request.body === undefined || typeof request.body === "string"
                  ? request.body
                  : new Uint8Array(request.body),
            });
            return {
              label: request.label,
              status: response.status,
              headers: Object.fromEntries(names.map((name) => [name, response.headers.get(name)])),
              body: await response.text(),
            };
          } catch (error) {
            return { label: request.label, error: String(error) };
          }
        }),
      ),
    { all: requests, names: readHeaders },
  );
}

/** A gRPC-Web JSON body: one uncompressed envelope holding `{}`. */
const grpcWebEmptyJson = [0, 0, 0, 0, 2, ...new TextEncoder().encode("{}")];

/**
 * The method called over REST (shaped as the Flock SDKs send it: the raw
 * key, a JSON content type on every request), Connect and gRPC-Web, each
 * with a request id the page must read back from the response.
 */
function requestsFor(target: TestServer, method: DescMethod, key: string): PageRequest[] {
  const rpcPath = `${target.baseUrl}/${method.parent.typeName}/${method.name}`;
  const requests: PageRequest[] = [
    {
      label: `${method.name} over Connect`,
      url: rpcPath,
      method: "POST",
      headers: {
        Authorization: key,
        "Content-Type": "application/json",
        "Connect-Protocol-Version": "1",
        "X-Request-Id": `connect-${method.name}`,
      },
      body: "{}",
    },
    {
      label: `${method.name} over gRPC-Web`,
      url: rpcPath,
      method: "POST",
      headers: {
        Authorization: key,
        "Content-Type": "application/grpc-web+json",
        "X-Grpc-Web": "1",
        "X-User-Agent": "referrals-browser-test",
        "X-Request-Id": `grpc-web-${method.name}`,
      },
      body: grpcWebEmptyJson,
    },
  ];
  const route = httpRouteOf(method);
  if (route) {
    const hasBody = route.verb !== "GET" && route.verb !== "DELETE";
    requests.push({
      label: `${method.name} over REST (${route.verb} ${route.template})`,
      url: `${target.baseUrl}${route.template.replace(/\{[^}]+\}/g, "some-id")}`,
      method: route.verb,
      headers: {
        Authorization: key,
        "Content-Type": "application/json",
        "X-Request-Id": `rest-${method.name}`,
        ...(hasBody ? { "Idempotency-Key": `browser-${method.name}` } : {}),
      },
      ...(hasBody ? { body: "{}" } : {}),
    });
  }
  return requests;
}

/** The example page's form, filled and submitted; resolves with both result boxes once settled. */
async function runExample(page: Page, target: TestServer, externalUserId: string) {
  await page.goto(example.url);
  await page.fill("#base-url", target.baseUrl);
  await page.fill("#public-key", keys.public);
  await page.fill("#external-user-id", externalUserId);
  await page.fill("#name", "Browser Ada");
  await page.click("button[type=submit]");
  const settled = async (id: string) => {
    const box = page.locator(`#${id}:is([data-state=done], [data-state=failed])`);
    await box.waitFor();
    return { state: await box.getAttribute("data-state"), text: await box.innerText() };
  };
  return { connect: await settled("connect-result"), rest: await settled("rest-result") };
}

test("the example page identifies a customer and lists the campaigns over Connect and REST from another origin", async (t) => {
  await withPage(t, browser, async (page) => {
    const { connect, rest: overRest } = await runExample(page, server, "browser-user-1");
    t.is(connect.state, "done", connect.text);
    t.is(overRest.state, "done", overRest.text);
    const viaConnect = JSON.parse(connect.text);
    const viaRest = JSON.parse(overRest.text);

    const stored = await rest(server, "GET", "/customers?externalUserId=browser-user-1", {
      key: keys.secret,
    });
    t.is(stored.body.data.length, 1);
    const customer = stored.body.data[0];
    // One customer, identified twice (an upsert), whichever protocol came first.
    t.is(viaConnect.customerId, customer.id);
    t.is(viaRest.customerId, customer.id);
    t.is(viaConnect.referralCode, customer.referralCode);
    t.is(viaRest.referralCode, customer.referralCode);

    const campaigns = await rest(server, "GET", "/campaigns", { key: keys.public });
    const names = campaigns.body.map((campaign: { name: string }) => campaign.name);
    t.true(names.length > 0);
    t.deepEqual(viaConnect.campaigns, names);
    t.deepEqual(viaRest.campaigns, names);
    // Exposed headers are readable by the page's script.
    t.truthy(viaConnect.requestId);
    t.truthy(viaRest.requestId);
  });
});

test("every public-key RPC is callable from another origin over REST, Connect and gRPC-Web", async (t) => {
  const names = publicMethods.map((method) => method.name);
  t.log(`public-key RPCs: ${names.join(", ")}`);
  for (const known of ["IdentifyCustomer", "CreateReferral", "IngestCheckpoint", "ListCampaigns"]) {
    t.true(names.includes(known), `${known} is not among the public-key RPCs found`);
  }
  await withPage(t, browser, async (page) => {
    await page.goto(example.url);
    const requests = publicMethods.flatMap((method) => requestsFor(server, method, keys.public));
    const responses = await fetchFromPage(page, requests);
    for (const [index, response] of responses.entries()) {
      const sent = requests[index] as PageRequest;
      // Any status will do: the page must be able to read the response.
      t.is(response.error, undefined, `${response.label}: ${response.error}`);
      t.is(typeof response.status, "number", response.label);
      t.is(headerOrTrailer(response, "x-request-id"), sent.headers["X-Request-Id"], response.label);
    }
  });
});

test("errors are readable from another origin: a call without a key on each protocol", async (t) => {
  await withPage(t, browser, async (page) => {
    await page.goto(example.url);
    const identify = publicMethods.find((method) => method.name === "IdentifyCustomer");
    if (!identify) throw new Error("IdentifyCustomer is not a public-key RPC");
    const requests = requestsFor(server, identify, "").map((request) => {
      const { Authorization: _, ...headers } = request.headers;
      return { ...request, headers };
    });
    const [connect, grpcWeb, overRest] = await fetchFromPage(page, requests);
    t.is(connect?.status, 401);
    t.is(JSON.parse(connect?.body ?? "{}").code, "unauthenticated");
    // gRPC-Web answers 200 with the status in the trailers, read from the body.
    t.is(grpcWeb?.status, 200);
    t.is(headerOrTrailer(grpcWeb as PageResponse, "grpc-status"), "16");
    t.is(overRest?.status, 401);
    t.is(JSON.parse(overRest?.body ?? "{}").code, "unauthenticated");
  });
});

test("with CORS_ORIGINS set, only the listed origins' pages can call", async (t) => {
  const otherOrigin = "http://127.0.0.1:1";
  const refusing = await startServer({ env: { CORS_ORIGINS: otherOrigin } });
  const listing = await startServer({ env: { CORS_ORIGINS: `${otherOrigin},${example.origin}` } });
  try {
    await withPage(t, browser, async (page) => {
      const refused = await runExample(page, refusing, "browser-user-2");
      t.is(refused.connect.state, "failed");
      t.is(refused.rest.state, "failed");
      t.regex(refused.rest.text, /TypeError/);
      const [identify] = publicMethods.filter((method) => method.name === "IdentifyCustomer");
      const responses = await fetchFromPage(
        page,
        requestsFor(refusing, identify as DescMethod, keys.public),
      );
      for (const response of responses) t.regex(response.error ?? "", /TypeError/, response.label);

      const allowed = await runExample(page, listing, "browser-user-2");
      t.is(allowed.connect.state, "done", allowed.connect.text);
      t.is(allowed.rest.state, "done", allowed.rest.text);
    });
  } finally {
    await Promise.all([refusing.stop(), listing.stop()]);
  }
});

test.serial(
  "a phone follows a share link to a landing page that identifies the friend with its click",
  async (t) => {
    const phone =
      "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Mobile Safari/537.36";
    const referrer = (
      await rest(server, "POST", "/customers/identify", {
        key: keys.secret,
        body: { externalUserId: "browser-referrer", name: "Ada", environment: "test" },
      })
    ).body;
    // The test campaign lands on the example page (http is allowed in test campaigns).
    const campaigns = (
      await rest(server, "GET", "/campaigns?environment=test", { key: keys.secret })
    ).body;
    const campaign = campaigns.find((each: { isDefault: boolean }) => each.isDefault);
    const updated = await rest(
      server,
      "PATCH",
      `/admin/campaigns/${campaign.id}?updateMask=refereeLandingPageUrl`,
      { key: keys.admin, body: { refereeLandingPageUrl: example.url } },
    );
    t.is(updated.status, 200, JSON.stringify(updated.body));
    await withPage(t, browser, async (page) => {
      await page.setExtraHTTPHeaders({ "user-agent": phone });
      await page.goto(`${server.baseUrl}/r/${referrer.referralCode}?ch=sms`);
      const landed = new URL(page.url());
      t.is(landed.origin, new URL(example.url).origin, "landed on the campaign's page");
      t.is(landed.searchParams.get("ref"), referrer.referralCode);
      const rclk = landed.searchParams.get("rclk") ?? "";
      t.regex(rclk, /^clk_/);
      await page.locator("#invitation:not([hidden])").waitFor();
      t.regex(await page.locator("#invitation").innerText(), new RegExp(referrer.referralCode));
      await page.fill("#base-url", server.baseUrl);
      await page.fill("#public-key", keys.public);
      await page.fill("#external-user-id", "browser-friend");
      await page.fill("#name", "Grace");
      await page.click("button[type=submit]");
      // Both protocols identify the friend at once: one creates it, attached to the click.
      for (const id of ["connect-result", "rest-result"]) {
        const box = page.locator(`#${id}:is([data-state=done], [data-state=failed])`);
        await box.waitFor();
        t.is(await box.getAttribute("data-state"), "done", await box.innerText());
      }
    });
    const friend = (
      await rest(server, "GET", "/customers?externalUserId=browser-friend", { key: keys.secret })
    ).body.data[0];
    t.is(friend.environment, "test", "the click names its campaign's environment");
    t.is(friend.referredBy?.id, referrer.id);
    const referrals = await rest(server, "GET", `/referrals?referrerId=${referrer.id}`, {
      key: keys.secret,
    });
    t.is(referrals.body.data.length, 1);
    t.like(referrals.body.data[0], { status: "pending", attribution: { method: "click" } });
  },
);
