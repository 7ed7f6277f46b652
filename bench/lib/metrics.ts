/** A service's metrics in Prometheus text, read with `token`, or undefined when they cannot be read. */
export async function scrapeMetrics(origin: string, token: string): Promise<string | undefined> {
  try {
    const response = await fetch(`${origin}/metrics`, {
      headers: { authorization: `Bearer ${token}` },
    });
    const text = await response.text();
    return response.status === 200 ? text : undefined;
  } catch {
    return undefined;
  }
}

/** The samples of one metric: its labels as written (`{worker="1"}`, or empty) and values. */
export function metricSamples(text: string, name: string): Map<string, number> {
  const found = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (!line.startsWith(name)) continue;
    const match = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (match?.[1] === name) found.set(match[2] ?? "", Number(match[3]));
  }
  return found;
}

/** The sum of one metric's samples over every label set. */
export function metricSum(text: string, name: string): number {
  return [...metricSamples(text, name).values()].reduce((a, b) => a + b, 0);
}
