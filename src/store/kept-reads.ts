/**
 * Reads kept while a mark stays (a change mark of what they read, see
 * `changeMarksOf`): `read(key)` runs again only once the mark moved since
 * its answer was kept, and every time while the mark is undefined. The
 * mark is taken before the read, so a write during it moves the mark and
 * the next call reads again. A failed read is not kept; past `max` keys,
 * all are forgotten.
 */
export function keptWhileMarkStays<K, V>(
  mark: () => number | undefined,
  read: (key: K) => Promise<V>,
  max: number,
): (key: K) => Promise<V> {
  const kept = new Map<K, { readonly mark: number; readonly answer: Promise<V> }>();
  return (key) => {
    const now = mark();
    if (now === undefined) return read(key);
    const found = kept.get(key);
    if (found?.mark === now) return found.answer;
    const answer = read(key);
    answer.catch(() => {
      if (kept.get(key)?.answer === answer) kept.delete(key);
    });
    if (kept.size >= max) kept.clear();
    kept.set(key, { mark: now, answer });
    return answer;
  };
}
