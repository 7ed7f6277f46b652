import type { ProvisionedDemo } from "./services/provisioning.js";

/** What the banner reports. */
export interface BannerInput {
  readonly port: number;
  readonly host: string;
  readonly engine: string;
  readonly demo: ProvisionedDemo | undefined;
  readonly adminEnabled: boolean;
  /** The port serves TLS (TLS_CERT_FILE): the commands use https. */
  readonly tls?: boolean;
  /** Demo keys the environment gave (BOOTSTRAP_SECRET_KEY, BOOTSTRAP_PUBLIC_KEY): not printed. */
  readonly keysGiven: { readonly secret: boolean; readonly public: boolean };
  /** The processes serving the port (WORKERS). */
  readonly workers?: number;
  /**
   * Started by `npm run dev`: its development keys and admin token, printed
   * at every start (undefined otherwise).
   */
  readonly development?: {
    readonly secretKey: string;
    readonly publicKey: string;
    readonly adminToken: string;
    readonly dataDir: string;
  };
}

/**
 * The text printed at start-up: where the service listens and, on the first
 * start, the demo keys (shown this once) with commands ready to paste.
 */
export function startupBanner(input: BannerInput): string {
  const host = input.host === "0.0.0.0" || input.host === "::" ? "localhost" : input.host;
  const address = `${host}:${input.port}`;
  const scheme = input.tls ? "https" : "http";
  const lines = [
    "",
    `Referral service listening on ${address}${input.tls ? " over TLS" : ""} (REST, Connect, gRPC-Web and gRPC on one port; store: ${input.engine}${(input.workers ?? 1) > 1 ? `; ${input.workers} worker processes` : ""})`,
  ];
  const development = input.development;
  if (development) {
    lines.push(
      "",
      `Development start (npm run dev): data in ${development.dataDir}, admin API on, webhooks to`,
      "loopback allowed (npm run admin -- listen), pretty logs. These are development keys,",
      "printed at every start:",
      `  secret key:  ${development.secretKey}`,
      `  public key:  ${development.publicKey}`,
      `  admin token: ${development.adminToken}`,
      "",
      "In another terminal:",
      `  export SK=${development.secretKey} PK=${development.publicKey}`,
      `  curl -s ${scheme}://${address}/campaigns -H "Authorization: $PK"`,
      "  npm run admin -- listen        # every webhook delivery, verified",
      "  npm run admin -- list-apps     # the admin CLI finds the token itself",
      "",
      `The API reference: ${scheme}://${address}/docs (the OpenAPI document: /openapi.json)`,
    );
  } else if (input.demo) {
    // A key the operator gave is theirs already, and stays out of the output
    // (which is the log stream): its line and the commands name its variable.
    const shown = (key: string, given: boolean, variable: string) =>
      given
        ? { command: `$${variable}`, line: `the value of ${variable}` }
        : { command: key, line: key };
    const secret = shown(input.demo.secretKey, input.keysGiven.secret, "BOOTSTRAP_SECRET_KEY");
    const publicKey = shown(input.demo.publicKey, input.keysGiven.public, "BOOTSTRAP_PUBLIC_KEY");
    lines.push(
      "",
      "First start: provisioned a demo organization and application with a default live campaign",
      "in production and in test. Its API keys are shown this once; keep them:",
      `  secret key: ${secret.line}`,
      `  public key: ${publicKey.line}`,
      "",
      "Try it:",
      `  curl -s -X POST ${scheme}://${address}/customers/identify -H "Authorization: ${publicKey.command}" \\`,
      `       -H "Content-Type: application/json" -d '{"externalUserId":"u1","name":"Ada"}'`,
      `  curl -s ${scheme}://${address}/campaigns -H "Authorization: ${publicKey.command}"`,
      `  npx buf curl --schema proto --protocol connect -H "Authorization: ${secret.command}" \\`,
      `       ${scheme}://${address}/referral.v1.CustomersService/ListCustomers`,
      `  npx buf curl --protocol grpc ${input.tls ? "" : "--http2-prior-knowledge "}-H "Authorization: ${publicKey.command}" \\`,
      `       ${scheme}://${address}/referral.v1.CampaignsService/ListCampaigns`,
      "",
      `The API reference: ${scheme}://${address}/docs (the OpenAPI document: /openapi.json)`,
    );
  } else {
    lines.push(
      "Using existing data: the API keys were printed on the first start. To make another:",
      "  ADMIN_TOKEN=... npm run admin -- create-key <applicationId> secret",
      "(npm run admin -- list-apps names the applications; `npm run dev` prints its keys at every start)",
    );
  }
  lines.push(
    `How the program performs, live: ${scheme}://${address}/dashboard (paste a secret key)`,
  );
  if (!input.adminEnabled) {
    lines.push("", "Admin API disabled; set ADMIN_TOKEN to enable it (and `npm run admin`).");
  }
  return `${lines.join("\n")}\n\n`;
}
