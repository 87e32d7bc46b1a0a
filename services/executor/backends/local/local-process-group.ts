/** Process groups on this host: signalling a whole group, and ending one (SIGTERM, then SIGKILL). */
import os from 'node:os';
import { errnoName } from '../shared/file-errors.js';

/** Exit code the shell reports for a process ended by `signal` (128 + n). */
export function shellSignalExitCode(signal: NodeJS.Signals | null): number {
  const n = signal ? os.constants.signals[signal] : undefined;
  return n === undefined ? 1 : 128 + n;
}

export function signalNumber(signal: NodeJS.Signals | null): number {
  return (signal ? os.constants.signals[signal] : undefined) ?? 0;
}

/** Sends `signal` to process group `pgid`; false when the group no longer exists. */
export function signalGroup(pgid: number, signal: NodeJS.Signals | 0): boolean {
  try {
    process.kill(-pgid, signal);
    return true;
  } catch (err) {
    // EPERM: the group now belongs to someone else (pid reuse); nothing of ours is left in it.
    if (errnoName(err) === 'ESRCH' || errnoName(err) === 'EPERM') return false;
    throw err;
  }
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * SIGTERM to the whole group, then SIGKILL after `graceMs` unless the group
 * is gone earlier. The SIGKILL goes to the group even when the leader already
 * exited, because grandchildren may ignore SIGTERM.
 */
export async function terminateGroup(pgid: number, graceMs: number): Promise<void> {
  if (!signalGroup(pgid, 'SIGTERM')) return;
  const deadline = Date.now() + graceMs;
  while (Date.now() < deadline) {
    await sleep(Math.min(50, Math.max(1, deadline - Date.now())));
    if (!signalGroup(pgid, 0)) return;
  }
  if (!signalGroup(pgid, 'SIGKILL')) return;
  // kill(2) returns before the targets are gone; give them a moment so callers see them dead.
  const killDeadline = Date.now() + 200;
  while (Date.now() < killDeadline && signalGroup(pgid, 0)) await sleep(10);
}
