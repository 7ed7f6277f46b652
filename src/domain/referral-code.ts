import { randomInt } from "node:crypto";

/** Upper-case letters and digits without the look-alikes 0/O and 1/I/L. */
export const referralCodeAlphabet = "23456789ABCDEFGHJKMNPQRSTUVWXYZ";

/** How many characters a referral code has. */
export const referralCodeLength = 8;

/** A new referral code from a cryptographic random source (31^8, about 8.5e11 codes). */
export function generateReferralCode(): string {
  let code = "";
  for (let i = 0; i < referralCodeLength; i++) {
    code += referralCodeAlphabet[randomInt(referralCodeAlphabet.length)];
  }
  return code;
}
