import { ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { CampaignsService } from "../../gen/referral/v1/campaigns_pb.js";
import { CustomersService } from "../../gen/referral/v1/customers_pb.js";

/** What the form asks for, and the click the page was opened with. */
interface Settings {
  readonly baseUrl: string;
  readonly publicKey: string;
  readonly externalUserId: string;
  readonly name: string;
  /** `rclk`: the click on a share link that led here (docs/links.md); identify attaches a new customer to it. */
  readonly clickId: string | undefined;
}

/**
 * A share link (`/r/{code}`) lands here with `ref` (the friend's code) and
 * `rclk` (the click): the page says who invited the visitor, and passes the
 * click on when it identifies them.
 */
const invitation = new URLSearchParams(location.search);
const clickId = invitation.get("rclk") ?? undefined;
const invitedBy = invitation.get("ref");

/** What the page shows for one protocol. */
interface Outcome {
  readonly customerId: string;
  readonly referralCode: string;
  /** The customer who referred this one: the click's referrer, when the page was opened from a share link. */
  readonly referredBy: string | null;
  readonly campaigns: readonly string[];
  /** The `X-Request-Id` of the identify call: readable only because the service exposes it. */
  readonly requestId: string | null;
}

/** Identifies the customer and lists the campaigns with the Connect protocol (JSON). */
async function overConnect(settings: Settings): Promise<Outcome> {
  // A public key is the whole credential: it goes in Authorization on every call.
  const sendKey: Interceptor = (next) => (request) => {
    request.header.set("Authorization", settings.publicKey);
    return next(request);
  };
  const transport = createConnectTransport({ baseUrl: settings.baseUrl, interceptors: [sendKey] });
  const customers = createClient(CustomersService, transport);
  const campaigns = createClient(CampaignsService, transport);
  let requestId: string | null = null;
  const { customer } = await customers.identifyCustomer(
    { externalUserId: settings.externalUserId, name: settings.name, clickId: settings.clickId },
    { onHeader: (headers) => (requestId = headers.get("X-Request-Id")) },
  );
  const listed = await campaigns.listCampaigns({});
  return {
    customerId: customer?.id ?? "",
    referralCode: customer?.referralCode ?? "",
    referredBy: customer?.referredBy?.id ?? null,
    campaigns: listed.campaigns.map((campaign) => campaign.name),
    requestId,
  };
}

/** The same two calls as JSON REST with `fetch`. */
async function overRest(settings: Settings): Promise<Outcome> {
  const identified = await fetch(`${settings.baseUrl}/customers/identify`, {
    method: "POST",
    headers: { Authorization: settings.publicKey, "Content-Type": "application/json" },
    body: JSON.stringify({
      externalUserId: settings.externalUserId,
      name: settings.name,
      ...(settings.clickId ? { clickId: settings.clickId } : {}),
    }),
  });
  const customer = await bodyOf(identified);
  const listed = await fetch(`${settings.baseUrl}/campaigns`, {
    headers: { Authorization: settings.publicKey },
  });
  const campaigns = (await bodyOf(listed)) as Array<{ name: string }>;
  return {
    customerId: customer.id,
    referralCode: customer.referralCode,
    referredBy: customer.referredBy?.id ?? null,
    campaigns: campaigns.map((campaign) => campaign.name),
    requestId: identified.headers.get("X-Request-Id"),
  };
}

/** The JSON body of a success; an error's `{ code, message }` body as an Error. */
// biome-ignore lint/suspicious/noExplicitAny: the REST JSON is read field by field.
async function bodyOf(response: Response): Promise<any> {
  const body = await response.json();
  if (!response.ok) throw new Error(`HTTP ${response.status} ${body.code}: ${body.message}`);
  return body;
}

/** Runs one protocol's calls and writes the outcome, or the error, into its box. */
async function show(box: HTMLElement, outcome: Promise<Outcome>): Promise<void> {
  box.dataset.state = "running";
  box.textContent = "…";
  try {
    box.textContent = JSON.stringify(await outcome, null, 2);
    box.dataset.state = "done";
  } catch (error) {
    // A refused origin surfaces as a network error: the browser hides the response.
    box.textContent = error instanceof ConnectError ? error.message : String(error);
    box.dataset.state = "failed";
  }
}

function field(id: string): string {
  return (document.getElementById(id) as HTMLInputElement).value.trim();
}

document.getElementById("identify")?.addEventListener("submit", (event) => {
  event.preventDefault();
  const settings: Settings = {
    baseUrl: field("base-url").replace(/\/+$/, ""),
    publicKey: field("public-key"),
    externalUserId: field("external-user-id"),
    name: field("name"),
    clickId,
  };
  void show(document.getElementById("connect-result") as HTMLElement, overConnect(settings));
  void show(document.getElementById("rest-result") as HTMLElement, overRest(settings));
});

if (invitedBy) {
  const note = document.getElementById("invitation") as HTMLElement;
  note.textContent = `You were invited with the code ${invitedBy}: identifying you attaches you to your friend.`;
  note.hidden = false;
}
