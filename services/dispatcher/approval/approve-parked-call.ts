/**
 * The Approve RPC's work: answer a unary call that was parked for approval,
 * then run it (with a grant for exactly that command) or return the denial.
 */
import { NotFoundError } from '../../common/errors.js';
import type { Dispatcher } from '../dispatcher.js';
import type { ApproveRequestInput } from './approval-guard.js';

/** Returns the result the model sees: the command's, or the blocked result for deny. */
export async function approveParkedCall(
  dispatcher: Dispatcher,
  tenant: string,
  request: ApproveRequestInput,
  signal: AbortSignal,
): Promise<string> {
  const approvals = dispatcher.approvals;
  if (approvals === undefined) throw new NotFoundError(`no pending approval with id '${request.approvalId}'`);
  const outcome = await approvals.guard.approve(tenant, request);
  if (outcome.kind === 'result') return outcome.result;
  return dispatcher.callTool(tenant, outcome.call, {
    signal,
    approvalSurface: { kind: 'defer' },
    approvalGrant: outcome.grant,
  });
}
