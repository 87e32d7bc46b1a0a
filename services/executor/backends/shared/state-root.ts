/** Where backends keep per-task state on the executor's host when `executor.state_root` is unset. */
import os from 'node:os';
import path from 'node:path';

/** `executor.state_root`, or `os.tmpdir()/berth-<uid>` when it is empty: per user, so two users on one host never share state. */
export function executorStateDir(stateRoot = ''): string {
  if (stateRoot) return stateRoot;
  const uid = typeof process.getuid === 'function' ? process.getuid() : 0;
  return path.join(os.tmpdir(), `berth-${uid}`);
}

/** `os.tmpdir()/berth-<uid>/tasks`. */
export function defaultStateRoot(): string {
  return path.join(executorStateDir(), 'tasks');
}
