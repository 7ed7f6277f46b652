import { FieldError } from "./plain-codec.js";

/**
 * Refuses a parsed JSON request nested deeper than `maxDepth` levels of
 * objects and arrays (the value itself is the first), naming the top-level
 * field the deep value is under. `JSON.parse` nests as deep as a body
 * allows, but decoders, serializers and hashes recurse: a body of a million
 * `[` would overflow the stack in one of them, which is a 500. The walk is
 * iterative, so it cannot overflow itself.
 */
export function checkJsonDepth(value: unknown, maxDepth: number): void {
  if (typeof value !== "object" || value === null) return;
  const values: object[] = [value];
  const depths: number[] = [1];
  const fields: string[] = ["body"];
  while (values.length > 0) {
    const current = values.pop() as Record<string, unknown>;
    const depth = depths.pop() as number;
    const field = fields.pop() as string;
    if (depth > maxDepth) {
      throw new FieldError(
        field,
        `nests too deeply: a request may have at most ${maxDepth} levels of objects and arrays`,
      );
    }
    // for-in sees an own "__proto__" key too, and allocates nothing.
    for (const key in current) {
      const child = current[key];
      if (typeof child !== "object" || child === null) continue;
      values.push(child);
      depths.push(depth + 1);
      fields.push(depth === 1 && !Array.isArray(current) ? key : field);
    }
  }
}
