/**
 * Runs the command blocks of the documentation as a reader would type them
 * and compares what they print with what the page shows. A `console` block
 * is a sequence of `$ COMMAND` lines, each followed by the output the page
 * promises; an `sh` block must run to exit status 0.
 *
 * How the page's output is read:
 * - a line `...` stands for any number of lines;
 * - a line that is a JSON object is compared as JSON: the same keys, the same
 *   values, except values that differ on every run (pids, timestamps,
 *   durations, process ids), which must only have the same type and form;
 * - every other line is compared exactly.
 * Process ids the page shows (`proc_9079d95fb3c3`) stand for the ones the
 * run got, in later commands too (`"session_id":"9079"`, a prefix).
 */

/** One `$ ` command and the output lines the page shows after it. */
export interface ConsoleStep {
  readonly command: string;
  readonly expected: readonly string[];
}

export function parseConsole(body: string): ConsoleStep[] {
  const steps: { command: string; expected: string[] }[] = [];
  const lines = body.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    if (line.startsWith('$ ')) {
      let command = line.slice(2);
      while (command.endsWith('\\') && i + 1 < lines.length) command += `\n${lines[++i]!}`;
      steps.push({ command, expected: [] });
    } else if (steps.length > 0) {
      steps[steps.length - 1]!.expected.push(line);
    } else if (line.trim() !== '') {
      throw new Error(`a console block must start with a '$ ' command line, not: ${line}`);
    }
  }
  for (const s of steps) while (s.expected.length > 0 && s.expected[s.expected.length - 1]!.trim() === '') s.expected.pop();
  return steps;
}

/** Keys whose values change from run to run, and the form they must keep. */
const VOLATILE: Readonly<Record<string, (v: unknown) => boolean>> = {
  pid: (v) => Number.isInteger(v),
  started_at: (v) => typeof v === 'string' && /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d/.test(v),
  uptime_seconds: (v) => typeof v === 'number',
  duration_seconds: (v) => typeof v === 'number',
  session_id: (v) => typeof v === 'string' && /^proc_[0-9a-f]{12}$/.test(v),
};

/** Page id → the run's id, learnt while matching. */
export type IdMap = Map<string, string>;

function jsonObject(line: string): Record<string, unknown> | undefined {
  const t = line.trim();
  if (!t.startsWith('{')) return undefined;
  try {
    const v = JSON.parse(t) as unknown;
    return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** Why `actual` is not what `expected` shows, or undefined when it is. */
function jsonMismatch(expected: unknown, actual: unknown, ids: IdMap, path: string): string | undefined {
  if (Array.isArray(expected)) {
    if (!Array.isArray(actual) || actual.length !== expected.length) return `${path}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`;
    for (let i = 0; i < expected.length; i++) {
      const m = jsonMismatch(expected[i], actual[i], ids, `${path}[${i}]`);
      if (m) return m;
    }
    return undefined;
  }
  if (typeof expected === 'object' && expected !== null) {
    if (typeof actual !== 'object' || actual === null || Array.isArray(actual)) return `${path}: expected an object, got ${JSON.stringify(actual)}`;
    const e = expected as Record<string, unknown>;
    const a = actual as Record<string, unknown>;
    const keys = [...new Set([...Object.keys(e), ...Object.keys(a)])];
    for (const key of keys) {
      if (!(key in a)) return `${path}.${key}: missing from the output`;
      if (!(key in e)) return `${path}.${key}: in the output (${JSON.stringify(a[key])}) but not on the page`;
      const volatile = VOLATILE[key];
      if (volatile) {
        if (!volatile(a[key])) return `${path}.${key}: ${JSON.stringify(a[key])} is not of the form the page shows`;
        if (key === 'session_id' && typeof e[key] === 'string' && /^proc_/.test(e[key])) ids.set(e[key], a[key] as string);
        continue;
      }
      const m = jsonMismatch(e[key], a[key], ids, `${path}.${key}`);
      if (m) return m;
    }
    return undefined;
  }
  return expected === actual ? undefined : `${path}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`;
}

function lineMismatch(expected: string, actual: string | undefined, ids: IdMap): string | undefined {
  if (actual === undefined) return `expected the line ${JSON.stringify(expected)}, the output ended`;
  const e = jsonObject(expected);
  const a = e ? jsonObject(actual) : undefined;
  if (e && a) return jsonMismatch(e, a, ids, '$');
  return expected === actual ? undefined : `expected ${JSON.stringify(expected)}\n     got ${JSON.stringify(actual)}`;
}

/** Compares a command's output with the page's lines; returns why they differ, or undefined. */
export function outputMismatch(expected: readonly string[], actualText: string, ids: IdMap): string | undefined {
  const actual = actualText.replace(/\n$/, '').split('\n');
  if (actualText === '') actual.length = 0;
  const match = (ei: number, ai: number): string | undefined => {
    if (ei === expected.length) return ai === actual.length ? undefined : `the output goes on: ${JSON.stringify(actual.slice(ai).join('\n'))}`;
    if (expected[ei] === '...') {
      let last: string | undefined;
      for (let k = ai; k <= actual.length; k++) {
        last = match(ei + 1, k);
        if (last === undefined) return undefined;
      }
      return last;
    }
    const m = lineMismatch(expected[ei]!, actual[ai], ids);
    return m ?? match(ei + 1, ai + 1);
  };
  return match(0, 0);
}

/** The command with the page's process ids (and their prefixes of 4 or more) replaced by the run's. */
export function substituteIds(command: string, ids: IdMap): string {
  let out = command;
  for (const [pageId, runId] of ids) {
    const page = pageId.slice('proc_'.length);
    const run = runId.slice('proc_'.length);
    for (let len = page.length; len >= 4; len--) {
      out = out.replace(new RegExp(`(?<![0-9a-f])${page.slice(0, len)}(?![0-9a-f])`, 'g'), run.slice(0, len));
    }
  }
  return out;
}
