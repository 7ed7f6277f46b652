import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto";
import { chmodSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/**
 * Encrypts secrets for storage (webhook signing secrets, which must be read
 * back to sign, so they cannot be hashed): AES-256-GCM with a random IV, so
 * a stolen database without the key reveals nothing and tampering is
 * detected. Stored as `v1.` + base64url(iv | tag | ciphertext).
 */
export interface SecretBox {
  seal(plaintext: string): string;
  open(sealed: string): string;
}

const version = "v1.";

/** A box with a 32-byte key. */
export function createSecretBox(key: Buffer): SecretBox {
  if (key.length !== 32) throw new Error("the secret key must be 32 bytes");
  return {
    seal(plaintext) {
      const iv = randomBytes(12);
      const cipher = createCipheriv("aes-256-gcm", key, iv);
      const ciphertext = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()]);
      const sealed = Buffer.concat([iv, cipher.getAuthTag(), ciphertext]);
      return `${version}${sealed.toString("base64url")}`;
    },
    open(sealed) {
      if (!sealed.startsWith(version)) throw new Error("unknown sealed secret format");
      const bytes = Buffer.from(sealed.slice(version.length), "base64url");
      const decipher = createDecipheriv("aes-256-gcm", key, bytes.subarray(0, 12));
      decipher.setAuthTag(bytes.subarray(12, 28));
      return Buffer.concat([decipher.update(bytes.subarray(28)), decipher.final()]).toString(
        "utf8",
      );
    },
  };
}

/** Reads `WEBHOOK_SECRET_KEY`: 32 bytes as base64 or 64 hex digits. */
export function parseSecretKey(value: string): Buffer {
  const key = /^[0-9a-fA-F]{64}$/.test(value)
    ? Buffer.from(value, "hex")
    : Buffer.from(value, "base64");
  if (key.length !== 32) {
    throw new Error("WEBHOOK_SECRET_KEY must be 32 bytes, as base64 or 64 hex digits");
  }
  return key;
}

const keyFileName = "webhook-secret.key";

/**
 * The embedded store's key: read from `DATA_DIR/webhook-secret.key`,
 * created (owner-only) on first use. It lives beside the data it protects,
 * which guards backups and copies of the collections, not the directory.
 */
export function keyFromDataDir(dataDir: string): Buffer {
  const path = join(dataDir, keyFileName);
  if (!existsSync(path)) {
    writeFileSync(path, randomBytes(32).toString("base64"), { mode: 0o600, flag: "wx" });
  }
  chmodSync(path, 0o600);
  return parseSecretKey(readFileSync(path, "utf8").trim());
}
