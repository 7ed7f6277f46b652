import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import type { DescMethod, Message } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { type Client, ConnectError } from "@connectrpc/connect";
import {
  AdminService,
  ApiKeyKind,
  IdentityVerification,
  NetworkFacts,
} from "../../gen/referral/v1/admin_pb.js";
import type { Campaign } from "../../gen/referral/v1/resources_pb.js";
import {
  CampaignCheckpointTrigger,
  CampaignFraudPolicySchema,
  CampaignSchema,
  Environment,
  FraudPolicyMode,
} from "../../gen/referral/v1/resources_pb.js";
import { fromPlain, toPlain } from "../contract/plain-codec.js";
import { savedDevelopmentSecrets } from "../development.js";
import { httpRouteOf } from "../transport/rest/http-rules.js";
import { restFromResponse } from "../transport/rest/transcode.js";
import { runListen } from "./listen.js";
import { serviceClient, serviceUrl } from "./service-client.js";

/**
 * What a command works with. The helpers are plain functions, so a command may destructure
 * them; they throw a `UsageError` for a missing argument.
 */
interface CommandContext {
  client: Client<typeof AdminService>;
  options: CommandLineOptions;
  /** The positional argument after the command at `index`; `name` is how the error names it. */
  argument: (index: number, name: string) => string;
  /**
   * The campaign in the `--file` given, read as the REST JSON of a campaign,
   * and the fields the file names (its keys, as written).
   */
  campaignFromFile: () => { campaign: Campaign; fields: string[] };
  /** Prints `response` as the REST route of `method` answers it with `--json`, else `text()`. */
  print: (method: DescMethod, response: Message, text: () => string) => void;
}

/** One sub-command of `npm run admin`. */
interface AdminCommand {
  name: string;
  /** The arguments and options after the name, as the help shows them. */
  usage: string;
  /**
   * Shown beside the usage in the help. Only some commands have one: the help is output
   * like any other, and a new summary changes it.
   */
  summary?: string;
  run(context: CommandContext): Promise<void>;
}

