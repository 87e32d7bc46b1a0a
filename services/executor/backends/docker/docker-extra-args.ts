/**
 * `terminal.docker_extra_args`: `docker run` flags an operator adds to every
 * task container. Berth talks to the Engine API, not the CLI, so the flags
 * are translated into create options here, once, when the backend starts.
 *
 * - Flags that add to the container are taken: environment, labels,
 *   /dev/shm size, ulimits, extra hosts, DNS, devices, GPUs, tmpfs mounts,
 *   binds, capabilities to drop or add, security options.
 * - Flags Berth sets itself, or that would undo the sandbox, are refused
 *   with the key to use instead (`--memory` -> terminal.container_memory,
 *   `--privileged` -> never, ...).
 * - Anything else is refused too: a flag silently dropped would leave the
 *   operator believing it applies.
 * Refusals are config errors: the executor does not start.
 *
 * Options that weaken the default hardening (`--cap-add`, `--device`,
 * `--gpus`, a `--security-opt` other than adding no-new-privileges) are
 * taken, since the operator asked, and named in a warning at start.
 */
import { posix } from 'node:path';
import { InvalidArgumentError } from '../../../common/errors.js';
import { CONTAINER_CAPABILITIES, LABEL, SANDBOX_RPC_DIR, parseVolumeSpec } from './container-spec.js';

/** What the flags add to a container's create options. */
export interface ExtraDockerOptions {
  readonly env: Readonly<Record<string, string>>;
  readonly labels: Readonly<Record<string, string>>;
  readonly binds: readonly string[];
  readonly tmpfs: Readonly<Record<string, string>>;
  readonly capAdd: readonly string[];
  readonly capDrop: readonly string[];
  readonly securityOpt: readonly string[];
  readonly shmSizeBytes?: number;
  readonly ulimits: readonly { Name: string; Soft: number; Hard: number }[];
  readonly extraHosts: readonly string[];
  readonly dns: readonly string[];
  readonly dnsSearch: readonly string[];
  readonly dnsOptions: readonly string[];
  readonly devices: readonly { PathOnHost: string; PathInContainer: string; CgroupPermissions: string }[];
  readonly gpus?: { readonly count: number; readonly deviceIds: readonly string[] };
}

export interface ParsedExtraArgs {
  readonly options: ExtraDockerOptions;
  /** Human-readable notes on options that weaken the default hardening. */
  readonly weakening: readonly string[];
}

const KEY = 'terminal.docker_extra_args';

/** Flags Berth owns or refuses, with what to use instead. */
const REFUSED: Readonly<Record<string, string>> = {
  '--privileged': 'a privileged container is no sandbox; Berth never runs one',
  '--user': "commands run as each task's own uid (docker.task_uids)",
  '-u': "commands run as each task's own uid (docker.task_uids)",
  '--network': 'use docker.network (none or bridge)',
  '--net': 'use docker.network (none or bridge)',
  '--runtime': 'use docker.runtime',
  '--memory': 'use terminal.container_memory',
  '-m': 'use terminal.container_memory',
  '--memory-swap': 'swap is never given beyond terminal.container_memory',
  '--cpus': 'use terminal.container_cpu',
  '--pids-limit': 'the pids limit is part of the hardening (256)',
  '--storage-opt': 'use terminal.container_disk',
  '--read-only': 'use docker.read_only_root',
  '--pid': 'containers get their own PID namespace',
  '--ipc': 'containers get their own IPC namespace',
  '--uts': 'containers get their own UTS namespace',
  '--userns': 'the user namespace is the daemon\'s setting',
  '--cgroupns': 'the cgroup namespace is the daemon\'s setting',
  '--name': 'Berth names containers per task',
  '--rm': 'Berth removes containers itself',
  '--restart': 'Berth restarts containers itself',
  '--entrypoint': 'the entrypoint runs Berth\'s exec agent',
  '--init': 'Docker\'s init is always on',
  '--workdir': 'use terminal.cwd',
  '-w': 'use terminal.cwd',
  '--detach': 'Berth manages the container\'s lifecycle',
  '-d': 'Berth manages the container\'s lifecycle',
  '--interactive': 'Berth manages the container\'s streams',
  '-i': 'Berth manages the container\'s streams',
  '--tty': 'commands get a PTY when they ask for one',
  '-t': 'commands get a PTY when they ask for one',
  '--volumes-from': 'use terminal.docker_volumes',
  '--mount': 'use terminal.docker_volumes (or -v here)',
  '--publish': 'publishing ports is not supported',
  '-p': 'publishing ports is not supported',
};

