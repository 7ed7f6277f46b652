// Pays approved reward grants as the service reports them, then records each
// payment. Run with REFERRALS_URL, REFERRALS_SECRET_KEY and
// REFERRALS_WEBHOOK_SECRET set; point a webhook endpoint subscribed to
// reward_grant.created and reward_grant.approved at http://<host>:3000/.
import { createServer, type Server } from "node:http";
import { Webhook } from "standardwebhooks";

/** A grant as the webhook events carry it (the fields this receiver reads). */
interface Grant {
  id: string;
  status: string;
  customerId: string;
  value: { type: string; currency: string | null; amount: number | null };
}

/** Your payment provider: pays a grant and returns the payment's reference. */
export type Pay = (grant: Grant) => Promise<string>;

/** Starts the receiver; it answers 204 once the event is handled, so a failure is retried. */
export function startFulfilment(options: {
  serviceUrl: string;
  secretKey: string;
  webhookSecret: string;
  pay: Pay;
  port?: number;
}): Server {
  const webhook = new Webhook(options.webhookSecret);
  const server = createServer(async (request, response) => {
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    let event: { type: string; data: Grant };
    try {
      const headers = request.headers as Record<string, string>;
      event = webhook.verify(Buffer.concat(chunks).toString("utf8"), headers) as typeof event;
    } catch {
      response.writeHead(400).end();
      return;
    }
    const grant = event.data;
    const payable = event.type.startsWith("reward_grant.") && grant.status === "approved";
    if (payable && grant.value.type === "payout") {
      const reference = await options.pay(grant);
      const recorded = await fetch(`${options.serviceUrl}/reward-grants/${grant.id}`, {
        method: "PATCH",
        headers: { authorization: options.secretKey, "content-type": "application/json" },
        body: JSON.stringify({ status: "fulfilled", fulfillment: { reference } }),
      });
      // Already fulfilled (a repeated event) is not an error; anything else is retried.
      if (!recorded.ok && recorded.status !== 400) {
        response.writeHead(503).end();
        return;
      }
    }
    response.writeHead(204).end();
  });
  return server.listen(options.port ?? 3000);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  startFulfilment({
    serviceUrl: process.env.REFERRALS_URL ?? "http://localhost:8080",
    secretKey: process.env.REFERRALS_SECRET_KEY ?? "",
    webhookSecret: process.env.REFERRALS_WEBHOOK_SECRET ?? "",
    pay: async (grant) => {
      console.log(`paying ${grant.value.amount} ${grant.value.currency} to ${grant.customerId}`);
      return `demo-${grant.id}`;
    },
  });
}