/** The commands, in the order the help lists them. */
const adminCommands: readonly AdminCommand[] = [
  {
    name: "create-app",
    usage: "<name> [--org <organizationId>]",
    summary: "create an application (and its organization) with a secret and a public key",
    async run({ client, options, argument, print }) {
      const response = await client.createApplication({
        name: argument(0, "name"),
        organizationId: options.org,
      });
      print(AdminService.method.createApplication, response, () =>
        [
          `application ${response.application?.id} (organization ${response.application?.organizationId})`,
          `secret key: ${response.secretKey}`,
          `public key: ${response.publicKey}`,
          "The keys are shown this once.",
        ].join("\n"),
      );
    },
  },
  {
    name: "list-apps",
    usage: "",
    summary: "list applications",
    async run({ client, print }) {
      const response = await client.listApplications({});
      print(AdminService.method.listApplications, response, () =>
        response.applications
          .map((a) => `${a.id}  ${a.name}  (organization ${a.organizationId})`)
          .join("\n"),
      );
    },
  },
  {
    name: "rotate-identity-secret",
    usage: "<applicationId>",
    summary: "create or rotate the secret that signs userHash (docs/trust.md)",
    async run({ client, argument, print }) {
      const response = await client.rotateIdentitySecret({
        applicationId: argument(0, "applicationId"),
      });
      print(AdminService.method.rotateIdentitySecret, response, () => {
        const until = response.previousSecretExpiresAt;
        return [
          `identity secret: ${response.identitySecret}`,
          "The secret is shown this once: keep it in the app's backend, never in the app.",
          ...(until
            ? [`The previous secret verifies until ${timestampDate(until).toISOString()}.`]
            : []),
        ].join("\n");
      });
    },
  },
  {
    name: "set-identity-verification",
    usage: "<applicationId> <protect|required>",
    summary: "what public-key calls must prove about their customer (docs/trust.md)",
    async run({ client, argument, print }) {
      // Read before the application id, so a bare command reports the missing mode.
      const mode = argument(1, "protect|required");
      if (mode !== "protect" && mode !== "required") {
        throw new UsageError("the mode is protect or required");
      }
      const response = await client.updateApplication({
        id: argument(0, "applicationId"),
        application: {
          identityVerification:
            mode === "protect" ? IdentityVerification.PROTECT : IdentityVerification.REQUIRED,
        },
        updateMask: ["identityVerification"],
      });
      print(
        AdminService.method.updateApplication,
        response,
        () => `application ${response.application?.id}: identity verification ${mode}`,
      );
    },
  },
  {
    name: "set-network-facts",
    usage: "<applicationId> <collect|off>",
    summary: "whether referrals keep network facts as fraud evidence (docs/fraud.md)",
    async run({ client, argument, print }) {
      const setting = argument(1, "collect|off");
      if (setting !== "collect" && setting !== "off") {
        throw new UsageError("the setting is collect or off");
      }
      const response = await client.updateApplication({
        id: argument(0, "applicationId"),
        application: {
          networkFacts: setting === "collect" ? NetworkFacts.COLLECT : NetworkFacts.OFF,
        },
        updateMask: ["networkFacts"],
      });
      print(
        AdminService.method.updateApplication,
        response,
        () => `application ${response.application?.id}: network facts ${setting}`,
      );
    },
  },
  {
    name: "create-key",
    usage: "<applicationId> <public|secret> [--name <note>]",
    async run({ client, options, argument, print }) {
      // Read before the application id, so a bare `create-key` reports the missing kind.
      const kind = argument(1, "public|secret");
      if (kind !== "public" && kind !== "secret") {
        throw new UsageError("the kind is public or secret");
      }
      const response = await client.createApiKey({
        applicationId: argument(0, "applicationId"),
        kind: kind === "public" ? ApiKeyKind.PUBLIC : ApiKeyKind.SECRET,
        name: options.name,
      });
      print(
        AdminService.method.createApiKey,
        response,
        () => `${kind} key ${response.apiKey?.id}: ${response.key}\nThe key is shown this once.`,
      );
    },
  },
  {
    name: "list-keys",
    usage: "<applicationId>",
    async run({ client, argument, print }) {
      const response = await client.listApiKeys({ applicationId: argument(0, "applicationId") });
      print(AdminService.method.listApiKeys, response, () =>
        response.apiKeys
          .map(
            (k) =>
              `${k.id}  ${ApiKeyKind[k.kind].toLowerCase()}  ${k.prefix}  ${k.revokedAt ? "revoked" : "active"}`,
          )
          .join("\n"),
      );
    },
  },
  {
    name: "revoke-key",
    usage: "<keyId>",
    async run({ client, argument, print }) {
      const response = await client.revokeApiKey({ id: argument(0, "keyId") });
      print(AdminService.method.revokeApiKey, response, () => `revoked ${response.apiKey?.id}`);
    },
  },
  {
    name: "list-campaigns",
    usage: "<applicationId> [--environment production|test]",
    summary: "list an application's campaigns, newest first",
    async run({ client, options, argument, print }) {
      const applicationId = argument(0, "applicationId");
      const environment = options.environment;
      if (environment !== undefined && environment !== "production" && environment !== "test") {
        throw new UsageError("--environment is production or test");
      }
      const response = await client.listApplicationCampaigns({
        applicationId,
        environment:
          environment === "production"
            ? Environment.PRODUCTION
            : environment === "test"
              ? Environment.TEST
              : Environment.UNSPECIFIED,
      });
      print(AdminService.method.listApplicationCampaigns, response, () =>
        response.campaigns.length === 0
          ? "no campaigns"
          : response.campaigns
              .map((campaign) => {
                const flags = [campaign.isLive ? "live" : "not live"];
                if (campaign.isDefault) flags.push("default");
                const environmentWord =
                  campaign.environment === Environment.TEST ? "test" : "production";
                return `${campaign.id}  ${campaign.name}  (${environmentWord}, ${flags.join(", ")})`;
              })
              .join("\n"),
      );
    },
  },
  {
    name: "create-campaign",
    usage: "<applicationId> --file <campaign.json>",
    async run({ client, argument, campaignFromFile, print }) {
      const response = await client.createCampaign({
        applicationId: argument(0, "applicationId"),
        campaign: campaignFromFile().campaign,
      });
      print(
        AdminService.method.createCampaign,
        response,
        () => `created campaign ${response.campaign?.id}`,
      );
    },
  },
  {
    name: "update-campaign",
    usage: "<campaignId> --file <changes.json> [--mask name,isLive,...]",
    async run({ client, options, argument, campaignFromFile, print }) {
      const id = argument(0, "campaignId");
      const { campaign, fields } = campaignFromFile();
      // As PATCH /webhooks/{id}: only what is sent changes. An empty mask
      // would make the RPC replace every field, clearing those left out.
      const updateMask = options.mask ? options.mask.split(",").map((s) => s.trim()) : fields;
      if (updateMask.length === 0) {
        throw new UsageError("update-campaign: the file sets no field, so nothing would change");
      }
      const response = await client.updateCampaign({ id, campaign, updateMask });
      print(
        AdminService.method.updateCampaign,
        response,
        () => `updated campaign ${response.campaign?.id}`,
      );
    },
  },
  {
    name: "set-fraud-policy",
    usage: "<campaignId> --file <policy.json> | --clear",
    summary: "the campaign's fraud policy (docs/fraud.md); --clear for the defaults",
    async run({ client, options, argument, print }) {
      const id = argument(0, "campaignId");
      if (!options.file && !options.clear) {
        throw new UsageError("set-fraud-policy needs --file <policy.json> or --clear");
      }
      const fraudPolicy = options.clear
        ? undefined
        : readInputFile(options.file as string, (text) => {
            const json: unknown = JSON.parse(text);
            if (typeof json !== "object" || json === null || Array.isArray(json)) {
              throw new Error("must hold a JSON object: a fraud policy");
            }
            return fromPlain(CampaignFraudPolicySchema, json);
          });
      const response = await client.updateCampaign({
        id,
        campaign: { fraudPolicy },
        updateMask: ["fraud_policy"],
      });
      const policy = response.campaign?.fraudPolicy;
      print(AdminService.method.updateCampaign, response, () =>
        policy
          ? `campaign ${id}: ${policy.rules.length} fraud rules, mode ${policy.mode === FraudPolicyMode.SHADOW ? "shadow" : "enforce"}`
          : `campaign ${id}: the default fraud rules`,
      );
    },
  },
  {
    name: "set-checkpoints",
    usage: "<campaignId> --placement <checkpointName>=<placementId> ... | --clear",
    async run({ client, options, argument, print }) {
      const id = argument(0, "campaignId");
      const given = options.placement ?? [];
      if (given.length === 0 && !options.clear) {
        throw new UsageError(
          "set-checkpoints needs --placement <checkpointName>=<placementId> or --clear",
        );
      }
      const placements = given.map((pair) => {
        const at = pair.indexOf("=");
        const checkpointName = at > 0 ? pair.slice(0, at) : "";
        const placementId = pair.slice(at + 1);
        if (!checkpointName || !placementId) {
          throw new UsageError(`--placement ${pair}: write <checkpointName>=<placementId>`);
        }
        return { checkpointName, placementId };
      });
      const response = await client.setCampaignCheckpoints({ id, placements });
      print(AdminService.method.setCampaignCheckpoints, response, () =>
        response.data
          .map((c) =>
            c.trigger === CampaignCheckpointTrigger.REWARD
              ? `${c.id}  reward     ${c.checkpointName}`
              : `${c.id}  placement  ${c.checkpointName} -> ${c.placementId}`,
          )
          .join("\n"),
      );
    },
  },
  {
    name: "erase-customer",
    usage: "<applicationId> <customerId>",
    summary: "erase a customer's personal data everywhere (docs/privacy.md)",
    async run({ client, argument, print }) {
      const response = await client.eraseApplicationCustomer({
        applicationId: argument(0, "applicationId"),
        customerId: argument(1, "customerId"),
      });
      print(
        AdminService.method.eraseApplicationCustomer,
        response,
        () =>
          `erased customer ${response.customer?.id}: its tombstone stays (id, deletedAt, counters, retired code)`,
      );
    },
  },
  {
    name: "verify-stats",
    usage: "<applicationId> [--repair]",
    summary: "recount an application's numbers from its records; --repair sets the counters to it",
    async run({ client, options, argument, print }) {
      const response = await client.verifyApplicationStats({
        applicationId: argument(0, "applicationId"),
        repair: options.repair ?? false,
      });
      print(AdminService.method.verifyApplicationStats, response, () => {
        const found = Number(response.differenceCount);
        const lines = [
          `read ${response.recordsRead} records: ${found === 0 ? "no difference" : `${found} difference${found === 1 ? "" : "s"}`}`,
          ...response.differences.map(
            (difference) =>
              `  ${difference.kind} ${difference.key}: kept ${difference.kept ?? "nothing"}, recounted ${difference.recounted ?? "nothing"}`,
          ),
        ];
        if (found > response.differences.length) {
          lines.push(`  … and ${found - response.differences.length} more`);
        }
        if (response.repaired) lines.push("repaired: the counters now hold the recount");
        else if (found > 0)
          lines.push("run again with --repair to set the counters to the recount");
        return lines.join("\n");
      });
    },
  },
  {
    name: "delete-campaign",
    usage: "<campaignId>",
    async run({ client, argument, print }) {
      const response = await client.deleteCampaign({ id: argument(0, "campaignId") });
      print(
        AdminService.method.deleteCampaign,
        response,
        () => `deleted campaign ${response.campaign?.id}`,
      );
    },
  },
];

