/**
 * The links of a campaign: URLs its pages and emails show to customers
 * (terms, landing page, logos), and paths of pages inside the app. They are
 * opened by browsers and apps, never fetched by the service, so only their
 * form is checked, not where they point.
 */

/** Why a campaign URL is refused, or undefined when it is acceptable. */
export function campaignUrlProblem(
  raw: string,
  options: { allowHttp: boolean },
): string | undefined {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return "must be an absolute https URL";
  }
  // The parser encodes a space: the stored text would not be the link
  // customers get.
  if (/\s/.test(raw)) return "must not contain spaces";
  if (url.protocol === "http:") {
    if (!options.allowHttp) return "must use https (http is allowed in test campaigns only)";
  } else if (url.protocol !== "https:") {
    return "must be an absolute https URL";
  }
  if (url.username || url.password) return "must not contain credentials";
  return undefined;
}

/** A base no path of the app can leave without naming another host. */
const appBase = "https://app.invalid";

/**
 * Why a page path of the app is refused, or undefined when it is a path
 * such as `/invite`: not a URL, nor one in disguise (`//host`, `/\host`,
 * which a browser resolves to another site).
 */
export function appPathProblem(raw: string): string | undefined {
  const shape = "must be a path in the app starting with /, such as /invite";
  if (!raw.startsWith("/")) return shape;
  let url: URL;
  try {
    url = new URL(raw, appBase);
  } catch {
    return shape;
  }
  if (url.origin !== appBase) return shape;
  if (/\s/.test(raw)) return "must not contain spaces";
  return undefined;
}
