/**
 * The shell-state bootstrap (spec §3): a login shell writes a task's first
 * snapshot. The runner runs it on a task's first command; a backend that
 * prepares sandboxes ahead of time (a warm pool) runs it there first.
 */
import { posix } from 'node:path';
import { shellQuote } from '../../../common/shell/quote.js';
import type { SandboxChannel } from './sandbox-channel.js';
import { PROVIDER_SECRET_NAME_PARTS } from './secret-names.js';

/**
 * The bootstrap script: a login shell writes the first snapshot. Variables
 * the login profile adds whose names look like provider secrets are dropped
 * (variables already in the environment were allowed by the backend).
 */
export function buildBootstrapScript(snapshotPath: string, initialCwd: string, login: boolean): string {
  const snap = shellQuote(snapshotPath);
  const tmp = `${shellQuote(`${snapshotPath}.tmp.`)}$$`;
  const inner = [
    `__berth_before=$'\\n'"$1"$'\\n'`,
    'for __berth_v in $(compgen -e); do',
    `  case "$__berth_before" in *$'\\n'"$__berth_v"$'\\n'*) continue;; esac`,
    `  if [[ \${__berth_v^^} =~ (${PROVIDER_SECRET_NAME_PARTS.join('|')}) ]]; then unset "$__berth_v"; fi`,
    'done',
    'unset OLDPWD __berth_v __berth_before',
    `cd -- ${shellQuote(initialCwd)} 2>/dev/null`,
    `{ export -p; declare -f; alias -p; printf '%s\\n' 'shopt -s expand_aliases'; } >${tmp} && mv -f -- ${tmp} ${snap}`,
  ].join('\n');
  // Names exported before the profile ran, passed to the login shell as $1.
  return `exec bash ${login ? '-l ' : ''}-c ${shellQuote(inner)} berth-bootstrap "$(compgen -e)" </dev/null`;
}

/** Where the bootstrap writes the first snapshot, in an environment's state dir. */
export function bootstrapSnapshotPath(stateDir: string): string {
  return posix.join(stateDir, 'shell-snapshot.sh');
}

/**
 * The bootstrap, for an environment that runs it ahead of time (see
 * `BackendEnvironment.preparedSnapshot`): the script, and the file it writes
 * when it exits 0. Always a login shell: when that fails, prepare nothing and
 * let the runner try both ways itself.
 */
export function buildPreparedSnapshot(stateDir: string, initialCwd: string): { readonly path: string; readonly script: string } {
  const path = bootstrapSnapshotPath(stateDir);
  return { path, script: buildBootstrapScript(path, initialCwd, true) };
}

/**
 * Runs the bootstrap in a sandbox that has no task yet (a warm pool's),
 * writing the snapshot under `stateDir`; resolves to the snapshot's path, or
 * undefined when the login shell failed (the task's runner then tries again
 * itself, login shell or not).
 */
export async function prepareSnapshot(channel: SandboxChannel, stateDir: string, initialCwd: string): Promise<string | undefined> {
  const prepared = buildPreparedSnapshot(stateDir, initialCwd);
  const proc = await channel.spawn({ script: prepared.script, cwd: initialCwd, onOutput: () => undefined });
  const timer = setTimeout(() => void proc.kill(1000).catch(() => undefined), 30_000);
  try {
    const exit = await proc.exited;
    if (exit.code !== 0) return undefined;
  } finally {
    clearTimeout(timer);
  }
  return (await channel.stat(prepared.path)).exists ? prepared.path : undefined;
}