/** Flags taken, each with a value. */
const TAKEN = new Set([
  '--env',
  '-e',
  '--label',
  '-l',
  '--shm-size',
  '--ulimit',
  '--add-host',
  '--dns',
  '--dns-search',
  '--dns-option',
  '--device',
  '--gpus',
  '--tmpfs',
  '--volume',
  '-v',
  '--cap-add',
  '--cap-drop',
  '--security-opt',
]);

/** `docker run` size syntax: a number with an optional b, k, m or g suffix (binary units). */
export function parseDockerSize(text: string, flag: string): number {
  const m = /^(\d+(?:\.\d+)?)\s*([bkmg])?b?$/i.exec(text.trim());
  if (!m) throw new InvalidArgumentError(`${KEY}: ${flag} "${text}" is not a size such as 64m or 1g`);
  const unit = { b: 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3 }[(m[2] ?? 'b').toLowerCase() as 'b' | 'k' | 'm' | 'g'];
  return Math.round(Number(m[1]) * unit);
}

function parseUlimit(text: string): { Name: string; Soft: number; Hard: number } {
  const m = /^([a-z]+)=(-?\d+)(?::(-?\d+))?$/.exec(text);
  if (!m) throw new InvalidArgumentError(`${KEY}: --ulimit "${text}" is not NAME=SOFT[:HARD]`);
  const soft = Number(m[2]);
  const hard = m[3] === undefined ? soft : Number(m[3]);
  if (hard !== -1 && soft > hard) throw new InvalidArgumentError(`${KEY}: --ulimit "${text}": the soft limit exceeds the hard one`);
  return { Name: m[1]!, Soft: soft, Hard: hard };
}

function parseDevice(text: string): { PathOnHost: string; PathInContainer: string; CgroupPermissions: string } {
  const [host, inContainer, perms, ...rest] = text.split(':');
  if (!host?.startsWith('/') || rest.length > 0 || (inContainer !== undefined && !inContainer.startsWith('/') && perms !== undefined)) {
    throw new InvalidArgumentError(`${KEY}: --device "${text}" is not /HOST[:/CONTAINER[:rwm]]`);
  }
  // `--device /dev/x:rw` gives permissions in the second field.
  if (inContainer !== undefined && perms === undefined && /^[rwm]+$/.test(inContainer)) {
    return { PathOnHost: host, PathInContainer: host, CgroupPermissions: inContainer };
  }
  const p = perms ?? 'rwm';
  if (!/^[rwm]+$/.test(p)) throw new InvalidArgumentError(`${KEY}: --device "${text}": permissions are a mix of r, w and m`);
  return { PathOnHost: host, PathInContainer: inContainer || host, CgroupPermissions: p };
}

function parseGpus(text: string): { count: number; deviceIds: string[] } {
  const value = text.replace(/^"(.*)"$/, '$1');
  if (value === 'all') return { count: -1, deviceIds: [] };
  if (/^\d+$/.test(value)) return { count: Number(value), deviceIds: [] };
  const m = /^device=([\w,.-]+)$/.exec(value);
  if (m) return { count: 0, deviceIds: m[1]!.split(',') };
  throw new InvalidArgumentError(`${KEY}: --gpus "${text}" is not all, a count or device=ID[,ID]`);
}

function keyValue(text: string, flag: string): [string, string] {
  const eq = text.indexOf('=');
  if (eq <= 0) throw new InvalidArgumentError(`${KEY}: ${flag} "${text}" is not KEY=VALUE`);
  return [text.slice(0, eq), text.slice(eq + 1)];
}

/** Splits the list into (flag, value) pairs: `--flag=value` or `--flag value`. */
function pairs(args: readonly string[]): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!.trim();
    if (!arg.startsWith('-')) {
      throw new InvalidArgumentError(`${KEY}: "${arg}" is not a flag; give each flag as "--flag=value" or "--flag", "value"`);
    }
    const eq = arg.indexOf('=');
    const flag = eq > 0 ? arg.slice(0, eq) : arg;
    const refusal = REFUSED[flag];
    if (refusal) throw new InvalidArgumentError(`${KEY}: ${flag} is not accepted: ${refusal}`);
    if (!TAKEN.has(flag)) {
      throw new InvalidArgumentError(
        `${KEY}: ${flag} is not supported. Supported: ${[...TAKEN].filter((f) => f.startsWith('--')).join(', ')}`,
      );
    }
    if (eq > 0) {
      out.push([flag, arg.slice(eq + 1)]);
      continue;
    }
    const value = args[i + 1];
    if (value === undefined) throw new InvalidArgumentError(`${KEY}: ${flag} needs a value`);
    out.push([flag, value]);
    i++;
  }
  return out;
}

