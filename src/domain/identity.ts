import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";

/**
 * Identity verification (docs/trust.md): the app's backend signs a user's
 * external id with the application's identity secret, and a public-key call
 * that carries the signature (`userHash`) acts for that user.
 */

/** The REST words of `referral.v1.IdentityVerification`. */
export type IdentityVerificationName = "protect" | "required";

/** How long a rotated-out identity secret keeps verifying. */
export const previousIdentitySecretMs = 24 * 60 * 60 * 1000;

/** A new identity secret: `idsec_` and 32 random bytes, base64url. */
export function generateIdentitySecret(): string {
  return `idsec_${randomBytes(32).toString("base64url")}`;
}

/** userHash = lowercase hex HMAC-SHA256(secret as UTF-8, externalUserId as UTF-8). */
export function userHashOf(secret: string, externalUserId: string): string {
  return createHmac("sha256", Buffer.from(secret, "utf8"))
    .update(externalUserId, "utf8")
    .digest("hex");
}

/** Whether `value` has a userHash's shape: 64 hex digits (either case). */
export function isUserHashShaped(value: string): boolean {
  return /^[0-9a-fA-F]{64}$/.test(value);
}

/**
 * Whether `userHash` signs `externalUserId` with one of `secrets` (the
 * current one, and the previous one during its period), compared in
 * constant time. Every secret is tried, so the time does not say which one
 * matched. The hash must be shaped (see {@link isUserHashShaped}).
 */
export function userHashMatches(
  secrets: readonly string[],
  externalUserId: string,
  userHash: string,
): boolean {
  const given = Buffer.from(userHash.toLowerCase(), "hex");
  let matched = false;
  for (const secret of secrets) {
    const expected = Buffer.from(userHashOf(secret, externalUserId), "hex");
    if (given.length === expected.length && timingSafeEqual(given, expected)) matched = true;
  }
  return matched;
}

/** What an identify may change of an existing customer, and what it sends for each. */
export interface CustomerChange {
  readonly name: string;
  readonly email: string | undefined;
  readonly customProperties: Readonly<Record<string, unknown>> | undefined;
}

/** The stored values an identify is compared with. */
export interface StoredCustomerFields {
  readonly name: string;
  readonly email: string | null | undefined;
  readonly customProperties: Readonly<Record<string, unknown>> | undefined;
}

/**
 * The fields an identify would change on an existing customer: what an
 * unverified public-key call may not do. A field left out (no email, no
 * custom properties) changes nothing; the name is always sent.
 */
export function changedCustomerFields(
  stored: StoredCustomerFields,
  sent: CustomerChange,
): Array<"name" | "email" | "customProperties"> {
  const changed: Array<"name" | "email" | "customProperties"> = [];
  if (sent.name !== stored.name) changed.push("name");
  if (sent.email !== undefined && sent.email !== (stored.email ?? undefined)) changed.push("email");
  if (
    sent.customProperties &&
    propertiesChange(stored.customProperties ?? {}, sent.customProperties)
  ) {
    changed.push("customProperties");
  }
  return changed;
}

/**
 * Whether merging `sent` into `stored` changes it: custom properties merge
 * shallowly, a key set to null is removed (as the store applies them).
 */
function propertiesChange(
  stored: Readonly<Record<string, unknown>>,
  sent: Readonly<Record<string, unknown>>,
): boolean {
  return Object.entries(sent).some(([key, value]) =>
    value === null
      ? Object.hasOwn(stored, key)
      : !Object.hasOwn(stored, key) || canonicalJson(value) !== canonicalJson(stored[key]),
  );
}

/** JSON with object keys sorted, to compare values regardless of key order. */
function canonicalJson(value: unknown): string {
  if (value === undefined) return "undefined";
  return JSON.stringify(value, (_key, item: unknown) =>
    item && typeof item === "object" && !Array.isArray(item)
      ? Object.fromEntries(Object.entries(item).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : item,
  );
}

/** The parts of a customer's answer that {@link redactedCustomer} narrows. */
export interface RedactableCustomer {
  email?: string | undefined;
  customProperties?: unknown;
  referredBy?: { id: string } | undefined;
}

/**
 * A customer's answer to an unverified public-key caller: the same shape,
 * without the stored email and custom properties, and with `referredBy`
 * narrowed to the referrer's id (no email, name or external id).
 */
export function redactedCustomer<C extends RedactableCustomer>(
  customer: C,
  referrerSummary: (id: string) => C["referredBy"],
): C {
  return {
    ...customer,
    email: undefined,
    customProperties: undefined,
    referredBy: customer.referredBy ? referrerSummary(customer.referredBy.id) : undefined,
  };
}
