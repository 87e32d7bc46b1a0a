/**
 * The execute_code result object the model reads (spec §6), built from what
 * the executor reports. Pure, so every message is unit-tested.
 */

export type ExecuteCodeStatus = 'success' | 'error' | 'timeout' | 'interrupted';

export interface ExecuteCodeResult {
  readonly status: ExecuteCodeStatus;
  readonly output: string;
  readonly tool_calls_made: number;
  readonly duration_seconds: number;
  readonly error?: string;
  /** One recovery hint for a well-known script failure (see {@link failureHint}). */
  readonly hint?: string;
  /** Where the script ran when that is not a container (local backend), and environment notices. */
  readonly notice?: string;
}

/** What the run produced, as the executor reports it. */
export interface ExecuteCodeOutcome {
  /** Already capped by the executor, truncation notice included. */
  readonly stdout: string;
  /** The head of stderr. */
  readonly stderr: string;
  readonly exitCode: number;
  readonly timedOut: boolean;
  readonly interrupted: boolean;
  readonly toolCallsMade: number;
  readonly durationMs: number;
  /** The configured timeout, for the timeout message. */
  readonly timeoutSec: number;
  readonly notices?: readonly string[];
  /** The sandbox tools the script could import, for the failure hint that lists them. */
  readonly importableTools?: readonly string[];
}

export const INTERRUPTED_SUFFIX = '\n[execution interrupted — user sent a new message]';
export const INTERRUPTED_ERROR = 'Execution interrupted — user sent a new message.';
export const STDERR_SEPARATOR = '\n--- stderr ---\n';

export function timeoutMessage(timeoutSec: number): string {
  return `Script timed out after ${timeoutSec}s and was killed.`;
}

const BUILT_IN_HELPERS = new Set(['json_parse', 'shell_quote', 'retry']);

/** How much of stderr is scanned for a hint: failures name themselves near the top or in the last traceback line. */
const HINT_SCAN_CHARS = 4000;

/**
 * The reference tool's hints for the failures scripts hit most, first match
 * wins: importing what hermes_tools does not have, importing or not finding
 * the helpers, a module the interpreter lacks, and treating a tool result (a
 * dict) as a string. Texts are the reference tool's except where noted.
 */
const FAILURE_HINT_RULES: readonly (readonly [RegExp, (match: RegExpExecArray, tools: readonly string[]) => string])[] = [
  [
    // `[\p{L}\p{N}_]` is Python's `\w`, which matches letters and digits of any script.
    /cannot import name '([\p{L}\p{N}_]+)' from 'hermes_tools'/u,
    (m, tools) => {
      const name = m[1] ?? '';
      if (BUILT_IN_HELPERS.has(name)) {
        return (
          `${name} is a BUILT-IN helper in the sandbox — no import needed. ` +
          `Remove it from the import line and call ${name}(...) directly.`
        );
      }
      return (
        `'${name}' is not available inside the execute_code sandbox. ` +
        `Importable tools here: ${tools.length > 0 ? [...tools].sort().join(', ') : '(none)'}. ` +
        'For anything else, use the normal tool call ' +
        'instead of execute_code.'
      );
    },
  ],
  [
    // The reference tool says to call the helper without importing it, because its kernel has the
    // helpers in scope; here they come from the module, so the hint gives the import that works.
    /NameError: name '(json_parse|shell_quote|retry)' is not defined/u,
    (m) => `Import ${m[1] ?? ''} before calling it: from hermes_tools import ${m[1] ?? ''}`,
  ],
  [
    /ModuleNotFoundError: No module named '([\p{L}\p{N}_.]+)'/u,
    (m) =>
      `'${m[1] ?? ''}' is not installed in the sandbox interpreter. Use Python stdlib inside execute_code, or run the ` +
      "code via terminal() with the project venv's python instead.",
  ],
  [
    /TypeError: string indices must be integers|AttributeError: 'str' object has no attribute 'get'/u,
    () =>
      'Tool functions in the sandbox return DICTS (already parsed) — do not json.loads() them or index them like ' +
      "strings. Example: read_file(path)['content'].",
  ],
];

/** The recovery hint for a failed script's stderr, or undefined when no rule matches. */
export function failureHint(stderr: string, importableTools: readonly string[]): string | undefined {
  const window = stderr.slice(0, HINT_SCAN_CHARS);
  for (const [pattern, hint] of FAILURE_HINT_RULES) {
    const match = pattern.exec(window);
    if (match !== null) return hint(match, importableTools);
  }
  return undefined;
}

/** Seconds with two decimals, as a number. */
export function roundSeconds(ms: number): number {
  return Math.round(ms / 10) / 100;
}

/**
 * Shapes the result. Timeout wins over interrupt (the timeout fired first
 * when both are set); a script that exited non-zero on its own is an error
 * with stderr (or the exit code) as the error and stderr appended to the
 * output under a separator.
 */
export function shapeExecuteCodeResult(outcome: ExecuteCodeOutcome): ExecuteCodeResult {
  const base = {
    tool_calls_made: outcome.toolCallsMade,
    duration_seconds: roundSeconds(outcome.durationMs),
  };
  const notice = outcome.notices && outcome.notices.length > 0 ? { notice: outcome.notices.join(' ') } : {};
  const stdout = outcome.stdout;
  if (outcome.timedOut) {
    const error = timeoutMessage(outcome.timeoutSec);
    const output = stdout !== '' ? `${stdout}\n\n⏰ ${error}` : `⏰ ${error}`;
    return { status: 'timeout', output, ...base, error, ...notice };
  }
  if (outcome.interrupted) {
    return { status: 'interrupted', output: stdout + INTERRUPTED_SUFFIX, ...base, error: INTERRUPTED_ERROR, ...notice };
  }
  if (outcome.exitCode !== 0) {
    const stderr = outcome.stderr;
    const error = stderr !== '' ? stderr : `Script exited with code ${outcome.exitCode}`;
    const output = stderr !== '' ? stdout + STDERR_SEPARATOR + stderr : stdout;
    const hint = failureHint(stderr, outcome.importableTools ?? []);
    return { status: 'error', output, ...base, error, ...(hint === undefined ? {} : { hint }), ...notice };
  }
  return { status: 'success', output: stdout, ...base, ...notice };
}