const usage = helpText();

/** Runs one CLI command; returns the process exit code. */
export async function runAdminCli(argv: string[], out: (text: string) => void): Promise<number> {
  // `listen` takes a secret key, not the admin token, and options of its own.
  if (argv[0] === "listen") return runListen(argv.slice(1), out);
  const {
    values: options,
    positionals: [name, ...args],
  } = parseCommandLine(argv);
  if (options.help || !name) {
    out(usage);
    return options.help ? 0 : 2;
  }
  const baseUrl = serviceUrl(options.url);
  // Beside `npm run dev`, its token: the development start keeps it in its data directory.
  const token =
    options.token ?? (process.env.ADMIN_TOKEN || savedDevelopmentSecrets(baseUrl)?.adminToken);
  if (!token) {
    out(
      "No admin token: pass --token or set ADMIN_TOKEN (the server's ADMIN_TOKEN); " +
        "beside `npm run dev`, its own is found.",
    );
    return 2;
  }
  try {
    // A lookup by name, not by key, so `toString` or `__proto__` is an unknown command.
    const command = adminCommands.find((candidate) => candidate.name === name);
    if (!command) throw new UsageError(`unknown command ${name}`);
    const client = serviceClient(AdminService, baseUrl, token);
    await command.run(createCommandContext({ name, args, options, client, out }));
    return 0;
  } catch (error) {
    if (error instanceof UsageError) {
      out(`${error.message}\n\n${usage}`);
      return 2;
    }
    if (error instanceof ConnectError) {
      out(`error: ${error.rawMessage} (${baseUrl})`);
      return 1;
    }
    if (error instanceof InputError) {
      out(`error: ${error.message}`);
      return 1;
    }
    throw error;
  }
}

