import { randomBytes } from "node:crypto";

/**
 * A new public id: the prefix, the creation time in base 36 (so ids sort
 * roughly by age) and 64 random bits, for example `cus_mfq3k2a1b9c8d7e6f5a4b3`.
 */
export function newId(prefix: string, now: Date = new Date()): string {
  const time = now.getTime().toString(36).padStart(9, "0");
  return `${prefix}_${time}${randomBytes(8).toString("hex")}`;
}
