import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { hostname } from "node:os";
import { parseArgs } from "node:util";
import { Code, ConnectError } from "@connectrpc/connect";
import { Webhook } from "standardwebhooks";
import { Environment } from "../../gen/referral/v1/resources_pb.js";
import { WebhooksService } from "../../gen/referral/v1/webhooks_pb.js";
import { savedDevelopmentSecrets } from "../development.js";
import { serviceClient, serviceUrl } from "./service-client.js";

/**
 * `npm run admin -- listen`: webhooks on a laptop. Registers an endpoint (for
 * both environments unless told one) that points at a receiver this process
 * runs on loopback, prints each
 * delivery with its signature verified (and forwards it when asked), and
 * deletes the endpoint when stopped. It uses the webhook endpoints API with a
 * secret key, what a developer has; not the admin token.
 */

const usage = [
  "Usage: npm run admin -- listen [options]",
  "",
  "Registers a webhook endpoint pointing at a receiver on 127.0.0.1, prints every",
  "delivery (event type, id, payload) with its signature verified, and deletes the",
  "endpoint on Ctrl-C (SIGINT) or SIGTERM. The service must accept loopback URLs:",
  "`npm run dev` does (WEBHOOK_ALLOW_PRIVATE=true, development only).",
  "",
  "Options:",
  "  --key <sk_...>       a secret key (default $SK, else npm run dev's)",
  "  --environment <env>  production, test or both (default both)",
  "  --url <url>          the service (default http://localhost:$PORT, PORT defaulting to 8080)",
  "  --events <a,b>       only these event types (default every type)",
  "  --forward-to <url>   also POST each delivery, headers and body unchanged, to this URL;",
  "                       its status is the answer the service gets",
  "  --port <port>        the receiver's port on 127.0.0.1 (default any free one)",
].join("\n");

/**
 * Runs `listen` until `signal` aborts (by default until SIGINT or SIGTERM);
 * returns the exit code. `out` gets whole lines, as the admin CLI prints them.
 */
export async function runListen(
  argv: string[],
  out: (text: string) => void,
  stop?: AbortSignal,
): Promise<number> {
  let options: ListenOptions;
  try {
    options = listenOptions(argv);
  } catch (error) {
    out(`${(error as Error).message}\n\n${usage}`);
    return 2;
  }
  if (options.help) {
    out(usage);
    return 0;
  }
  if (!options.key) {
    out(
      "No secret key: pass --key or set SK (a secret key, sk_...); beside `npm run dev`, its own is found.",
    );
    return 2;
  }
  // Handled from here on, so a Ctrl-C while the endpoint is being created still deletes it.
  const signal = stop ?? stopSignal();
  const client = serviceClient(WebhooksService, options.url, options.key);
  let receiver: Receiver;
  try {
    receiver = await startReceiver(options.port, out, options.forwardTo);
  } catch (error) {
    out(`error: cannot listen on 127.0.0.1:${options.port}: ${(error as Error).message}`);
    return 1;
  }
  let webhookId: string;
  try {
    const created = await client.createWebhook({
      url: receiver.url,
      environment: listenedEnvironments[options.environment],
      eventTypes: options.events,
      description: `npm run admin -- listen on ${hostname()} (pid ${process.pid})`,
    });
    webhookId = created.webhook?.id ?? "";
    receiver.verifyWith(created.secret);
  } catch (error) {
    await receiver.close();
    if (error instanceof ConnectError) {
      out(`error: ${explain(error)} (${options.url})`);
      return 1;
    }
    throw error;
  }
  const types = options.events.length > 0 ? options.events.join(", ") : "every event type";
  out(
    [
      `Ready: webhook ${webhookId} delivers ${environmentsText[options.environment]} events to ${receiver.url} (${types}).`,
      `Signing secret: ${receiver.secret}`,
      options.forwardTo ? `Forwarding each delivery to ${options.forwardTo}.` : undefined,
      "Ctrl-C deletes the endpoint and stops.",
    ]
      .filter((line) => line !== undefined)
      .join("\n"),
  );

  if (!signal.aborted) {
    await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
  }
  let code = 0;
  try {
    await client.deleteWebhook({ id: webhookId });
    out(`Deleted webhook ${webhookId}.`);
  } catch (error) {
    if (!(error instanceof ConnectError)) throw error;
    out(
      `error: webhook ${webhookId} was not deleted: ${error.rawMessage} (${options.url}); ` +
        `delete it with DELETE /webhooks/${webhookId}`,
    );
    code = 1;
  } finally {
    await receiver.close();
  }
  return code;
}

/** The environments `listen` may take: both unless told one. */
type ListenedEnvironment = "production" | "test" | "both";

const listenedEnvironments: Readonly<Record<ListenedEnvironment, Environment>> = {
  production: Environment.PRODUCTION,
  test: Environment.TEST,
  // An endpoint without an environment is given both environments' events.
  both: Environment.UNSPECIFIED,
};

const environmentsText: Readonly<Record<ListenedEnvironment, string>> = {
  production: "production",
  test: "test",
  both: "production and test",
};