/** Every command's options are accepted with any command, so a stray one is ignored, not an error. */
function parseCommandLine(argv: string[]) {
  return parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      url: { type: "string" },
      token: { type: "string" },
      json: { type: "boolean", default: false },
      org: { type: "string" },
      environment: { type: "string" },
      name: { type: "string" },
      file: { type: "string" },
      mask: { type: "string" },
      placement: { type: "string", multiple: true },
      clear: { type: "boolean", default: false },
      repair: { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
  });
}

type CommandLineOptions = ReturnType<typeof parseCommandLine>["values"];

function helpText(): string {
  const lines = adminCommands.map((command) => ({
    line: command.usage ? `${command.name} ${command.usage}` : command.name,
    summary: command.summary,
  }));
  // Summaries line up three spaces past the longest command line that has one.
  const summaryColumn = Math.max(...lines.filter((l) => l.summary).map((l) => l.line.length)) + 3;
  return [
    "Usage: npm run admin -- <command> [arguments] [options]",
    "",
    "Commands:",
    ...lines.map(({ line, summary }) =>
      summary ? `  ${line.padEnd(summaryColumn)}${summary}` : `  ${line}`,
    ),
    "  listen [--key <sk_...>] [--environment <env>] [--events <a,b>] [--forward-to <url>]",
    "      print the webhooks the service delivers, verified (listen --help)",
    "",
    "Options:",
    "  --url <url>      the service (default http://localhost:$PORT, PORT defaulting to 8080)",
    "  --token <token>  the admin token (default $ADMIN_TOKEN, else npm run dev's)",
    "  --json           print the response as JSON",
    "",
    "Campaign files use the REST JSON of a campaign (see docs/admin.md). update-campaign changes",
    "only the fields its file sets (or those --mask names); the others stay as they are.",
    "set-checkpoints replaces the placement checkpoints; the reward one follows the trigger.",
  ].join("\n");
}

