/**
 * Reads the Prometheus text exposition format the way a scraper would, for
 * asserting on samples: `sample(text, 'berth_tool_calls_total', { tool: 'terminal', status: 'success' })`.
 */

/** One sample line's value, or undefined when the series is absent. Label order does not matter. */
export function sample(text: string, name: string, labels: Readonly<Record<string, string>> = {}): number | undefined {
  const wanted = seriesKey(name, labels);
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const parsed = parseLine(line);
    if (parsed && seriesKey(parsed.name, parsed.labels) === wanted) return parsed.value;
  }
  return undefined;
}

/** The `# TYPE` of a metric family, e.g. `counter`. */
export function metricType(text: string, name: string): string | undefined {
  return new RegExp(`^# TYPE ${name} (\\w+)$`, 'm').exec(text)?.[1];
}

/** Every label value a metric has for `label` (to check cardinality). */
export function labelValues(text: string, name: string, label: string): string[] {
  const values = new Set<string>();
  for (const line of text.split('\n')) {
    const parsed = line.startsWith('#') ? undefined : parseLine(line);
    const value = parsed?.name === name ? parsed.labels[label] : undefined;
    if (value !== undefined) values.add(value);
  }
  return [...values].sort();
}

function seriesKey(name: string, labels: Readonly<Record<string, string>>): string {
  const pairs = Object.keys(labels)
    .sort()
    .map((k) => `${k}=${JSON.stringify(labels[k])}`);
  return `${name}{${pairs.join(',')}}`;
}

function parseLine(line: string): { name: string; labels: Record<string, string>; value: number } | undefined {
  const m = /^([A-Za-z_:][\w:]*)(?:\{(.*)\})? (\S+)(?: \d+)?$/.exec(line);
  if (!m) return undefined;
  const labels: Record<string, string> = {};
  for (const pair of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) {
    labels[pair[1]!] = pair[2]!.replace(/\\(.)/g, (_all, c: string) => (c === 'n' ? '\n' : c));
  }
  const value = m[3] === '+Inf' ? Infinity : m[3] === '-Inf' ? -Infinity : Number(m[3]);
  return { name: m[1]!, labels, value };
}
