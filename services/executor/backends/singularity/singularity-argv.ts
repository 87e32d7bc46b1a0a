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
