/**
 * How a customer is named where anyone may read it (the public
 * leaderboard): the first name and the initial of the last, never more. A
 * name is what an identify sent, which may be an email address, a handle
 * or a phone number rather than a name: only its words of letters count,
 * taken before any `@`, so `mallory.smith@example.com` shows as
 * `Mallory S.` and `+33 6 12 34 56 78` as the placeholder.
 */

/** The placeholder for a customer with no name to show. */
export const anonymousReferrer = "A referrer";

/** Shown names are cut to this many characters: a name, not a paragraph. */
const longestFirstName = 24;

// Letters with their marks, joined by an apostrophe or a hyphen (O'Brien, Jean-Luc).
const word = /[\p{L}\p{M}]+(?:['’-][\p{L}\p{M}]+)*/gu;

/** "Ada Lovelace" → "Ada L."; a name with no word of letters → {@link anonymousReferrer}. */
export function maskedName(name: string): string {
  const beforeAt = name.split("@", 1)[0] ?? "";
  const words = beforeAt.match(word) ?? [];
  const [first, ...rest] = words;
  if (!first) return anonymousReferrer;
  const last = rest.at(-1);
  const initial = last ? ` ${[...last][0]?.toLocaleUpperCase() ?? ""}.` : "";
  return `${capitalised([...first].slice(0, longestFirstName).join(""))}${initial}`;
}

function capitalised(text: string): string {
  const [head = "", ...tail] = [...text];
  return head.toLocaleUpperCase() + tail.join("");
}
