/**
 * One interface for every check and rewrite around a terminal command. A
 * guard may act before the command runs (refuse the call, or fill in and
 * rewrite what will run) and after a foreground command ran (shape the
 * result: mask the output, explain the exit code, add a hint). The guards
 * apply in the order guard-pipeline.ts lists them.
 */
import type { TaskExecResult } from '../../../../common/task-client.js';
import type { ToolArgs, ToolContext } from '../../../registry/tool-types.js';

/** One terminal call as the guards see it; before-run guards fill in and rewrite its mutable fields. */
export interface TerminalCall {
  /** The arguments as the model sent them. */
  readonly args: ToolArgs;
  readonly background: boolean;
  /** What will run: the model's command until a guard rewrites it, so guards before a rewrite judge it as sent. */
  command: string;
  /** Where it runs; undefined: the task's current directory. */
  workdir: string | undefined;
  /** Foreground timeout: the configured default until a guard reads the call's own. */
  timeoutSec: number;
  /**
   * Set when a foreground call asked for more than the cap: it then runs as
   * a background process with notify (the requested seconds, for the note).
   * The foreground guards still judge it as the foreground call it was.
   */
  promotedFromTimeoutSec: number | undefined;
  /** Set when the command needed approval and got it. */
  approvalNote: string | undefined;
}

/** A foreground command's result while the after-run guards shape it; the tool then renders it as JSON. */
export interface ForegroundOutcome {
  readonly call: TerminalCall;
  readonly result: TaskExecResult;
  /** The command's output with its status suffix, stripped of surrounding whitespace. */
  output: string;
  /** 124 after a timeout, 130 after an interrupt, else the command's own. */
  readonly exitCode: number;
  /** The result's `exit_code_meaning` key. */
  exitCodeMeaning: string | undefined;
  /** The result's `hint` key. */
  hint: string | undefined;
  /** The result's `approval` key. */
  approval: string | undefined;
}

export interface TerminalGuard {
  /** Names the guard in the pipeline's list. */
  readonly name: string;
  /** `foreground`: skipped for background=true calls. Absent: every call. */
  readonly appliesTo?: 'foreground';
  /**
   * Before the command runs. Returns the result string the call ends with
   * (a refusal), or undefined to go on, having perhaps changed `call`.
   */
  beforeRun?(call: TerminalCall, ctx: ToolContext): string | undefined | Promise<string | undefined>;
  /** After a foreground command ran: shapes the outcome. */
  afterRun?(outcome: ForegroundOutcome): void;
}

/** Result for a call refused before anything ran, in the terminal tool's shape. */
export function refusal(error: string, status: 'error' | 'blocked'): string {
  return JSON.stringify({ output: '', exit_code: -1, error, status });
}

/** Runs the before-run guards in order; the first refusal ends the call and is returned. */
export async function applyBeforeRun(
  guards: readonly TerminalGuard[],
  call: TerminalCall,
  ctx: ToolContext,
): Promise<string | undefined> {
  for (const guard of guards) {
    if (guard.beforeRun === undefined || (guard.appliesTo === 'foreground' && call.background)) continue;
    const refused = await guard.beforeRun(call, ctx);
    if (refused !== undefined) return refused;
  }
  return undefined;
}

/** Runs the after-run guards in order over a foreground command's outcome. */
export function applyAfterRun(guards: readonly TerminalGuard[], outcome: ForegroundOutcome): void {
  for (const guard of guards) guard.afterRun?.(outcome);
}
