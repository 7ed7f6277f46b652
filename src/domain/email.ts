/**
 * A pragmatic email check: one `@`, a non-empty local part, a dotted domain,
 * no spaces. Deliverability is the caller's business; this catches typos.
 */
const emailPattern = /^[^\s@]+@[^\s@.]+(\.[^\s@.]+)+$/;

/** True when the string looks like an email address. */
export function isValidEmail(value: string): boolean {
  return emailPattern.test(value);
}

/** The form emails are matched by: trimmed and lowercased. */
export function normalizeEmailForLookup(value: string): string {
  return value.trim().toLowerCase();
}
