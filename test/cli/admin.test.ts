import { execFile } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import test from "ava";
import { runAdminCli } from "../../src/cli/admin.js";
import { asUsersRunIt, type Json, keys, rest, useServer } from "../helpers/server.js";

const run = promisify(execFile);

const server = useServer(asUsersRunIt);
const root = new URL("../../", import.meta.url).pathname;

/** What one command printed (each `out` call a line, as the script writes them) and its exit code. */
interface AdminRun {
  readonly code: number;
  readonly output: string;
}

/**
 * `npm run admin -- <args> --json` run in this process: the function the
 * script's entry point calls, so each command costs a call, not a process.
 * The last test runs the script itself.
 */
async function runAdmin(...args: string[]): Promise<AdminRun> {
  const lines: string[] = [];
  const code = await runAdminCli(
    [...args, "--url", server.baseUrl, "--token", keys.admin, "--json"],
    (text) => lines.push(text),
  );
  return { code, output: lines.join("\n") };
}

/** A command that must succeed: its JSON output. */
async function admin(...args: string[]): Promise<Json> {
  const { code, output } = await runAdmin(...args);
  if (code !== 0) throw new Error(`admin ${args.join(" ")} exited ${code}:\n${output}`);
  return JSON.parse(output);
}

test.serial("create an application, use its keys, revoke one", async (t) => {
  const created = await admin("create-app", "CLI App");
  t.regex(created.secretKey, /^sk_/);
  t.regex(created.publicKey, /^pk_/);
  const appId = created.application.id;
  t.is((await rest(server, "GET", "/customers", { key: created.secretKey })).status, 200);

  const key = await admin("create-key", appId, "public", "--name", "ios app");
  t.is(key.apiKey.kind, "public");
  t.is(key.apiKey.name, "ios app");
  t.is((await rest(server, "GET", "/campaigns", { key: key.key })).status, 200);

  const listed = await admin("list-keys", appId);
  t.is(listed.length, 3);
  t.false(JSON.stringify(listed).includes(key.key), "keys are never listed");
  const revoked = await admin("revoke-key", key.apiKey.id);
  t.truthy(revoked.revokedAt);
  t.is((await rest(server, "GET", "/campaigns", { key: key.key })).status, 401);
  const apps = await admin("list-apps");
  t.is(apps.length, 2);
});

test.serial("erase a customer of an application for a deletion request", async (t) => {
  const created = await admin("create-app", "Erasure App");
  const customer = await rest(server, "POST", "/customers/identify", {
    key: created.secretKey,
    body: { externalUserId: "cli-leaving", name: "Lee", email: "lee@example.com" },
  });
  const erased = await admin("erase-customer", created.application.id, customer.body.id);
  t.like(erased, { id: customer.body.id, name: "", externalUserId: "", email: null });
  t.truthy(erased.deletedAt);
  const read = await rest(server, "GET", `/customers/${customer.body.id}`, {
    key: created.secretKey,
  });
  t.deepEqual(read.body, erased);
  const missing = await runAdmin("erase-customer", created.application.id, "cus_missing");
  t.not(missing.code, 0);
  t.regex(missing.output, /customer cus_missing not found/);
});

