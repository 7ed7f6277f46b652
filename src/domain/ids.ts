import { randomFillSync } from "node:crypto";

// Random bytes are drawn a page at a time: one call to the system's generator
// per 512 ids instead of one per id (it was 4% of an identify's CPU).
const pool = Buffer.alloc(4096);
let used = pool.length;

function randomHex(bytes: number): string {
  if (used + bytes > pool.length) {
    randomFillSync(pool);
    used = 0;
  }
  const hex = pool.toString("hex", used, used + bytes);
  used += bytes;
  return hex;
}

/**
 * A new public id: the prefix, the creation time in base 36 (so ids sort
 * roughly by age) and 64 random bits, for example `cus_mfq3k2a1b9c8d7e6f5a4b3`.
 */
export function newId(prefix: string, now: Date = new Date()): string {
  const time = now.getTime().toString(36).padStart(9, "0");
  return `${prefix}_${time}${randomHex(8)}`;
}
