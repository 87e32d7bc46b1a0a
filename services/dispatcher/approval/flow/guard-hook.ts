/**
 * The one call tools make before running a command: `terminal` (foreground
 * and background) and `execute_code` (for its script where policy asks, and
 * for every terminal call its script makes, which arrive as ordinary
 * dispatches with the same context).
 */
import { hardlineResult } from './approval-results.js';
import type { ApprovalHook, GuardedAction, GuardVerdict } from '../approval-types.js';
import { detectDangerousCommand } from '../detection/detect.js';

/** The part of a tool's context that asks for approval (ToolContext has it). */
export interface ApprovalAsking {
  readonly approval?: ApprovalHook;
}

/**
 * Asks the context's approval guard about an action. A context without a
 * guard (unit tests, embedding the registry directly) still never runs a
 * hardline command.
 *
 * For an `execute_code` script, pass `{ tool: 'execute_code', command: code,
 * patternKey: 'execute_code', detect: false }` to ask under that key.
 */
export async function requestApproval(ctx: ApprovalAsking, action: GuardedAction): Promise<GuardVerdict> {
  if (ctx.approval !== undefined) return ctx.approval(action);
  if (action.detect === false) return { allowed: true };
  const { hardline } = detectDangerousCommand(action.command);
  return hardline === undefined ? { allowed: true } : { allowed: false, result: hardlineResult(hardline.description) };
}

/** Shorthand for a shell command: detection on, no fixed key. */
export function requestCommandApproval(
  ctx: ApprovalAsking,
  tool: string,
  command: string,
): Promise<GuardVerdict> {
  return requestApproval(ctx, { tool, command });
}