test.serial("create, update and delete a campaign from a JSON file", async (t) => {
  const created = await admin("create-app", "Campaign App");
  const file = join(mkdtempSync(join(tmpdir(), "referrals-cli-")), "campaign.json");
  writeFileSync(
    file,
    JSON.stringify({
      name: "Spring promo",
      environment: "test",
      isLive: true,
      isDefault: true,
      manualRewardTrigger: "subscription",
      platforms: ["web"],
      rewards: [
        {
          type: "discount",
          party: "referee",
          method: "custom",
          currency: "cad",
          discountPercentage: 15,
          limit: 2,
          limitUnit: "rewards",
          limitInterval: "week",
          approval: "manual",
          holdPeriod: "14d",
          expiresAfter: "90d",
        },
      ],
      timeZone: "America/Toronto",
      emails: [
        {
          type: "invitee:reward",
          subjectLine: "Hi",
          message: "15% off",
          buttonText: "Go",
          buttonColor: "#000",
        },
      ],
      faqs: [{ question: "Q?", answer: "A." }],
    }),
  );
  const campaign = await admin("create-campaign", created.application.id, "--file", file);
  t.like(campaign, {
    name: "Spring promo",
    environment: "test",
    isDefault: true,
    manualRewardTrigger: "subscription",
  });
  t.like(campaign.rewards[0], {
    limit: 2,
    limitUnit: "rewards",
    limitInterval: "week",
    approval: "manual",
    holdPeriod: "14d",
    expiresAfter: "90d",
  });
  t.is(campaign.timeZone, "America/Toronto");
  t.regex(campaign.rewards[0].id, /^rwd_/);
  t.is(campaign.rewards[0].campaignId, campaign.id);
  t.is(campaign.emails[0].type, "invitee:reward");

  const listed = await rest(server, "GET", "/campaigns", { key: created.publicKey });
  t.deepEqual(
    listed.body.map((c: { id: string }) => c.id),
    [campaign.id],
  );
  // The operator's list: every campaign of the application, newest first, per environment.
  const all = await admin("list-campaigns", created.application.id);
  t.deepEqual(
    all.map((c: Json) => [c.id, c.environment]),
    [[campaign.id, "test"]],
  );
  t.deepEqual(
    await admin("list-campaigns", created.application.id, "--environment", "production"),
    [],
  );
  const text = await runAdminCli(
    ["list-campaigns", created.application.id, "--url", server.baseUrl, "--token", keys.admin],
    (line) => t.is(line, `${campaign.id}  Spring promo  (test, live, default)`),
  );
  t.is(text, 0);
  const wrong = await runAdmin(
    "list-campaigns",
    created.application.id,
    "--environment",
    "staging",
  );
  t.not(wrong.code, 0);
  t.regex(wrong.output, /--environment is production or test/);

  writeFileSync(file, JSON.stringify({ name: "Summer promo", isLive: false }));
  const updated = await admin(
    "update-campaign",
    campaign.id,
    "--file",
    file,
    "--mask",
    "name,isLive",
  );
  t.like(updated, { name: "Summer promo", isLive: false, isDefault: true });
  t.is(updated.rewards.length, 1, "fields outside the mask are kept");

  // Without --mask, only the fields the file sets change (as PATCH /webhooks/{id}).
  writeFileSync(file, JSON.stringify({ isLive: true, manualRewardTrigger: null }));
  const unmasked = await admin("update-campaign", campaign.id, "--file", file);
  t.like(unmasked, {
    name: "Summer promo",
    isLive: true,
    isDefault: true,
    manualRewardTrigger: null,
    environment: "test",
  });
  t.is(unmasked.rewards.length, 1, "fields the file leaves out are kept");
  t.is(unmasked.faqs.length, 1);
  t.deepEqual(unmasked.platforms, ["web"]);

  writeFileSync(file, "{}");
  const empty = await runAdmin("update-campaign", campaign.id, "--file", file);
  t.is(empty.code, 2);
  t.regex(empty.output, /the file sets no field/);
  writeFileSync(file, JSON.stringify({ id: "cmp_other", name: "x" }));
  const owned = await runAdmin("update-campaign", campaign.id, "--file", file);
  t.is(owned.code, 1);
  t.regex(owned.output, /updateMask names no editable campaign field: id/);
  const listedAfter = await rest(server, "GET", "/campaigns", { key: created.publicKey });
  t.like(listedAfter.body[0], { name: "Summer promo", isLive: true }, "refusals change nothing");

  const deleted = await admin("delete-campaign", campaign.id);
  t.truthy(deleted.deletedAt);
  t.deepEqual((await rest(server, "GET", "/campaigns", { key: created.publicKey })).body, []);
});

test.serial("errors are reported with a non-zero exit", async (t) => {
  const { code, output } = await runAdmin("revoke-key", "key_missing");
  t.is(code, 1);
  t.regex(output, /^error: .*not found/);
});

