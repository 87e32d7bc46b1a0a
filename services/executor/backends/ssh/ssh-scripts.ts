/**
 * The command lines the ssh backend sends, built by pure functions so they
 * are unit-tested without a host.
 *
 * The top level of every command is read by the remote user's login shell
 * (sshd runs `$SHELL -c COMMAND`), so it uses only POSIX sh and hands over to
 * bash at once. Foreground commands run under `setsid`, in their own session
 * and process group, and print that group's id first, so a timeout or an
 * interrupt can kill the whole group over a fresh channel: closing the
 * channel alone would leave the command running on the host.
 */
import { createHash } from 'node:crypto';
import { posix } from 'node:path';
import { shellQuote } from '../../../common/shell/quote.js';
import type { TaskKey } from '../../backend.js';
import { taskKeyString } from '../../backend.js';
import { assertKillableGroup, killGroupScript } from '../shared/process-group.js';

/** Exit codes of the preflight script, one per missing prerequisite. */
export const PREFLIGHT_EXIT = { noBash: 90, noSetsid: 91, cannotCreateDirs: 92 } as const;

/**
 * Bytes a relayed execute_code socket path adds to its base directory:
 * `/code-<16 hex>/rpc.sock`. Linux's sun_path holds 107 bytes, so a base
 * longer than 107 minus this cannot hold the socket.
 */
export const RELAY_SOCKET_SUFFIX_BYTES = '/code-0123456789abcdef/rpc.sock'.length;

/** Task directories live under this path, relative to the remote home. */
export const DEFAULT_TASKS_DIR = '.berth/tasks';

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** A task's directory name on the host: a hash, because tenant and task ids may hold any characters. */
export function taskDirName(key: TaskKey): string {
  return createHash('sha256').update(taskKeyString(key)).digest('hex').slice(0, 32);
}

/** `exec bash -c SCRIPT berth ARGS...`, for the login shell. */
export function bashCommand(script: string, ...args: readonly string[]): string {
  return ['exec', 'bash', '-c', shellQuote(script), 'berth', ...args.map(shellQuote)].join(' ');
}

/** `export NAME='value'` lines; rejects names a shell cannot export. */
export function exportLines(env: Readonly<Record<string, string>> | undefined): string[] {
  return Object.entries(env ?? {}).map(([name, value]) => {
    if (!ENV_NAME.test(name)) throw new Error(`invalid environment variable name: ${JSON.stringify(name)}`);
    return `export ${name}=${shellQuote(value)}`;
  });
}

/**
 * Checks the host has what the backend needs, and makes the task's fresh
 * directories: `<tasksDir>/<hash>/{work,state,bg}` under the home directory.
 * A leftover directory (from an executor that died) is removed first so its
 * shell snapshot cannot leak into the new task. Prints `berth-home:<HOME>`
 * and, given the exec agent's path relative to the home, `berth-agent:yes`
 * when that copy is there already (`no` otherwise), and `berth-rpc:<dir>`
 * when the task directory is too long a base for execute_code's socket (a
 * long home): a private directory of its own under /tmp (mktemp -d, 0700).
 * POSIX sh: it runs before we know bash exists.
 */
export function buildPreflightCommand(
  tasksDir: string,
  dirName: string,
  agentRelPath?: string,
  relayBase = agentRelPath !== undefined,
): string {
  const rel = posix.join(tasksDir, dirName);
  const top = tasksDir.split('/')[0] ?? tasksDir;
  return [
    `if ! command -v bash >/dev/null 2>&1; then echo 'berth: bash is not installed on the host'; exit ${PREFLIGHT_EXIT.noBash}; fi`,
    `if ! command -v setsid >/dev/null 2>&1; then echo 'berth: setsid (util-linux) is not installed on the host'; exit ${PREFLIGHT_EXIT.noSetsid}; fi`,
    'umask 077',
    `d="$HOME"/${shellQuote(rel)}`,
    `rm -rf -- "$d" && mkdir -p -- "$d/work" "$d/state" "$d/bg" || { echo "berth: cannot create $d"; exit ${PREFLIGHT_EXIT.cannotCreateDirs}; }`,
    `chmod 700 -- "$HOME"/${shellQuote(top)} 2>/dev/null`,
    `printf 'berth-home:%s\\n' "$HOME"`,
    ...(agentRelPath === undefined
      ? []
      : [`if [ -s "$HOME"/${shellQuote(agentRelPath)} ]; then echo berth-agent:yes; else echo berth-agent:no; fi`]),
    ...(relayBase
      ? [
          `if [ \${#d} -gt ${107 - RELAY_SOCKET_SUFFIX_BYTES} ]; then r=$(mktemp -d /tmp/berth-rpc-XXXXXXXX) && printf 'berth-rpc:%s\\n' "$r"; fi`,
        ]
      : []),
  ].join('\n');
}

/** The line a foreground command prints first: the prefix, then its process group id. */
export function pgidLinePrefix(nonce: string): string {
  return `__berth_pgid_${nonce}_`;
}

export interface ExecCommandSpec {
  /** Passed to `bash -c` verbatim. */
  readonly script: string;
  /** Where bash starts (the runner `cd`s itself; a missing dir falls back to home). */
  readonly cwd: string;
  readonly env?: Readonly<Record<string, string>>;
  /** Random per command, so output cannot fake the group id line. */
  readonly nonce: string;
}

/**
 * A foreground command. Structure (each level `exec`s the next):
 *
 *     login shell ─ setsid -w ─ wrapper bash (session + group leader, prints $$) ─ bash -c SCRIPT
 *
 * The wrapper traps TERM/INT/HUP so that when the group is signalled it
 * survives its child and exits with the child's code, 128+n. `setsid -w`
 * passes that code on; its own complaints (a killed wrapper) go to
 * /dev/null, while the script keeps the real stderr through fd 3.
 */