/** Translates `terminal.docker_extra_args`; throws InvalidArgumentError naming the first flag it cannot take. */
export function parseDockerExtraArgs(args: readonly string[]): ParsedExtraArgs {
  const env: Record<string, string> = {};
  const labels: Record<string, string> = {};
  const tmpfs: Record<string, string> = {};
  const binds: string[] = [];
  const capAdd: string[] = [];
  const capDrop: string[] = [];
  const securityOpt: string[] = [];
  const ulimits: Array<{ Name: string; Soft: number; Hard: number }> = [];
  const extraHosts: string[] = [];
  const dns: string[] = [];
  const dnsSearch: string[] = [];
  const dnsOptions: string[] = [];
  const devices: Array<{ PathOnHost: string; PathInContainer: string; CgroupPermissions: string }> = [];
  const weakening: string[] = [];
  let shmSizeBytes: number | undefined;
  let gpus: { count: number; deviceIds: string[] } | undefined;
  const berthLabels = new Set<string>(Object.values(LABEL));
  for (const [flag, value] of pairs(args)) {
    switch (flag) {
      case '--env':
      case '-e': {
        const [k, v] = keyValue(value, flag);
        env[k] = v;
        break;
      }
      case '--label':
      case '-l': {
        const [k, v] = keyValue(value, flag);
        if (berthLabels.has(k) || k.startsWith('berth.')) {
          throw new InvalidArgumentError(`${KEY}: ${flag} ${k}: labels under berth. are Berth's own`);
        }
        labels[k] = v;
        break;
      }
      case '--shm-size':
        shmSizeBytes = parseDockerSize(value, flag);
        break;
      case '--ulimit':
        ulimits.push(parseUlimit(value));
        break;
      case '--add-host':
        if (!/^[^:\s]+:[^\s]+$/.test(value)) throw new InvalidArgumentError(`${KEY}: --add-host "${value}" is not HOST:IP`);
        extraHosts.push(value);
        break;
      case '--dns':
        dns.push(value);
        break;
      case '--dns-search':
        dnsSearch.push(value);
        break;
      case '--dns-option':
        dnsOptions.push(value);
        break;
      case '--device':
        devices.push(parseDevice(value));
        weakening.push(`--device ${value} gives the sandbox a host device`);
        break;
      case '--gpus':
        gpus = parseGpus(value);
        weakening.push(`--gpus ${value} gives the sandbox host GPUs`);
        break;
      case '--tmpfs': {
        const [target, opts] = [value.split(':')[0]!, value.split(':').slice(1).join(':')];
        if (!target.startsWith('/')) throw new InvalidArgumentError(`${KEY}: --tmpfs "${value}" is not /PATH[:OPTIONS]`);
        if (posix.normalize(target) === SANDBOX_RPC_DIR || posix.normalize(target).startsWith(`${SANDBOX_RPC_DIR}/`)) {
          throw new InvalidArgumentError(`${KEY}: --tmpfs ${target}: ${SANDBOX_RPC_DIR} is reserved for Berth`);
        }
        tmpfs[target] = opts;
        break;
      }
      case '--volume':
      case '-v':
        binds.push(parseVolumeSpec(value, `${KEY}: ${flag}`));
        break;
      case '--cap-add': {
        const cap = value.toUpperCase().replace(/^CAP_/, '');
        if (cap === 'ALL') throw new InvalidArgumentError(`${KEY}: --cap-add ALL is not accepted: add capabilities one by one`);
        capAdd.push(cap);
        weakening.push(`--cap-add ${cap} is added to the bounding set (commands, under the task's uid, still get no effective capability)`);
        break;
      }
      case '--cap-drop': {
        const cap = value.toUpperCase().replace(/^CAP_/, '');
        if ((CONTAINER_CAPABILITIES as readonly string[]).includes(cap)) {
          throw new InvalidArgumentError(
            `${KEY}: --cap-drop ${cap} is not accepted: the container's root needs it to run commands as the task's own uid ` +
              `(it keeps only ${CONTAINER_CAPABILITIES.join(', ')}, and commands get none of them)`,
          );
        }
        capDrop.push(cap);
        break;
      }
      case '--security-opt':
        if (/^no-new-privileges(:false|=false)$/i.test(value)) {
          throw new InvalidArgumentError(`${KEY}: --security-opt ${value} is not accepted: no-new-privileges stays on`);
        }
        if (!/^no-new-privileges(:true|=true)?$/i.test(value)) {
          weakening.push(`--security-opt ${value} replaces part of the default confinement`);
        }
        securityOpt.push(value);
        break;
    }
  }
  return {
    options: {
      env,
      labels,
      binds,
      tmpfs,
      capAdd,
      capDrop,
      securityOpt,
      ...(shmSizeBytes !== undefined ? { shmSizeBytes } : {}),
      ulimits,
      extraHosts,
      dns,
      dnsSearch,
      dnsOptions,
      devices,
      ...(gpus ? { gpus } : {}),
    },
    weakening,
  };
}