test.serial(
  "a campaign file that is missing, not JSON or not a campaign is one line naming it",
  async (t) => {
    const dir = mkdtempSync(join(tmpdir(), "referrals-cli-"));
    const notJson = join(dir, "not-json.json");
    writeFileSync(notJson, "{name:");
    const notCampaign = join(dir, "array.json");
    writeFileSync(notCampaign, "[]");
    const unknownField = join(dir, "unknown.json");
    writeFileSync(unknownField, JSON.stringify({ name: "x", colour: "red" }));
    const cases = [
      [join(dir, "missing.json"), /^error: .*missing\.json: no such file$/],
      [notJson, /^error: .*not-json\.json: .*JSON/],
      [notCampaign, /^error: .*array\.json: must hold a JSON object: a campaign$/],
      [unknownField, /^error: .*unknown\.json: .*colour/],
    ] as const;
    for (const [file, expected] of cases) {
      // An error the CLI did not expect would reject here (a stack trace from the script).
      const { code, output } = await runAdmin("create-campaign", "app_x", "--file", file);
      t.is(code, 1, file);
      t.regex(output, expected);
    }
  },
);

test.serial("set a campaign's placement checkpoints", async (t) => {
  const created = await admin("create-app", "Checkpoint App");
  const file = join(mkdtempSync(join(tmpdir(), "referrals-cli-")), "campaign.json");
  writeFileSync(
    file,
    JSON.stringify({
      name: "Placed",
      environment: "production",
      proposedRewardTrigger: "purchase",
    }),
  );
  const campaign = await admin("create-campaign", created.application.id, "--file", file);
  const set = await admin(
    "set-checkpoints",
    campaign.id,
    "--placement",
    "onboarding_complete=home_banner",
    "--placement",
    "level_up=sidebar=left",
  );
  const summary = (data: Json[]) => data.map((c) => [c.trigger, c.checkpointName, c.placementId]);
  t.deepEqual(summary(set.data), [
    ["reward", "purchase", null],
    ["placement", "onboarding_complete", "home_banner"],
    ["placement", "level_up", "sidebar=left"],
  ]);
  const read = await rest(server, "GET", `/campaign-checkpoints?campaignId=${campaign.id}`, {
    key: created.publicKey,
  });
  t.deepEqual(read.body, set, "--json prints what the REST route answers");

  const bare = await runAdmin("set-checkpoints", campaign.id);
  t.is(bare.code, 2);
  t.regex(bare.output, /needs --placement .* or --clear/);
  const malformed = await runAdmin("set-checkpoints", campaign.id, "--placement", "no-placement");
  t.is(malformed.code, 2);
  t.regex(malformed.output, /write <checkpointName>=<placementId>/);

  const cleared = await admin("set-checkpoints", campaign.id, "--clear");
  t.deepEqual(summary(cleared.data), [["reward", "purchase", null]]);
});

test.serial(
  "rotate an application's identity secret and set its identity verification",
  async (t) => {
    const created = await admin("create-app", "Identity App");
    const appId = created.application.id;
    const first = await admin("rotate-identity-secret", appId);
    t.regex(first.identitySecret, /^idsec_/);
    t.is(first.previousSecretExpiresAt, null, "no previous secret the first time");
    const second = await admin("rotate-identity-secret", appId);
    t.not(second.identitySecret, first.identitySecret);
    t.truthy(second.previousSecretExpiresAt);
    const text = await runAdminCli(
      ["rotate-identity-secret", appId, "--url", server.baseUrl, "--token", keys.admin],
      (line) => {
        t.regex(line, /^identity secret: idsec_\S+\nThe secret is shown this once/);
        t.regex(line, /The previous secret verifies until \d{4}-/);
      },
    );
    t.is(text, 0);

    const required = await admin("set-identity-verification", appId, "required");
    t.is(required.identityVerification, "required");
    const identify = await rest(server, "POST", "/customers/identify", {
      key: created.publicKey,
      body: { externalUserId: "cli-user", name: "Cli" },
    });
    t.is(identify.status, 403, "required: a public key needs a userHash");
    t.regex(identify.body.message, /^userHash is required/);
    const listed = await admin("list-apps");
    const described = listed.find((app: Json) => app.id === appId);
    t.is(described.identityVerification, "required");
    t.false(JSON.stringify(listed).includes(second.identitySecret), "the secret is never listed");
    t.is(
      (await admin("set-identity-verification", appId, "protect")).identityVerification,
      "protect",
    );

    const wrongMode = await runAdmin("set-identity-verification", appId, "strict");
    t.is(wrongMode.code, 2);
    t.regex(wrongMode.output, /the mode is protect or required/);
    const bare = await runAdmin("set-identity-verification");
    t.is(bare.code, 2);
    t.regex(bare.output, /needs <protect\|required>/);
    const missing = await runAdmin("rotate-identity-secret", "app_missing");
    t.is(missing.code, 1);
    t.regex(missing.output, /application app_missing not found/);

    t.is((await admin("set-network-facts", appId, "off")).networkFacts, "off");
    t.is((await admin("set-network-facts", appId, "collect")).networkFacts, "collect");
    const wrongSetting = await runAdmin("set-network-facts", appId, "some");
    t.is(wrongSetting.code, 2);
    t.regex(wrongSetting.output, /the setting is collect or off/);
  },
);

