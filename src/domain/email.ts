import isEmail from "validator/lib/isEmail.js";

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

// Gmail ignores dots in the local part, and googlemail.com is the same mailbox.
const gmailDomains = new Set(["gmail.com", "googlemail.com"]);

/**
 * The mailbox an address reaches, for the fraud rules: trimmed, lowercased,
 * without a `+tag`, and for Gmail without dots in the local part, so
 * `Jane.Doe+promo@GoogleMail.com` and `janedoe@gmail.com` are one person.
 */
export function canonicalEmail(value: string): string {
  const lowered = normalizeEmailForLookup(value);
  const at = lowered.lastIndexOf("@");
  if (at < 0) return lowered;
  let local = lowered.slice(0, at);
  let domain = lowered.slice(at + 1);
  const plus = local.indexOf("+");
  if (plus > 0) local = local.slice(0, plus);
  if (gmailDomains.has(domain)) {
    local = local.replaceAll(".", "");
    domain = "gmail.com";
  }
  return `${local}@${domain}`;
}
