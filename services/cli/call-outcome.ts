/**
 * What `berth call` makes of a call, for scripts and CI jobs: its exit
 * status (one table, documented in docs/ci.md and `berth call --help`), the
 * argument check before anything is sent, and the one-line hints printed
 * beside a failed result. The result on stdout stays exactly what the model
 * would read; only stderr and the exit status are the CLI's own.
 */
import { jsonErrorOffset } from './json-error-offset.js';
import { UsageError, didYouMean } from './usage.js';

/** Exit statuses of `berth call` (and of `berth tools` where they apply). */
export const EXIT = {
  ok: 0,
  commandFailed: 1,
  usage: 2,
  toolError: 3,
  denied: 4,
  refused: 5,
  unreachable: 6,
} as const;

/** The table as `berth call --help` and docs/ci.md show it. */
export const EXIT_TABLE: ReadonlyArray<readonly [number, string]> = [
  [EXIT.ok, 'the call completed: no error in its result, and its command (if any) exited 0'],
  [EXIT.commandFailed, 'the command ran and failed: a non-zero exit_code (terminal, a waited-for process), or an execute_code script that failed or timed out'],
  [EXIT.usage, 'the command line is wrong: unknown command or flag, ARGS_JSON not a JSON object, TLS files unreadable'],
  [EXIT.toolError, 'the tool answered with an error: unknown tool, a missing or invalid argument, a patch that did not apply, ...'],
  [EXIT.denied, 'a command that needed approval was not run: denied, no terminal to ask on, a deny rule or a hardline block'],
  [EXIT.refused, 'Berth refused the call: UNAUTHENTICATED, PERMISSION_DENIED, RESOURCE_EXHAUSTED (a quota), INVALID_ARGUMENT, ...'],
  [EXIT.unreachable, 'the server could not be reached (not running, wrong address, TLS not as the flags say: the message names the fix), or became unavailable during the call'],
];

/** The first JSON value of a result (search_files may follow its JSON with a `[Hint: ...]` line). */
export function parseResult(resultJson: string): unknown {
  try {
    return JSON.parse(resultJson);
  } catch (err) {
    const end = /after JSON at position (\d+)/.exec((err as Error).message)?.[1];
    if (end === undefined) return undefined;
    try {
      return JSON.parse(resultJson.slice(0, Number(end)));
    } catch {
      return undefined;
    }
  }
}

const isSet = (value: unknown) => value !== undefined && value !== null && value !== '' && value !== false;

/** The exit status a completed call's result string stands for. */
export function exitStatusOfResult(resultJson: string): number {
  const r = parseResult(resultJson);
  if (typeof r !== 'object' || r === null || Array.isArray(r)) return EXIT.ok;
  const result = r as Record<string, unknown>;
  // The approval flow's refusals all carry status "blocked" and start "BLOCKED" (a workdir refusal says "Blocked:").
  if (result.status === 'pending_approval') return EXIT.denied;
  if (result.status === 'blocked' && typeof result.error === 'string' && result.error.startsWith('BLOCKED')) return EXIT.denied;
  // execute_code: the script ran and failed (non-zero exit, timeout, interrupt) is the code's failure, not the tool's.
  if ('tool_calls_made' in result && ['error', 'timeout', 'interrupted'].includes(String(result.status))) return EXIT.commandFailed;
  if (isSet(result.error) || result.success === false) return EXIT.toolError;
  if (typeof result.exit_code === 'number' && result.exit_code !== 0) return EXIT.commandFailed;
  return EXIT.ok;
}

/** 1-based line and column of `offset` in `text`. */
function lineColumn(text: string, offset: number): { line: number; column: number } {
  const before = text.slice(0, offset);
  const line = before.split('\n').length;
  return { line, column: offset - before.lastIndexOf('\n') };
}

/**
 * ARGS_JSON as the object it must be, checked before anything is sent; a
 * mistake is a UsageError naming where it is and what to type instead.
 */
export function checkArgumentsJson(tool: string, text: string): Record<string, unknown> {
  const example = `berth call ${tool} '{"name":"value"}'`;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    const offset = jsonErrorOffset(text) ?? text.length;
    // V8's words for the mistake, without its position (ours is in lines and columns) or its echo of the text.
    const what =
      offset >= text.length
        ? 'it ends too early'
        : (err as Error).message
            .replace(/\s+in JSON at position \d+.*$/s, '')
            .replace(/^(Unexpected token '[^']*'),.*$/s, '$1')
            .replace(/^\w/, (c) => c.toLowerCase());
    const { line, column } = lineColumn(text, offset);
    const where = text.includes('\n') ? `line ${line}, column ${column}` : `character ${column}`;
    const context = text.slice(Math.max(0, offset - 24), offset).replace(/\n/g, '\\n');
    throw new UsageError(
      `ARGS_JSON is not valid JSON at ${where} (after '${context}'): ${what}; pass one JSON object in single quotes, e.g. ${example}`,
    );
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    const kind = value === null ? 'null' : Array.isArray(value) ? 'an array' : `a ${typeof value}`;
    throw new UsageError(`ARGS_JSON must be a JSON object of the tool's arguments, got ${kind}; e.g. ${example}`);
  }
  return value as Record<string, unknown>;
}

/** The parts of an OpenAI tool object the hints read. */
export interface ToolSummary {
  readonly name: string;
  readonly required: readonly string[];
  readonly types: Readonly<Record<string, string>>;
}

export function toolSummaries(toolsJson: string): ToolSummary[] {
  const tools = JSON.parse(toolsJson) as Array<{ function: { name: string; parameters?: { required?: string[]; properties?: Record<string, { type?: unknown }> } } }>;
  return tools.map(({ function: f }) => ({
    name: f.name,
    required: f.parameters?.required ?? [],
    types: Object.fromEntries(
      Object.entries(f.parameters?.properties ?? {}).map(([k, v]) => [k, Array.isArray(v.type) ? v.type.join(' or ') : String(v.type ?? 'any')]),
    ),
  }));
}

/** `{"error":"Unknown tool: NAME"}`'s NAME, if that is the result. */
export function unknownToolOf(resultJson: string): string | undefined {
  const r = parseResult(resultJson) as { error?: unknown } | undefined;
  const m = typeof r?.error === 'string' ? /^Unknown tool: (.+)$/.exec(r.error) : null;
  return m?.[1];
}

/**
 * The line printed on stderr beside a failed result, naming the fix; the
 * result itself keeps upstream's text, which agents match on.
 */
export function hintFor(tool: string, args: Record<string, unknown>, resultJson: string, tools: readonly ToolSummary[]): string | undefined {
  const unknown = unknownToolOf(resultJson);
  if (unknown !== undefined) {
    return `no tool '${unknown}' on this server${didYouMean(unknown, tools.map((t) => t.name))} ('berth tools' lists them)`;
  }
  const summary = tools.find((t) => t.name === tool);
  const missing = summary?.required.filter((name) => args[name] === undefined || args[name] === null) ?? [];
  if (summary === undefined || missing.length === 0) return undefined;
  const named = missing.map((name) => `'${name}' (${summary.types[name] ?? 'any'})`).join(' and ');
  const example = JSON.stringify(Object.fromEntries(missing.map((name) => [name, '...'])));
  return `${tool} needs its argument ${named}; e.g. berth call ${tool} '${example}'`;
}
