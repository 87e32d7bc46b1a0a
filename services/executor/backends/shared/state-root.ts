/** Where backends keep per-task state on the executor's host when `executor.state_root` is unset. */
import os from 'node:os';
import path from 'node:path';

/** `os.tmpdir()/berth-<uid>/tasks`: per user, so two users on one host never share state. */
export function defaultStateRoot(): string {
  const uid = typeof process.getuid === 'function' ? process.getuid() : 0;
  return path.join(os.tmpdir(), `berth-${uid}`, 'tasks');
}
