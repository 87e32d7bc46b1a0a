/**
 * The result strings the approval flow returns instead of running a command.
 * They have the terminal tool's error shape, so a model reads every refusal
 * the same way; the quoted parts follow tool-runtime spec §5 exactly.
 */
import { hardlineMessage } from '../detection/hardline.js';

/** `{"output":"","exit_code":-1,"error":MESSAGE,"status":"blocked"}` */
export function blockedResult(message: string): string {
  return JSON.stringify({ output: '', exit_code: -1, error: message, status: 'blocked' });
}

/** A hardline block: `BLOCKED (hardline): DESC. ...`. */
export function hardlineResult(description: string): string {
  return blockedResult(hardlineMessage(description));
}

/**
 * Upstream's `_STOP_COMMAND`: appended to every refusal that a user (or the
 * absence of one) caused, so the model stops instead of rephrasing.
 */
export const STOP_COMMAND =
  ' The user has NOT consented to this action. Do NOT retry this command, do NOT rephrase it, and do NOT attempt ' +
  'the same outcome via a different command. Stop the current workflow and wait for the user to respond before ' +
  'taking any further destructive or irreversible action.';

/** Consecutive smart-approval denials after which refusals carry the circuit-breaker text (upstream's default). */
export const DENIAL_BREAKER_THRESHOLD = 3;

/** Upstream's circuit-breaker addendum, or '' below the threshold (`approvals.denial_breaker_threshold`). */
export function breakerAddendum(denials: number, threshold = DENIAL_BREAKER_THRESHOLD): string {
  if (denials < threshold) return '';
  return (
    ` CIRCUIT BREAKER: ${denials} consecutive commands were blocked by the security reviewer. ` +
    'STOP attempting variations of this operation. Report the blocked operation to the user and either ask them ' +
    'to run it manually or use /approve.'
  );
}

/**
 * Upstream's pending message: what the model reads while the approval waits
 * for an answer nobody can give right now.
 */
export function pendingMessage(description: string, command: string): string {
  return (
    `⚠️ ${description}. Asking the user for approval.\n\n**Command:**\n\`\`\`\n${command}\n\`\`\`\n\n` +
    'STOP: do NOT re-run, rephrase, or re-issue this command — each variant sends the user ANOTHER approval card. ' +
    "Wait for the user's decision; if this turn must end, report that approval is pending."
  );
}

/** The spec's pending result, plus upstream's message and the id the Approve RPC names it by. */
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
    message: pendingMessage(fields.description, fields.command),
  });
}

export function smartDenyMessage(description: string, breaker = ''): string {
  return `BLOCKED by smart approval: ${description}. The command was assessed as genuinely dangerous. Do NOT retry.${breaker}`;
}

/** Upstream's CLI timeout text. */
export function timeoutMessage(breaker = ''): string {
  return `BLOCKED: Command timed out without user response.${STOP_COMMAND} Silence is not consent.${breaker}`;
}

/** Upstream's text for a user's deny. */
export function userDenyMessage(breaker = ''): string {
  return `BLOCKED: User denied this command.${STOP_COMMAND}${breaker}`;
}

export function streamClosedMessage(description: string): string {
  return (
    `BLOCKED: This command needs approval (${description}), but the session that could approve it has closed, ` +
    `so it was not run.${STOP_COMMAND}`
  );
}

/**
 * Upstream's unattended-deny text (`ctx.block_message`), with Berth's context
 * and setting: upstream names `approvals.cron_mode`, which Berth does not have.
 */
export function nonInteractiveDenyMessage(description: string): string {
  return (
    `BLOCKED: Command flagged as dangerous (${description}) but this non-interactive context runs without a user ` +
    'present to approve it. Find an alternative approach that avoids this command. To allow dangerous commands in ' +
    'non-interactive contexts, set approvals.non_interactive: approve in config.yaml.'
  );
}

export function tooManyPendingMessage(max: number): string {
  return (
    `BLOCKED: ${max} commands are already waiting for approval; this one was not run. ` +
    'Wait until the user has answered the waiting ones, then retry.'
  );
}
