/** The metadata that says whether anyone answers approval requests; apart from approval-service.ts so that a client (`berth call`) loads only this. */

/**
 * gRPC metadata a client sends to say that nobody will answer approval
 * requests for its calls (a CI job, a cron-like agent): `berth-interactive: false`.
 * Such calls follow `approvals.non_interactive` (approve, or deny).
 */
export const INTERACTIVE_HEADER = 'berth-interactive';

/** Reads {@link INTERACTIVE_HEADER}: false, 0, no and off mean non-interactive; anything else is interactive. */
export function isInteractive(headerValue: string | undefined): boolean {
  return headerValue === undefined || !/^\s*(?:false|0|no|off)\s*$/i.test(headerValue);
}
