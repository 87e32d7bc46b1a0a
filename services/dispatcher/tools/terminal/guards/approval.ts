/** The approval guard (tool-runtime spec §5) around a terminal command, background or foreground. */
import { requestCommandApproval } from '../../../approval/flow/guard-hook.js';
import type { TerminalGuard } from './terminal-guard.js';

/**
 * Asks about the command before it runs (running later is still running, so
 * background commands are asked about too); a denial is the call's result.
 * An approved command's note becomes the result's `approval` key.
 */
export const approvalGuard: TerminalGuard = {
  name: 'approval',
  async beforeRun(call, ctx) {
    const verdict = await requestCommandApproval(ctx, 'terminal', call.command);
    if (!verdict.allowed) return verdict.result;
    call.approvalNote = verdict.note;
    return undefined;
  },
  afterRun(outcome) {
    const note = outcome.call.approvalNote;
    // An approved command that was then interrupted must not read as if it ran to completion.
    outcome.approval = note !== undefined && outcome.result.interrupted ? `${note.replace(/\.+$/, '')}, then interrupted.` : note;
  },
};
