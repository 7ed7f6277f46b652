import { randomBytes } from "node:crypto";

/** A new signing secret in the Standard Webhooks form: `whsec_` and base64 of 32 random bytes. */
export function generateWebhookSecret(): string {
  return `whsec_${randomBytes(32).toString("base64")}`;
}