test.serial(
  "the script itself: ADMIN_TOKEN from the environment, exit codes, no stack trace",
  async (t) => {
    // `npm run admin` runs this entry point's build; here its source, through tsx.
    const script = (...args: string[]) =>
      run(process.execPath, ["--import", "tsx", "src/cli/admin.ts", ...args], {
        cwd: root,
        env: { ...process.env, ADMIN_TOKEN: keys.admin },
      }).catch((error: { code?: number; stdout?: string; stderr?: string }) => error);
    const missing = join(mkdtempSync(join(tmpdir(), "referrals-cli-")), "missing.json");
    const [created, failed] = await Promise.all([
      script("create-app", "Script App", "--url", server.baseUrl, "--json"),
      script("create-campaign", "app_x", "--file", missing, "--url", server.baseUrl),
    ]);
    t.regex(JSON.parse(String(created.stdout)).secretKey, /^sk_/);
    t.is(created.stderr, "");
    t.is((failed as { code?: number }).code, 1);
    t.is(failed.stdout, `error: ${missing}: no such file\n`);
    t.is(failed.stderr, "", "no stack trace");
    const apps = await admin("list-apps");
    t.true(apps.some((app: Json) => app.name === "Script App"));
  },
);

test.serial(
  "set-fraud-policy sets a campaign's policy from a file, clears it, and names a bad field",
  async (t) => {
    const created = await admin("create-app", "Fraud CLI App");
    const dir = mkdtempSync(join(tmpdir(), "referrals-cli-"));
    const campaignFile = join(dir, "campaign.json");
    writeFileSync(campaignFile, JSON.stringify({ name: "Guarded", environment: "production" }));
    const campaign = await admin("create-campaign", created.application.id, "--file", campaignFile);
    const policyFile = join(dir, "policy.json");
    writeFileSync(
      policyFile,
      JSON.stringify({
        mode: "shadow",
        rules: [{ type: "disposable_email" }, { type: "velocity", params: { perHour: 5 } }],
        deny: { domains: ["fraud.example"] },
      }),
    );
    const set = await admin("set-fraud-policy", campaign.id, "--file", policyFile);
    t.like(set.fraudPolicy, {
      mode: "shadow",
      rules: [
        { type: "disposable_email", action: "flag", severity: "medium" },
        { type: "velocity", params: { perHour: 5 } },
      ],
      deny: { domains: ["fraud.example"] },
    });
    const text = await runAdmin("set-fraud-policy", campaign.id, "--file", policyFile);
    t.is(text.code, 0);
    writeFileSync(policyFile, JSON.stringify({ rules: [{ type: "velocity", action: "reject" }] }));
    const refused = await runAdmin("set-fraud-policy", campaign.id, "--file", policyFile);
    t.is(refused.code, 1);
    t.regex(refused.output, /campaign\.fraudPolicy\.rules\[0\]\.action/);
    const cleared = await admin("set-fraud-policy", campaign.id, "--clear");
    t.falsy(cleared.fraudPolicy, "the defaults again");
    const bare = await runAdmin("set-fraud-policy", campaign.id);
    t.is(bare.code, 2);
    t.regex(bare.output, /needs --file <policy.json> or --clear/);
  },
);
