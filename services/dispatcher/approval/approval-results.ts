/**
 * The result strings the approval flow returns instead of running a command.
 * They have the terminal tool's error shape, so a model reads every refusal
 * the same way; the quoted parts follow tool-runtime spec §5 exactly.
 */
import { hardlineMessage } from './hardline.js';

/** `{"output":"","exit_code":-1,"error":MESSAGE,"status":"blocked"}` */
export function blockedResult(message: string): string {
  return JSON.stringify({ output: '', exit_code: -1, error: message, status: 'blocked' });
}

/** A hardline block: `BLOCKED (hardline): DESC. ...`. */
export function hardlineResult(description: string): string {
  return blockedResult(hardlineMessage(description));
}

/** The spec's pending result, plus the id the Approve RPC names it by. */
export function pendingResult(fields: {
  command: string;
  description: string;
  patternKey: string;
  approvalId: string;
}): string {
  return JSON.stringify({
    output: '',
    exit_code: -1,
    error: '',
    status: 'pending_approval',
    approval_pending: true,
    command: fields.command,
    description: fields.description,
    pattern_key: fields.patternKey,
    approval_id: fields.approvalId,
  });
}

export function smartDenyMessage(description: string): string {
  return `BLOCKED by smart approval: ${description}. The command was assessed as genuinely dangerous. Do NOT retry.`;
}

export function timeoutMessage(timeoutSec: number): string {
  return (
    'BLOCKED: Command timed out without user response. ' +
    `Nobody answered the approval request within ${timeoutSec}s, so the command was not run; ` +
    'do not retry it until the user is there to approve it. Silence is not consent.'
  );
}

export function userDenyMessage(description: string): string {
  return (
    `BLOCKED: The user denied this command (${description}). ` +
    'Do NOT retry it or a variant of it; ask the user how they want to proceed.'
  );
}

export function streamClosedMessage(description: string): string {
  return (
    `BLOCKED: This command needs approval (${description}), but the session that could approve it has closed, ` +
    'so it was not run.'
  );
}

export function nonInteractiveDenyMessage(description: string): string {
  return (
    `BLOCKED: This command needs approval (${description}) and this non-interactive context denies such ` +
    'commands (approvals.non_interactive: deny). Do NOT retry it; find a way that does not need it.'
  );
}

export function tooManyPendingMessage(max: number): string {
  return (
    `BLOCKED: ${max} commands are already waiting for approval; this one was not run. ` +
    'Wait until the user has answered the waiting ones, then retry.'
  );
}
