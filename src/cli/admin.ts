import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import type { DescMethod, Message } from "@bufbuild/protobuf";
import { ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { AdminService, ApiKeyKind } from "../../gen/referral/v1/admin_pb.js";
import { CampaignSchema } from "../../gen/referral/v1/resources_pb.js";
import { fromPlain, toPlain } from "../contract/plain-codec.js";
import { httpRouteOf } from "../transport/rest/http-rules.js";
import { restFromResponse } from "../transport/rest/transcode.js";

const usage = `Usage: npm run admin -- <command> [arguments] [options]

Commands:
  create-app <name> [--org <organizationId>]   create an application (and its organization) with a secret and a public key
  list-apps                                    list applications
  create-key <applicationId> <public|secret> [--name <note>]
  list-keys <applicationId>
  revoke-key <keyId>
  create-campaign <applicationId> --file <campaign.json>
  update-campaign <campaignId> --file <campaign.json> [--mask name,isLive,...]
  delete-campaign <campaignId>

Options:
  --url <url>      the service (default http://localhost:$PORT, PORT defaulting to 8080)
  --token <token>  the admin token (default $ADMIN_TOKEN)
  --json           print the response as JSON

Campaign files use the REST JSON of a campaign (see README).`;

/** Runs one CLI command; returns the process exit code. */
export async function runAdminCli(argv: string[], out: (text: string) => void): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      url: { type: "string" },
      token: { type: "string" },
      json: { type: "boolean", default: false },
      org: { type: "string" },
      name: { type: "string" },
      file: { type: "string" },
      mask: { type: "string" },
      help: { type: "boolean", short: "h", default: false },
    },
  });
  const [command, ...args] = positionals;
  if (values.help || !command) {
    out(usage);
    return command || values.help ? 0 : 2;
  }
  const token = values.token ?? process.env.ADMIN_TOKEN;
  if (!token) {
    out("No admin token: pass --token or set ADMIN_TOKEN (the server's ADMIN_TOKEN).");
    return 2;
  }
  const baseUrl = values.url ?? `http://localhost:${process.env.PORT ?? 8080}`;
  const client = createClient(
    AdminService,
    createConnectTransport({
      baseUrl,
      httpVersion: "1.1",
      interceptors: [
        (next) => (request) => {
          request.header.set("authorization", token);
          return next(request);
        },
      ],
    }),
  );
  // --json prints exactly what the REST route answers.
  const print = (method: DescMethod, message: Message, summary: () => string) => {
    const route = httpRouteOf(method);
    const json = route
      ? restFromResponse(method.output, route, message)
      : toPlain(method.output, message);
    out(values.json ? JSON.stringify(json, null, 2) : summary());
  };
  const need = (index: number, name: string): string => {
    const value = args[index];
    if (!value) throw new UsageError(`${command} needs <${name}>`);
    return value;
  };
  const campaignFile = () => {
    if (!values.file) throw new UsageError(`${command} needs --file <campaign.json>`);
    return fromPlain(CampaignSchema, JSON.parse(readFileSync(values.file, "utf8")));
  };

  try {
    switch (command) {
      case "create-app": {
        const response = await client.createApplication({
          name: need(0, "name"),
          organizationId: values.org,
        });
        print(AdminService.method.createApplication, response, () =>
          [
            `application ${response.application?.id} (organization ${response.application?.organizationId})`,
            `secret key: ${response.secretKey}`,
            `public key: ${response.publicKey}`,
            "The keys are shown this once.",
          ].join("\n"),
        );
        return 0;
      }
      case "list-apps": {
        const response = await client.listApplications({});
        print(AdminService.method.listApplications, response, () =>
          response.applications
            .map((a) => `${a.id}  ${a.name}  (organization ${a.organizationId})`)
            .join("\n"),
        );
        return 0;
      }
      case "create-key": {
        const kind = need(1, "public|secret");
        if (kind !== "public" && kind !== "secret")
          throw new UsageError("the kind is public or secret");
        const response = await client.createApiKey({
          applicationId: need(0, "applicationId"),
          kind: kind === "public" ? ApiKeyKind.PUBLIC : ApiKeyKind.SECRET,
          name: values.name,
        });
        print(
          AdminService.method.createApiKey,
          response,
          () => `${kind} key ${response.apiKey?.id}: ${response.key}\nThe key is shown this once.`,
        );
        return 0;
      }
      case "list-keys": {
        const response = await client.listApiKeys({ applicationId: need(0, "applicationId") });
        print(AdminService.method.listApiKeys, response, () =>
          response.apiKeys
            .map(
              (k) =>
                `${k.id}  ${ApiKeyKind[k.kind].toLowerCase()}  ${k.prefix}  ${k.revokedAt ? "revoked" : "active"}`,
            )
            .join("\n"),
        );
        return 0;
      }
      case "revoke-key": {
        const response = await client.revokeApiKey({ id: need(0, "keyId") });
        print(AdminService.method.revokeApiKey, response, () => `revoked ${response.apiKey?.id}`);
        return 0;
      }
      case "create-campaign": {
        const response = await client.createCampaign({
          applicationId: need(0, "applicationId"),
          campaign: campaignFile(),
        });
        print(
          AdminService.method.createCampaign,
          response,
          () => `created campaign ${response.campaign?.id}`,
        );
        return 0;
      }
      case "update-campaign": {
        const response = await client.updateCampaign({
          id: need(0, "campaignId"),
          campaign: campaignFile(),
          updateMask: values.mask ? values.mask.split(",").map((s) => s.trim()) : [],
        });
        print(
          AdminService.method.updateCampaign,
          response,
          () => `updated campaign ${response.campaign?.id}`,
        );
        return 0;
      }
      case "delete-campaign": {
        const response = await client.deleteCampaign({ id: need(0, "campaignId") });
        print(
          AdminService.method.deleteCampaign,
          response,
          () => `deleted campaign ${response.campaign?.id}`,
        );
        return 0;
      }
      default:
        throw new UsageError(`unknown command ${command}`);
    }
  } catch (error) {
    if (error instanceof UsageError) {
      out(`${error.message}\n\n${usage}`);
      return 2;
    }
    if (error instanceof ConnectError) {
      out(`error: ${error.rawMessage} (${baseUrl})`);
      return 1;
    }
    throw error;
  }
}

class UsageError extends Error {}

if (import.meta.url === `file://${process.argv[1]}`) {
  process.exitCode = await runAdminCli(process.argv.slice(2), (text) =>
    process.stdout.write(`${text}\n`),
  );
}