interface ListenOptions {
  url: string;
  key: string | undefined;
  environment: ListenedEnvironment;
  events: string[];
  forwardTo: string | undefined;
  port: number;
  help: boolean;
}

function listenOptions(argv: string[]): ListenOptions {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      url: { type: "string" },
      key: { type: "string" },
      events: { type: "string" },
      environment: { type: "string", default: "both" },
      "forward-to": { type: "string" },
      port: { type: "string" },
      help: { type: "boolean", short: "h", default: false },
    },
  });
  if (positionals.length > 0) throw new Error(`listen takes no argument: ${positionals[0]}`);
  const port = Number(values.port ?? 0);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new Error(`--port ${values.port}: a port number`);
  }
  const environment = values.environment;
  if (!Object.hasOwn(listenedEnvironments, environment)) {
    throw new Error(`--environment ${environment}: production, test or both`);
  }
  const forwardTo = values["forward-to"];
  if (forwardTo !== undefined && !URL.canParse(forwardTo)) {
    throw new Error(`--forward-to ${forwardTo}: an absolute URL`);
  }
  const url = serviceUrl(values.url);
  return {
    url,
    // Beside `npm run dev`, its secret key: the development start keeps it in its data directory.
    key: values.key ?? (process.env.SK || savedDevelopmentSecrets(url)?.secretKey),
    environment: environment as ListenedEnvironment,
    events: (values.events ?? "")
      .split(",")
      .map((type) => type.trim())
      .filter((type) => type !== ""),
    forwardTo,
    port,
    help: values.help,
  };
}

/** Aborts on the first SIGINT or SIGTERM; a second one ends the process as usual. */
function stopSignal(): AbortSignal {
  const controller = new AbortController();
  const stop = () => {
    process.off("SIGINT", stop);
    process.off("SIGTERM", stop);
    controller.abort();
  };
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
  return controller.signal;
}

/** The service's refusal in words that say what to do. */
function explain(error: ConnectError): string {
  if (
    error.code === Code.InvalidArgument &&
    /private, loopback or link-local/.test(error.rawMessage)
  ) {
    return (
      "the service refuses webhook URLs on loopback, where listen receives; " +
      "start it with `npm run dev`, or with WEBHOOK_ALLOW_PRIVATE=true (on a development machine only)"
    );
  }
  return error.rawMessage;
}

/** The loopback receiver: verifies, prints and (optionally) forwards each delivery. */
interface Receiver {
  readonly url: string;
  /** The endpoint's signing secret, once known. */
  readonly secret: string;
  /** Sets the secret; deliveries that came first wait for it. */
  verifyWith(secret: string): void;
  close(): Promise<void>;
}

/** The headers a delivery is signed with and a forward passes on. */
const forwardedHeaders = [
  "content-type",
  "user-agent",
  "webhook-id",
  "webhook-timestamp",
  "webhook-signature",
];

async function startReceiver(
  port: number,
  out: (text: string) => void,
  forwardTo: string | undefined,
): Promise<Receiver> {
  let setSecret: (secret: string) => void = () => {};
  const secretKnown = new Promise<string>((resolve) => {
    setSecret = resolve;
  });
  let secret = "";

  async function handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks).toString("utf8");
    const headers: Record<string, string> = {};
    for (const name of forwardedHeaders) {
      const value = request.headers[name];
      if (typeof value === "string") headers[name] = value;
    }
    const id = headers["webhook-id"] ?? "(no webhook-id)";
    let verified: string;
    try {
      new Webhook(await secretKnown).verify(body, headers);
      verified = "signature verified";
    } catch (error) {
      verified = `signature INVALID (${(error as Error).message})`;
    }
    let type = "(not JSON)";
    let payload = body;
    try {
      const event = JSON.parse(body) as { type?: unknown };
      type = typeof event.type === "string" ? event.type : "(no type)";
      payload = JSON.stringify(event, null, 2);
    } catch {
      // Printed as received.
    }
    const lines = [`${new Date().toISOString()}  ${type}  ${id}  ${verified}`, payload];
    let status = verified === "signature verified" ? 200 : 400;
    if (forwardTo && status === 200) {
      try {
        const forwarded = await fetch(forwardTo, { method: "POST", headers, body });
        await forwarded.arrayBuffer();
        status = forwarded.status;
        lines.push(`-> ${forwardTo}: ${forwarded.status}`);
      } catch (error) {
        status = 502;
        lines.push(`-> ${forwardTo}: failed (${causeOf(error)})`);
      }
    }
    out(lines.join("\n"));
    response.writeHead(status).end();
  }

  const server: Server = createServer((request, response) => {
    handle(request, response).catch((error: Error) => {
      out(`error: a delivery could not be handled: ${error.message}`);
      if (!response.headersSent) response.writeHead(500);
      response.end();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", resolve);
  });
  const address = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${address.port}/`,
    get secret() {
      return secret;
    },
    verifyWith(value) {
      secret = value;
      setSecret(value);
    },
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** Why fetch failed: its cause (ECONNREFUSED ...), not "fetch failed". */
function causeOf(error: unknown): string {
  const cause = (error as { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? (error as Error).message;
}