function createCommandContext(call: {
  name: string;
  args: string[];
  options: CommandLineOptions;
  client: Client<typeof AdminService>;
  out: (text: string) => void;
}): CommandContext {
  const { name, args, options, client, out } = call;
  return {
    client,
    options,
    argument(index, argumentName) {
      const value = args[index];
      if (!value) throw new UsageError(`${name} needs <${argumentName}>`);
      return value;
    },
    campaignFromFile() {
      if (!options.file) throw new UsageError(`${name} needs --file <campaign.json>`);
      return readInputFile(options.file, (text) => {
        const json: unknown = JSON.parse(text);
        if (typeof json !== "object" || json === null || Array.isArray(json)) {
          throw new Error("must hold a JSON object: a campaign");
        }
        return { campaign: fromPlain(CampaignSchema, json), fields: Object.keys(json) };
      });
    },
    // --json prints exactly what the REST route answers.
    print(method, response, text) {
      const route = httpRouteOf(method);
      const json = route
        ? restFromResponse(method.output, route, response)
        : toPlain(method.output, response);
      out(options.json ? JSON.stringify(json, null, 2) : text());
    },
  };
}

/** A command line the CLI cannot run: printed with the help, exit code 2. */
class UsageError extends Error {}

/** A file given on the command line that cannot be read or is not what the command takes. */
class InputError extends Error {}

/**
 * Reads `file` and hands its text to `parse`; a file that is missing,
 * unreadable or malformed is one line naming it, not a stack trace.
 */
function readInputFile<T>(file: string, parse: (text: string) => T): T {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    const reason =
      (error as NodeJS.ErrnoException).code === "ENOENT" ? "no such file" : "cannot be read";
    throw new InputError(`${file}: ${reason}`);
  }
  try {
    return parse(text);
  } catch (error) {
    throw new InputError(`${file}: ${(error as Error).message}`);
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  process.exitCode = await runAdminCli(process.argv.slice(2), (text) =>
    process.stdout.write(`${text}\n`),
  );
}
