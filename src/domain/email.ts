import isEmail from "validator/lib/isEmail.js";
import normalizeEmail from "validator/lib/normalizeEmail.js";

/**
 * True when the string is an email address as `validator` reads RFC 5321
 * and 5322: at most 64 characters before the @ and 254 in all, a domain
 * with a top-level domain and no label starting or ending with a hyphen, no
 * IP address, no display name (`<a>@x.com` is refused). Deliverability is
 * the caller's business; this catches typos and junk.
 */
export function isValidEmail(value: string): boolean {
  return isEmail.default(value, {
    allow_utf8_local_part: true,
    require_tld: true,
    allow_ip_domain: false,
    allow_display_name: false,
  });
}

/** The form emails are looked up by (ListCustomers' filter): trimmed and lowercased. */
export function normalizeEmailForLookup(value: string): string {
  return value.trim().toLowerCase();
}

/**
 * The mailbox an address reaches, for the fraud rules: lowercased, with the
 * providers' own aliases folded by `validator`'s normalizeEmail (Gmail's
 * dots and googlemail.com, Yahoo's `-tag`, the `+tag` of Gmail, Outlook and
 * iCloud), and a `+tag` dropped for every other domain too, so
 * `Jane.Doe+promo@GoogleMail.com` and `janedoe@gmail.com` are one person,
 * as are `jane-promo@yahoo.com` and `jane@yahoo.com`.
 */
export function canonicalEmail(value: string): string {
  const lowered = normalizeEmailForLookup(value);
  const normalized = normalizeEmail.default(lowered) || lowered;
  const at = normalized.lastIndexOf("@");
  if (at < 0) return normalized;
  const local = normalized.slice(0, at);
  const plus = local.indexOf("+");
  return plus > 0 ? `${local.slice(0, plus)}${normalized.slice(at)}` : normalized;
}
