/**
 * Keeps `value` under `key` in a cache of at most `bound` entries: past it,
 * the first kept goes first. For caches keyed by what callers send, so
 * none grows without bound.
 */
export function rememberBounded<K, V>(map: Map<K, V>, key: K, value: V, bound: number): void {
  if (map.size >= bound && !map.has(key)) map.delete(map.keys().next().value as K);
  map.set(key, value);
}
