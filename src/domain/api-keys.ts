import { createHash, hash, randomBytes, timingSafeEqual } from "node:crypto";
import type { ApiKeyKindName } from "./tenancy.js";

const prefixes: Record<ApiKeyKindName, string> = { secret: "sk_", public: "pk_" };

/** A new API key: 256 random bits after a prefix that tells its kind. */
export function generateApiKey(kind: ApiKeyKindName): string {
  return `${prefixes[kind]}${randomBytes(32).toString("base64url")}`;
}

/** The kind a key's prefix claims, if any; used to validate bootstrap keys. */
export function apiKeyKindOf(key: string): ApiKeyKindName | undefined {
  if (key.startsWith(prefixes.secret)) return "secret";
  if (key.startsWith(prefixes.public)) return "public";
  return undefined;
}

/** The stored form of a key: SHA-256, hex (one-shot: every call hashes its key). */
export function hashApiKey(key: string): string {
  return hash("sha256", key, "hex");
}

/** The first characters of a key, kept to recognise it in listings. */
export function apiKeyPrefix(key: string): string {
  return `${key.slice(0, 10)}…`;
}

/** Compares two secrets in constant time (through their hashes, so lengths may differ). */
export function secretsEqual(given: string, expected: string): boolean {
  const a = createHash("sha256").update(given).digest();
  const b = createHash("sha256").update(expected).digest();
  return timingSafeEqual(a, b);
}
