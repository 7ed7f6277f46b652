import { closest, distance } from "fastest-levenshtein";

/**
 * The refusal of an unknown key, with the known field it most likely meant:
 * `is not a known field; did you mean externalUserId?`. A key is taken for a
 * misspelling of a field when they differ only in case, or by at most a
 * third of the field's letters (two for most names, so a swapped pair is
 * caught; one for names of three letters or fewer); anything
 * further from every field gets no guess, as a wrong guess misleads more
 * than none.
 */
export function unknownFieldDescription(
  key: string,
  known: readonly string[],
  noun: "field" | "query parameter" = "field",
): string {
  const meant = likelyField(key, known);
  return meant ? `is not a known ${noun}; did you mean ${meant}?` : `is not a known ${noun}`;
}

function likelyField(key: string, known: readonly string[]): string | undefined {
  if (known.length === 0) return undefined;
  const lower = key.toLowerCase();
  const sameLetters = known.find((name) => name.toLowerCase() === lower);
  if (sameLetters) return sameLetters;
  const nearest = closest(
    lower,
    known.map((name) => name.toLowerCase()),
  );
  const field = known.find((name) => name.toLowerCase() === nearest);
  if (!field) return undefined;
  const allowed = field.length <= 3 ? 1 : Math.max(2, Math.floor(field.length / 3));
  return distance(lower, nearest) <= allowed ? field : undefined;
}