export function buildExecCommand(spec: ExecCommandSpec): string {
  const wrapper = [
    'exec 2>&3 3>&-',
    `printf '%s%s\\n' ${shellQuote(pgidLinePrefix(spec.nonce))} "$$"`,
    ...exportLines(spec.env),
    'trap : TERM INT HUP',
    'bash -c "$1"',
    'exit $?',
  ].join('\n');
  return [
    `cd -- ${shellQuote(spec.cwd)} 2>/dev/null || cd`,
    'exec 3>&2',
    `exec setsid -w bash -c ${shellQuote(wrapper)} berth-exec ${shellQuote(spec.script)} 2>/dev/null`,
  ].join('; ');
}

/**
 * Kills process group `pgid` (see {@link killGroupScript}); with `exitFile`,
 * a group that had to be SIGKILLed gets its exit file written.
 */
export function buildKillCommand(pgid: number, graceMs: number, exitFile?: string): string {
  assertKillableGroup(pgid);
  return bashCommand(killGroupScript(graceMs), String(pgid), exitFile ?? '');
}

/** The files of one background process, all in its own directory. */
export interface BackgroundPaths {
  readonly dir: string;
  readonly log: string;
  readonly exit: string;
  readonly pid: string;
  readonly stdin: string;
  readonly holder: string;
}

export function backgroundPaths(dir: string): BackgroundPaths {
  return {
    dir,
    log: posix.join(dir, 'log'),
    exit: posix.join(dir, 'exit'),
    pid: posix.join(dir, 'pid'),
    stdin: posix.join(dir, 'stdin'),
    holder: posix.join(dir, 'holder'),
  };
}

export interface BackgroundCommandSpec {
  readonly paths: BackgroundPaths;
  readonly script: string;
  readonly cwd: string;
  readonly env?: Readonly<Record<string, string>>;
  /** Run under a terminal via `script(1)`. */
  readonly pty?: boolean;
}

/**
 * Starts a background command that outlives the ssh connection: `nohup
 * setsid` detaches it into its own session; it writes its output to `log`,
 * its group id to `pid` and, when done, its exit code to `exit` (temp file +
 * mv, so a reader never sees half). Its stdin is a FIFO kept open by a
 * holder process; writes go to the FIFO, killing the holder sends EOF.
 * Prints `pid:<pgid>` once the process is running.
 */
export function buildBackgroundStartCommand(spec: BackgroundCommandSpec): string {
  const p = spec.paths;
  const child = spec.pty
    ? // script(1) gives the command a terminal; -e passes its exit code on.
      `SHELL=/bin/bash script -qefc "bash -c $(printf '%q' "$1")" /dev/null`
    : 'bash -c "$1"';
  const wrapper = [
    'd=$2',
    // Read-write opens of a FIFO never block; the holder and the child inherit ends that already exist.
    'exec 3<>"$d/stdin" 4>"$d/stdin" 5<"$d/stdin" 3>&-',
    'sleep 2147483647 >&4 4>&- 5<&- </dev/null & h=$!',
    `printf '%s\\n' "$h" > "$d/holder"`,
    ...exportLines(spec.env),
    'trap : TERM INT HUP',
    `${child} <&5 >>"$d/log" 2>&1 4>&- 5<&- & c=$!`,
    'exec 4>&- 5<&-',
    `printf '%s\\n' "$$" > "$d/pid.tmp" && mv -f -- "$d/pid.tmp" "$d/pid"`,
    // wait returns early when a trapped signal arrives; wait again until the child is really gone.
    'while :; do wait "$c"; r=$?; kill -0 "$c" 2>/dev/null || break; done',
    'kill "$h" 2>/dev/null',
    `printf '%s\\n' "$r" > "$d/exit.tmp" && mv -f -- "$d/exit.tmp" "$d/exit"`,
  ].join('\n');
  const launcher = [
    'd=$1',
    'mkdir -p -- "$d" && rm -f -- "$d/stdin" && mkfifo -m 600 -- "$d/stdin" || exit 97',
    'cd -- "$2" 2>/dev/null || cd',
    'nohup setsid bash -c "$3" berth-bg "$4" "$d" </dev/null >/dev/null 2>&1 &',
    'for ((i = 0; i < 400; i++)); do [ -s "$d/pid" ] && break; sleep 0.025; done',
    '[ -s "$d/pid" ] || { echo "berth: the background process did not start"; exit 98; }',
    'printf \'pid:%s\\n\' "$(cat -- "$d/pid")"',
  ].join('\n');
  return bashCommand(launcher, p.dir, spec.cwd, wrapper, spec.script);
}

/** Appends stdin of this channel to the process's FIFO; gives up after 10 s if nobody reads it. */
export function buildStdinWriteCommand(paths: BackgroundPaths): string {
  return bashCommand('exec timeout 10 cat >> "$1"', paths.stdin);
}

/** Sends EOF to the process's stdin by ending the holder, the FIFO's last writer. */
export function buildStdinCloseCommand(paths: BackgroundPaths): string {
  return bashCommand('h=$(cat -- "$1" 2>/dev/null) && kill "$h" 2>/dev/null; exit 0', paths.holder);
}

/** Removes a task's directory. */
export function buildRemoveCommand(dir: string): string {
  return bashCommand('rm -rf -- "$1"', dir);
}

/** Parses the `exit` file of a background process. */
export function parseExitFile(text: string): number | undefined {
  const trimmed = text.trim();
  return /^-?\d+$/.test(trimmed) ? Number(trimmed) : undefined;
}
