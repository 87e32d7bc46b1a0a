/**
 * The `process` tool's action list and the answers both sides give without
 * looking at a process. The dispatcher validates calls with them and the
 * executor's registry answers with them, so the two cannot drift apart.
 */

/** Actions in the order the protocol lists them (the unknown-action error repeats this list). */
export const PROCESS_ACTIONS = ['list', 'poll', 'log', 'wait', 'kill', 'write', 'submit', 'close', 'handoff'] as const;

export type ProcessAction = (typeof PROCESS_ACTIONS)[number];

/** `{"error": ...}` for an action outside {@link PROCESS_ACTIONS}. */
export function unknownProcessActionError(action: string): string {
  return `Unknown process action: ${action}. Use: ${PROCESS_ACTIONS.join(', ')}`;
}

/**
 * `handoff` transfers a subagent's process to its parent agent. Berth runs no
 * subagents, so every caller gets the answer a non-subagent gets.
 */
export const HANDOFF_UNAVAILABLE_ERROR = 'handoff is only available to a running subagent with a live parent; you are not one.';

/** `{"status":"error","error":...}` for a `wait` timeout of zero or less; `seconds` as the caller sent it. */
export function nonPositiveTimeoutError(seconds: number): string {
  return `timeout must be positive (got ${seconds})`;
}
