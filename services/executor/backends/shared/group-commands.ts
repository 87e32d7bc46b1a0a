/**
 * The commands a backend runs where no exec agent runs and every command is
 * a process of its own in the sandbox (singularity's `apptainer exec`, the
 * kubernetes backend's per-command `pods/exec`): the wrapper that puts a
 * command in a new session under `setsid` and prints its process group id
 * first (so a timeout or interrupt kills the whole group with a second
 * command, see process-group.ts), and the file helpers with the exit codes
 * that map back to errno names. Pure functions building argv, nothing
 * backend-specific.
 */
import { atomicWriteScript } from './write-script.js';

/** The line a command prints first: the prefix, then its process group id. */
export function pgidLinePrefix(nonce: string): string {
  return `__berth_pgid_${nonce}_`;
}

/**
 * `bash -c` inside the sandbox: `setsid -w` makes a new session and group;
 * the wrapper prints `$$` (the group id), traps TERM/INT/HUP so it outlives
 * its child and reports the child's code (128+n when signalled), and keeps
 * setsid's own complaints out of the output (fd 3 carries the real stderr).
 * Under `pty`, the script gets a terminal from script(1).
 */
export function groupCommand(script: string, nonce: string, pty = false): string[] {
  // script(1) runs its command with $SHELL, and %q quoting is bash's.
  const child = pty ? `SHELL=/bin/bash script -qefc "bash -c $(printf '%q' "$1")" /dev/null` : 'bash -c "$1"';
  const wrapper = [
    'exec 2>&3 3>&-',
    `printf '%s%s\\n' '${pgidLinePrefix(nonce)}' "$$"`,
    'trap : TERM INT HUP',
    child,
    'exit $?',
  ].join('\n');
  return ['bash', '-c', 'exec 3>&2; exec setsid -w bash -c "$1" berth-exec "$2" 2>/dev/null', 'berth', wrapper, script];
}

/** Exit codes of the file helpers, mapped to domain errors by the backend. */
export const FILE_EXIT = {
  notFound: 44,
  isDirectory: 45,
  notDirectory: 46,
  denied: 47,
  /** stderr: what it is (`fifo`, `socket`, `character special file`, ...). */
  notRegular: 48,
  /** stderr: its size in bytes. */
  tooLarge: 49,
} as const;

/** The errno name each {@link FILE_EXIT} code stands for, for the shared file-error mapper. */
export const FILE_EXIT_ERRNO: Readonly<Record<number, string>> = {
  [FILE_EXIT.notFound]: 'ENOENT',
  [FILE_EXIT.isDirectory]: 'EISDIR',
  [FILE_EXIT.notDirectory]: 'ENOTDIR',
  [FILE_EXIT.denied]: 'EACCES',
  [FILE_EXIT.notRegular]: 'ENOTREG',
  [FILE_EXIT.tooLarge]: 'EFBIG',
};

/**
 * Prints the file to stdout (binary-safe): a regular file only, refused from
 * its size over `maxBytes`, and never more than `maxBytes + 1` bytes of it.
 */
export function readFileCommand(absPath: string, maxBytes: number): string[] {
  const script = [
    `[ -e "$1" ] || exit ${FILE_EXIT.notFound}`,
    `[ -d "$1" ] && exit ${FILE_EXIT.isDirectory}`,
    `[ -f "$1" ] || { stat -L -c %F -- "$1" >&2; exit ${FILE_EXIT.notRegular}; }`,
    `[ -r "$1" ] || exit ${FILE_EXIT.denied}`,
    `s=$(stat -L -c %s -- "$1"); [ "$s" -le ${maxBytes} ] || { echo "$s" >&2; exit ${FILE_EXIT.tooLarge}; }`,
    `exec head -c ${maxBytes + 1} -- "$1"`,
  ].join('\n');
  return ['bash', '-c', script, 'berth', absPath];
}

/** Writes stdin to the file atomically, creating parent directories (write-script.ts). */
export function writeFileCommand(absPath: string): string[] {
  return ['bash', '-c', atomicWriteScript(FILE_EXIT), 'berth', absPath];
}

/** Prints `missing`, or `dir SIZE` / `file SIZE` (following symlinks). */
export function statCommand(absPath: string): string[] {
  const script = '[ -e "$1" ] || { echo missing; exit 0; }; if [ -d "$1" ]; then t=dir; else t=file; fi; echo "$t $(stat -L -c %s -- "$1")"';
  return ['bash', '-c', script, 'berth', absPath];
}
