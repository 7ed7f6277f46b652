import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

/** A fenced code block of a Markdown page. */
export interface CodeBlock {
  /** The info string's first word: `sh`, `json`, `ts`... */
  readonly language: string;
  readonly text: string;
  /** The line of the opening fence, from 1. */
  readonly line: number;
  /** The HTML comment right before the block, if any (`<!-- ... -->`), without its markers. */
  readonly note: string | undefined;
}

/** The fenced code blocks of a page, in order. */
export function codeBlocks(markdown: string): CodeBlock[] {
  const blocks: CodeBlock[] = [];
  const lines = markdown.split("\n");
  for (let index = 0; index < lines.length; index++) {
    const open = /^```(\S*)/.exec(lines[index] as string);
    if (!open) continue;
    const start = index;
    const body: string[] = [];
    for (index++; index < lines.length && !/^```\s*$/.test(lines[index] as string); index++) {
      body.push(lines[index] as string);
    }
    let before = start - 1;
    while (before >= 0 && (lines[before] as string).trim() === "") before--;
    const comment = /^<!--\s*(.*?)\s*-->$/.exec((lines[before] ?? "").trim());
    blocks.push({
      language: open[1] ?? "",
      text: body.join("\n"),
      line: start + 1,
      note: comment?.[1],
    });
  }
  return blocks;
}

/** The rows of the first table after a line holding `marker`, as objects by header. */
export function tableAfter(markdown: string, marker: string): Record<string, string>[] {
  const lines = markdown.split("\n");
  const at = lines.findIndex((line) => line.includes(marker));
  if (at === -1) throw new Error(`no ${marker} in the page`);
  const first = lines.findIndex((line, index) => index > at && line.trim().startsWith("|"));
  const rows: string[][] = [];
  for (let index = first; index < lines.length && lines[index]?.trim().startsWith("|"); index++) {
    rows.push(
      (lines[index] as string)
        .trim()
        .replace(/^\||\|$/g, "")
        .split("|")
        .map((cell) => cell.trim().replace(/^`|`$/g, "")),
    );
  }
  const [header, , ...body] = rows;
  if (!header) throw new Error(`no table after ${marker}`);
  return body.map((cells) => Object.fromEntries(header.map((name, i) => [name, cells[i] ?? ""])));
}

/** README.md and the pages under `docs/`, by path relative to the repository. */
export function docsPages(root: string): { path: string; markdown: string }[] {
  const pages = readdirSync(join(root, "docs"))
    .filter((name) => name.endsWith(".md"))
    .sort()
    .map((name) => `docs/${name}`);
  return ["README.md", ...pages].map((path) => ({
    path,
    markdown: readFileSync(join(root, path), "utf8"),
  }));
}

/**
 * Whether `actual` is what a documented example shows: every key of an
 * object shown, and no other unless the object says it is shortened
 * (`"...": "..."` stands for the fields left out), every item
 * of an array (a last item `"..."` allows more), strings equal except that
 * `...` in one matches anything (`"cus_..."`) and a documented ISO time
 * matches any ISO time. Returns where they differ, or undefined.
 */
export function differenceFromShown(
  shown: unknown,
  actual: unknown,
  path = "",
): string | undefined {
  if (Array.isArray(shown)) {
    if (!Array.isArray(actual)) return `${path || "the output"} is not an array`;
    const open = shown.at(-1) === "...";
    const items = open ? shown.slice(0, -1) : shown;
    if (open ? actual.length < items.length : actual.length !== items.length) {
      return `${path || "the output"} has ${actual.length} items, the example ${items.length}`;
    }
    for (const [index, item] of items.entries()) {
      const difference = differenceFromShown(item, actual[index], `${path}[${index}]`);
      if (difference) return difference;
    }
    return undefined;
  }
  if (shown !== null && typeof shown === "object") {
    if (actual === null || typeof actual !== "object" || Array.isArray(actual)) {
      return `${path || "the output"} is not an object`;
    }
    const shortened = "..." in shown;
    if (!shortened) {
      const unshown = Object.keys(actual).filter((key) => !(key in shown));
      if (unshown.length > 0) {
        return `${path || "the output"} has ${unshown.map((key) => `.${key}`).join(", ")}, which the example neither shows nor marks as left out ("...": "...")`;
      }
    }
    for (const [key, value] of Object.entries(shown)) {
      if (key === "...") continue;
      if (!(key in actual)) return `${path}.${key} is missing`;
      const difference = differenceFromShown(
        value,
        (actual as Record<string, unknown>)[key],
        `${path}.${key}`,
      );
      if (difference) return difference;
    }
    return undefined;
  }
  if (typeof shown === "string" && typeof actual === "string") {
    if (isoTime.test(shown) && isoTime.test(actual)) return undefined;
    const pattern = new RegExp(
      `^${shown
        .split("...")
        .map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"))
        .join(".*")}$`,
      "s",
    );
    return pattern.test(actual)
      ? undefined
      : `${path}: ${JSON.stringify(actual)} is not ${JSON.stringify(shown)}`;
  }
  return Object.is(shown, actual)
    ? undefined
    : `${path}: ${JSON.stringify(actual)} is not ${JSON.stringify(shown)}`;
}

const isoTime = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/;

/** The JSON values of a text that holds one or several (one per line or pretty-printed). */
export function jsonValues(text: string): unknown[] {
  const values: unknown[] = [];
  let rest = text.trim();
  while (rest.length > 0) {
    const end = endOfFirstValue(rest);
    values.push(JSON.parse(rest.slice(0, end)));
    rest = rest.slice(end).trim();
  }
  return values;
}

/** Where the first JSON value of a text ends (its brackets balanced outside strings). */
function endOfFirstValue(text: string): number {
  if (!/^[[{]/.test(text)) {
    const line = text.indexOf("\n");
    return line === -1 ? text.length : line;
  }
  let depth = 0;
  let inString = false;
  for (let index = 0; index < text.length; index++) {
    const char = text[index];
    if (inString) {
      if (char === "\\") index++;
      else if (char === '"') inString = false;
    } else if (char === '"') inString = true;
    else if (char === "{" || char === "[") depth++;
    else if (char === "}" || char === "]") {
      depth--;
      if (depth === 0) return index + 1;
    }
  }
  return text.length;
}
