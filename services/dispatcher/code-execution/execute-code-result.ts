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
}

export const INTERRUPTED_SUFFIX = '\n[execution interrupted — user sent a new message]';
export const INTERRUPTED_ERROR = 'Execution interrupted — user sent a new message.';
export const STDERR_SEPARATOR = '\n--- stderr ---\n';

export function timeoutMessage(timeoutSec: number): string {
  return `Script timed out after ${timeoutSec}s and was killed.`;
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
    return { status: 'error', output, ...base, error, ...notice };
  }
  return { status: 'success', output: stdout, ...base, ...notice };
}
