import { limits } from "./limits.js";

/**
 * Money as the reward ledger keeps it: whole numbers of a currency's minor
 * unit (cents), so sums and limits are exact. The API shows amounts in
 * units of the currency (10.5), as campaigns' rewards do; a number there
 * stands for the decimal it prints as, and converting it here either gives
 * that decimal's minor units exactly or refuses it.
 */

/** The REST words of `referral.v1.Currency`. */
export type CurrencyName = "usd" | "cad" | "eur" | "gbp";

/**
 * Digits after the decimal point of each currency's minor unit (ISO 4217).
 * A currency added to the contract needs its entry here (a test checks).
 */
export const minorUnitDigits: Readonly<Record<CurrencyName, number>> = {
  usd: 2,
  cad: 2,
  eur: 2,
  gbp: 2,
};

/**
 * The largest amount, in units, one value may hold: a billion. Its minor
 * units, and sums of millions of them, stay far inside the integers a
 * double holds exactly (2^53).
 */
export const maxAmountUnits = 1_000_000_000;

/** The minor-unit digits of a currency; two without one (a percentage discount's). */
export function digitsOf(currency: CurrencyName | null): number {
  return currency ? minorUnitDigits[currency] : 2;
}

/**
 * The minor units of an amount given in units, or a reason it has none: not
 * a finite number, finer than the currency's minor unit (10.005 dollars),
 * or larger than {@link maxAmountUnits}.
 */
export function toMinorUnits(
  amount: number,
  currency: CurrencyName | null,
): { minor: number } | { refused: string } {
  if (!Number.isFinite(amount)) return { refused: "must be a finite number" };
  if (Math.abs(amount) > maxAmountUnits) {
    return { refused: `must be at most ${maxAmountUnits.toLocaleString("en")} in absolute value` };
  }
  const digits = digitsOf(currency);
  // toFixed writes the decimal with `digits` places nearest to the double;
  // it reads back as the same double only if the amount is that decimal.
  const fixed = amount.toFixed(digits);
  if (Number(fixed) !== amount) {
    return { refused: `must have at most ${digits} decimal places` };
  }
  const minor = Number(fixed.replace(".", ""));
  // "-0.00" reads as -0.
  return { minor: minor === 0 ? 0 : minor };
}

/** An amount in units from minor units: the double that prints as the exact decimal. */
export function fromMinorUnits(minor: number, currency: CurrencyName | null): number {
  const digits = digitsOf(currency);
  // Division by a power of ten rounds to the double nearest the decimal,
  // which is the one that prints as it.
  return digits === 0 ? minor : minor / 10 ** digits;
}

/**
 * The minor units of one reward's amount, or why it is refused: what
 * {@link toMinorUnits} takes, not negative, and at most
 * `limits.campaign.maxAmount`. A campaign's rewards and a manual grant's
 * own value are checked alike.
 */
export function rewardAmountMinor(
  amount: number,
  currency: CurrencyName | null,
): { minor: number } | { refused: string } {
  // Checked ahead of toMinorUnits, whose own bound is the ledger's, far larger.
  if (!Number.isFinite(amount)) return { refused: "must be a finite number" };
  if (amount < 0) return { refused: "must not be negative" };
  const max = limits.campaign.maxAmount;
  if (amount > max) return { refused: `must be at most ${max.toLocaleString("en")}` };
  return toMinorUnits(amount, currency);
}
