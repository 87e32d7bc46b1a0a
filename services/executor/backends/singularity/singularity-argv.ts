/**
 * The argv of every apptainer/singularity invocation the backend makes,
 * built by pure functions so unit tests pin the exact arguments.
 *
 * Commands inside an instance run under `setsid` and print their process
 * group id first (as on the ssh backend), so a timeout or interrupt kills
 * the whole group inside the instance with a second `exec`; killing the
 * local `apptainer exec` process alone would leave the command running.
 */
import { createHash } from 'node:crypto';
import path from 'node:path';
import type { TaskKey } from '../../backend.js';
import { taskKeyString } from '../../backend.js';
import { atomicWriteScript } from '../shared/write-script.js';

/** Where the task's directories appear inside the instance. */
export const WORKSPACE_DIR = '/workspace';
export const STATE_DIR = '/berth/state';
/** The staged exec agent's directory, bound read-only into every instance. */
export const AGENT_DIR = '/berth/agent';

/** A bind mount: host path, path inside, read-only or not. */
export interface Bind {
  readonly source: string;
  readonly target: string;
  readonly readOnly?: boolean;
}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const INSTANCE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

/**
 * One `--env` value. The flag is a comma-separated list read as CSV, so a
 * value holding a comma or a double quote is written as one quoted CSV field.
 */
export function envFlagValue(name: string, value: string): string {
  if (!ENV_NAME.test(name)) throw new Error(`invalid environment variable name: ${JSON.stringify(name)}`);
  if (value.includes('\n')) throw new Error(`environment variable ${name} holds a newline, which --env cannot pass`);
  const pair = `${name}=${value}`;
  return /[",]/.test(value) ? `"${pair.replaceAll('"', '""')}"` : pair;
}

function envFlags(env: Readonly<Record<string, string>>): string[] {
  return Object.entries(env).flatMap(([name, value]) => ['--env', envFlagValue(name, value)]);
}

function bindSpec(bind: Bind): string {
  for (const p of [bind.source, bind.target]) {
    // ':' and ',' separate bind specs; such paths cannot be expressed.
    if (/[:,]/.test(p) || !path.isAbsolute(p)) throw new Error(`cannot bind ${JSON.stringify(p)}: absolute paths without ':' or ','`);
  }
  return `${bind.source}:${bind.target}${bind.readOnly ? ':ro' : ''}`;
}

/** Instance name for a task: the executor's prefix plus a hash of tenant and task. */
export function instanceName(prefix: string, key: TaskKey): string {
  const name = `${prefix}${createHash('sha256').update(taskKeyString(key)).digest('hex').slice(0, 16)}`;
  if (!INSTANCE_NAME.test(name)) throw new Error(`invalid instance name: ${name}`);
  return name;
}

/** `berth-<6 hex of the state root>-`: executors with different state roots never sweep each other's instances. */
export function instancePrefix(stateRoot: string): string {
  return `berth-${createHash('sha256').update(stateRoot).digest('hex').slice(0, 6)}-`;
}

export interface InstanceStartSpec {
  readonly image: string;
  readonly name: string;
  /** A persistent overlay directory; `--writable-tmpfs` when absent. */
  readonly overlayDir?: string;
  readonly binds: readonly Bind[];
  readonly env: Readonly<Record<string, string>>;
  readonly memoryMiB?: number;
  readonly cpus?: number;
  /** `--pids-limit` (terminal.container_pids), one of apptainer's cgroup limit flags like --memory and --cpus. */
  readonly pidsLimit?: number;
}

/** `instance start --containall --no-home ... IMAGE NAME`. */
export function instanceStartArgv(spec: InstanceStartSpec): string[] {
  return [
    'instance',
    'start',
    '--containall',
    '--no-home',
    ...(spec.overlayDir !== undefined ? ['--overlay', spec.overlayDir] : ['--writable-tmpfs']),
    ...spec.binds.flatMap((b) => ['--bind', bindSpec(b)]),
    ...envFlags(spec.env),
    ...(spec.memoryMiB !== undefined ? ['--memory', `${spec.memoryMiB}M`] : []),
    ...(spec.cpus !== undefined ? ['--cpus', String(spec.cpus)] : []),
    ...(spec.pidsLimit !== undefined ? ['--pids-limit', String(spec.pidsLimit)] : []),
    spec.image,
    spec.name,
  ];
}

export function instanceStopArgv(name: string): string[] {
  return ['instance', 'stop', name];
}

export function instanceListArgv(): string[] {
  return ['instance', 'list', '--json'];
}

/** Parses `instance list --json`: `{"instances":[{"instance": NAME, "pid": N, "img": PATH, ...}]}`. */
export function parseInstanceList(json: string): { name: string; pid: number; image: string }[] {
  const text = json.trim();
  if (text === '') return [];
  const parsed = JSON.parse(text) as { instances?: { instance?: unknown; pid?: unknown; img?: unknown }[] | null };
  return (parsed.instances ?? [])
    .filter((i) => typeof i.instance === 'string')
    .map((i) => ({ name: String(i.instance), pid: Number(i.pid ?? 0), image: String(i.img ?? '') }));
}

export interface ExecSpec {
  readonly name: string;
  /** Environment of the command: the container's own is cleared (`--cleanenv`) and only this is passed. */
  readonly env: Readonly<Record<string, string>>;
  readonly pwd: string;
  readonly command: readonly string[];
}

/** `exec --cleanenv --env ... --pwd DIR instance://NAME COMMAND...`. */
export function execArgv(spec: ExecSpec): string[] {
  return ['exec', '--cleanenv', ...envFlags(spec.env), '--pwd', spec.pwd, `instance://${spec.name}`, ...spec.command];
}

/** Converts an image reference (`docker://...`, `docker-daemon://...`) to a SIF file. */
export function buildSifArgv(output: string, source: string): string[] {
  return ['build', '--force', output, source];
}

/** Image references the runtime converts to SIF before use; anything else is used as given. */
export function needsConversion(image: string): boolean {
  return /^(docker|docker-daemon|docker-archive|oci|oci-archive):\/\//.test(image);
}

/** File name of the cached SIF for an image reference. */
export function sifFileName(image: string): string {
  const readable = image.replace(/^[a-z-]+:\/\//, '').replace(/[^A-Za-z0-9._-]+/g, '_').slice(0, 60);
  return `${readable}-${createHash('sha256').update(image).digest('hex').slice(0, 12)}.sif`;
}

/** The line a command prints first: the prefix, then its process group id. */
export function pgidLinePrefix(nonce: string): string {
  return `__berth_pgid_${nonce}_`;
}

/**
 * `bash -c` inside the instance: `setsid -w` makes a new session and group;
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

/**
 * The runtime binary: `configured` when set, else `apptainer`, else
 * `singularity`, whichever is first found on `pathEnv`.
 */
export function resolveBinary(configured: string, pathEnv: string, isExecutable: (file: string) => boolean): string | undefined {
  if (configured !== '') return configured;
  const dirs = pathEnv.split(':').filter(Boolean);
  for (const name of ['apptainer', 'singularity']) {
    for (const dir of dirs) {
      const candidate = path.join(dir, name);
      if (isExecutable(candidate)) return candidate;
    }
  }
  return undefined;
}
