/**
 * Pure builders for task containers: names, labels, the create options
 * handed to dockerode, the sandbox environment. No I/O, so the hardening is
 * pinned by unit tests.
 *
 * Hardening (every container):
 * - commands run as the task's own uid and gid (task-identity.ts), never
 *   root and never an id the host uses; the image's sandbox account is
 *   moved to them in account files bound read-only over /etc/passwd and
 *   /etc/group;
 * - the container starts as root with every capability dropped but CHOWN,
 *   DAC_READ_SEARCH, SETUID and SETGID: the entrypoint gives the workspace
 *   and home to the task's uid (CHOWN, and DAC_READ_SEARCH to walk private
 *   directories there), then the exec agent keeps only SETUID and SETGID,
 *   runs as the task's uid itself between spawns and switches each command
 *   to it for good. Commands hold no capability, and since PID 1 and the
 *   agent are another user's, they can neither signal nor ptrace them.
 *   DAC_OVERRIDE and FOWNER are not given: nothing needs to bypass a file's
 *   permissions;
 * - `no-new-privileges`, Docker's default seccomp profile (never unconfined);
 * - pids limit (terminal.container_pids, default 256), memory limit without swap, cpu quota, and a disk
 *   limit on the writable layer and named volumes where the daemon's
 *   storage can apply one (see disk-limits.ts);
 * - tmpfs /tmp (512m), /var/tmp (256m, noexec), /run (64m); the per-task
 *   host directory is bind-mounted at /run/berth, which Docker mounts after
 *   /run because it sorts mounts by depth, so the tmpfs never hides it;
 * - optional read-only root filesystem; network `none`, `bridge`, or
 *   (`isolated`) Berth's own network of the task's policy (network-policy.ts);
 *   optional gVisor (`runtime: runsc`);
 * - Docker's init (tini) as PID 1 reaps orphans; the agent reaps its own;
 * - a cgroup parent per tenant, so tenants share CPU fairly whatever the
 *   number of containers each runs.
 *
 * Names (containers, volumes, host directories, cgroup parents) are keyed
 * hashes of the executor's (task-names.ts).
 */
import { posix } from 'node:path';
import type Dockerode from 'dockerode';
import { InvalidArgumentError } from '../../../common/errors.js';
import type { TaskKey } from '../../backend.js';
import { AGENT_FILE_NAME } from '../shared/agent/agent-script.js';
import { isProviderSecretName } from '../shared/secret-names.js';
import type { DiskLimitRequest } from './disk-limits.js';
import type { ExtraDockerOptions } from './docker-extra-args.js';
import type { TaskIdentity } from './task-identity.js';
import type { PersistentVolumeNames } from './task-names.js';

export type { PersistentVolumeNames };

/** Where the per-task host directory appears in the container. */
export const SANDBOX_RPC_DIR = '/run/berth';
/** The agent's socket, in the container's view. */
export const AGENT_SOCKET_PATH = `${SANDBOX_RPC_DIR}/agent.sock`;
/** The agent's archive in the sandbox (a copy made per container start, beside the socket). */
export const AGENT_PATH = `${SANDBOX_RPC_DIR}/${AGENT_FILE_NAME}`;
/**
 * File in the host directory holding the agent's token for one container
 * start: written by the executor before the start (0600: readable by the
 * container's root, the agent, only; see host-dir.ts), read by the agent
 * before it connects and removed by it where it may write the directory (a
 * root executor's), and by the executor once the hello was accepted or the
 * start failed: before any command of the task runs.
 */
export const AGENT_TOKEN_FILE = 'agent-token';
/**
 * The container's resolv.conf under `docker.network: isolated`, in the host
 * directory: the upstream resolvers themselves, since Docker's embedded DNS
 * (127.0.0.11, which would answer the names of other containers on the
 * network) is closed in the container (network-isolation.ts).
 */
export const RESOLV_CONF_FILE = 'resolv.conf';
/**
 * File the entrypoint writes its reason into when the image cannot run the
 * agent: created empty by the executor at every start (host-dir.ts), since
 * the entrypoint may create nothing in the host directory.
 */
export const AGENT_UNAVAILABLE_FILE = 'agent-unavailable';
/** The account files of the task (task-identity.ts), in the host directory; bound over /etc/passwd and /etc/group. */
export const ACCOUNT_FILES = { passwd: 'passwd', group: 'group' } as const;
/**
 * What the container's root keeps: the entrypoint needs CHOWN and
 * DAC_READ_SEARCH to give the workspace and home to the task's uid, the
 * agent SETUID and SETGID to start commands as it (it gives up the other
 * two first). Commands, another uid, hold none of them.
 */
export const CONTAINER_CAPABILITIES = ['CHOWN', 'DAC_READ_SEARCH', 'SETGID', 'SETUID'] as const;

export const LABEL = {
  task: 'berth.task',
  tenant: 'berth.tenant',
  executor: 'berth.executor',
  created: 'berth.created',
  /** `1` on warm-pool containers: created before their task was known. */
  pool: 'berth.pool',
  /** Liveness of the executor that created the container (see executor-identity.ts). */
  executorPid: 'berth.executor.pid',
  executorStart: 'berth.executor.start',
  executorPidNs: 'berth.executor.pidns',
  /** The executor's own container on the same Docker daemon, when it runs in one (compose, a pod with the socket). */
  executorContainer: 'berth.executor.container',
  stateRoot: 'berth.state_root',
  /** Host path bind-mounted at /run/berth, so a sweep can remove it too. */
  hostDir: 'berth.hostdir',
  /** `code` on execute_code's code containers (see {@link ContainerRole}); absent on task containers. */
  role: 'berth.role',
  /** The uid (and gid) the task's commands run as, on its container and persistent volumes (see task-uids.ts). */
  uid: 'berth.uid',
  /** The container's memory limit, MiB: what it takes of the engine's budget for every executor (memory-admission.ts). */
  memory: 'berth.memory',
} as const;

/**
 * What a container is for: `task`, a task's own environment on the docker
 * backend; `code`, execute_code's per-task code container beside a backend
 * whose environments share no directory with the executor (ssh,
 * singularity). Both carry the same task, tenant and executor labels.
 */
export type ContainerRole = 'task' | 'code';

/**
 * The container's command, run as the container's root with the task's
 * uid, gid, workspace and home as its arguments. First the workspace and
 * home become the task's: where their top directory is not the task's
 * already (new from the image, a volume made before uids were per task,
 * or one whose uid had to change), everything in them is given to it,
 * without following a symlink or entering another mount (a bind of the
 * operator's under the workspace stays as it is), the top directory last,
 * so that an interrupted pass is done again. Then it runs the agent when
 * the image has python3, isolated from the sandbox's Python (`-I -S`: no
 * script directory, user site, site-packages or PYTHON* variable), else
 * says so in a file the executor watches and stays up for `docker exec`.
 * An agent that exits 0 (its executor went away) ends the container; one
 * that fails (say, a python3 too old for it) leaves it up for `docker exec`
 * too.
 */
export const AGENT_ENTRYPOINT_SCRIPT = [
  'ids="$1:$2"; shift 2',
  'own() {',
  '  dir=$1; set --',
  '  while read -r _ _ _ _ point _; do',
  '    case $point in "$dir"/*) set -- "$@" -path "$point" -prune -o ;; esac',
  '  done < /proc/self/mountinfo',
  '  find "$dir" -xdev -mindepth 1 "$@" -exec chown -h "$ids" {} + && chown -h "$ids" "$dir"',
  '}',
  'for dir in "$@"; do',
  // find's -printf where stat cannot: some gVisor kernels refuse coreutils' statx flags (EINVAL).
  '  owner=$(stat -c %u:%g "$dir" 2>/dev/null || find "$dir" -maxdepth 0 -printf %U:%G)',
  '  [ -d "$dir" ] && [ "$owner" != "$ids" ] && { own "$dir" || echo "berth-sandbox: could not give $dir to $ids" >&2; }',
  'done',
  'if command -v python3 >/dev/null 2>&1; then',
  `  python3 -I -S ${AGENT_PATH} --user "$ids" ${AGENT_SOCKET_PATH} && exit 0`,
  `  echo "${AGENT_FILE_NAME} exited with status $?" > ${SANDBOX_RPC_DIR}/${AGENT_UNAVAILABLE_FILE}`,
  'else',
  `  echo "python3 is not installed in this image" > ${SANDBOX_RPC_DIR}/${AGENT_UNAVAILABLE_FILE}`,
  'fi',
  'while :; do sleep 3600; done',
].join('\n');

/** The entrypoint's arguments (after `$0`): the task's ids, then the directories it gives to them. */
export function entrypointArgs(identity: TaskIdentity, dirs: readonly string[]): string[] {
  return [String(identity.uid), String(identity.gid), ...dirs];
}

/** Labels every container of one executor carries. */
export interface ExecutorLabels {
  readonly [LABEL.executor]: string;
  readonly [LABEL.executorPid]: string;
  readonly [LABEL.executorStart]: string;
  readonly [LABEL.executorPidNs]: string;
  readonly [LABEL.stateRoot]: string;
  readonly [LABEL.executorContainer]?: string;
}

/** Labels of a task container (or of a task's code container). */
export function taskLabels(
  key: TaskKey,
  executor: ExecutorLabels,
  hostDir: string,
  now: Date,
  role: ContainerRole = 'task',
): Record<string, string> {
  return {
    ...executor,
    [LABEL.task]: key.taskId,
    [LABEL.tenant]: key.tenant,
    [LABEL.created]: now.toISOString(),
    [LABEL.hostDir]: hostDir,
    ...(role === 'code' ? { [LABEL.role]: role } : {}),
  };
}

/**
 * Labels of a warm-pool container. Labels cannot change after create, so a
 * pool container never gets `berth.task`/`berth.tenant`: when a task claims
 * it, it is renamed to the task's container name and the binding is written
 * to `task.json` in its /run/berth directory. The orphan sweep goes by
 * `berth.executor`, which pool containers carry like any other.
 */
export function poolLabels(executor: ExecutorLabels, hostDir: string, now: Date): Record<string, string> {
  return { ...executor, [LABEL.pool]: '1', [LABEL.created]: now.toISOString(), [LABEL.hostDir]: hostDir };
}

export interface SandboxEnvInput {
  /** `terminal.docker_env`: literal values set by the operator. */
  readonly dockerEnv: Readonly<Record<string, string>>;
  /** `terminal.docker_forward_env`: names copied from the executor's environment. */
  readonly forwardEnv: readonly string[];
  /** The executor's environment (source of forwarded values). */
  readonly baseEnv: Readonly<Record<string, string | undefined>>;
  /** Secret-looking names that may nevertheless be forwarded. */
  readonly envPassthrough: readonly string[];
  readonly homeDir: string;
}

/**
 * The container's environment. Nothing of the executor's own environment
 * enters it except names listed in `docker_forward_env`, and of those a name
 * that looks like a provider secret only when `env_passthrough` allows it.
 * Returns the names it refused, for a warning.
 */
export function buildSandboxEnv(input: SandboxEnvInput): { env: Record<string, string>; refused: string[] } {
  const env: Record<string, string> = { HOME: input.homeDir };
  const allowed = new Set(input.envPassthrough);
  const refused: string[] = [];
  for (const name of input.forwardEnv) {
    const value = input.baseEnv[name];
    if (value === undefined) continue;
    if (isProviderSecretName(name) && !allowed.has(name)) {
      refused.push(name);
      continue;
    }
    env[name] = value;
  }
  Object.assign(env, input.dockerEnv);
  return { env, refused };
}

/** Validates one `docker_volumes` entry (`/host/path:/container/path[:ro|rw]`); `setting` names it in errors. */
export function parseVolumeSpec(spec: string, setting = 'terminal.docker_volumes'): string {
  const parts = spec.split(':');
  const [host, target, mode] = parts;
  if (parts.length < 2 || parts.length > 3 || !host || !target) {
    throw new InvalidArgumentError(`${setting}: "${spec}" is not HOST:CONTAINER[:ro|rw]`);
  }
  if (!posix.isAbsolute(target)) {
    throw new InvalidArgumentError(`${setting}: "${spec}": the container path must be absolute`);
  }
  const normalized = posix.normalize(target);
  if (normalized === SANDBOX_RPC_DIR || normalized.startsWith(`${SANDBOX_RPC_DIR}/`)) {
    throw new InvalidArgumentError(`${setting}: "${spec}": ${SANDBOX_RPC_DIR} is reserved for Berth`);
  }
  if (mode !== undefined && mode !== 'ro' && mode !== 'rw') {
    throw new InvalidArgumentError(`${setting}: "${spec}": mode must be ro or rw`);
  }
  return spec;
}

export interface ContainerSpecInput {
  readonly name: string;
  readonly image: string;
  /** Host directory bind-mounted at /run/berth (agent, its socket, runner state). */
  readonly hostDir: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly env: Readonly<Record<string, string>>;
  readonly memoryMiB: number;
  readonly cpus: number;
  readonly pidsLimit: number;
  /** Docker's NetworkMode: `none`, `bridge`, or the name of an isolated network. */
  readonly network: string;
  readonly readOnlyRoot: boolean;
  /** OCI runtime; empty for Docker's default (runc). */
  readonly runtime: string;
  /** Validated `docker_volumes` binds. */
  readonly binds: readonly string[];
  /** Named volumes for /workspace and home, when the task is persistent. */
  readonly persistentVolumes?: PersistentVolumeNames;
  /** Labels for volumes Docker creates on first use. */
  readonly volumeLabels?: Readonly<Record<string, string>>;
  readonly workspaceDir: string;
  readonly homeDir: string;
  /** Disk limits to ask Docker for (terminal.container_disk; see disk-limits.ts). */
  readonly disk?: DiskLimitRequest;
  /** What terminal.docker_extra_args adds (see docker-extra-args.ts). */
  readonly extra?: ExtraDockerOptions;
  /** The tenant's cgroup parent (TaskNames.cgroupParent); absent: the daemon's default. */
  readonly cgroupParent?: string;
  /** The uid and gid the task's commands run as. */
  readonly identity: TaskIdentity;
  /** Host paths of the task's account files ({@link ACCOUNT_FILES}), bound read-only over /etc/passwd and /etc/group. */
  readonly accountFiles?: { readonly passwd: string; readonly group: string };
  /** Host path of a resolv.conf naming the upstream resolvers ({@link RESOLV_CONF_FILE}), bound read-only over /etc/resolv.conf. */
  readonly resolvConf?: string;
}

const TMPFS: Readonly<Record<string, string>> = {
  // Docker mounts tmpfs noexec unless told otherwise; /tmp is where builds and tests run.
  '/tmp': 'rw,exec,nosuid,nodev,mode=1777,size=512m',
  '/var/tmp': 'rw,noexec,nosuid,nodev,mode=1777,size=256m',
  '/run': 'rw,nosuid,nodev,mode=755,size=64m',
};

/** The dockerode create options for a task or pool container. */
export function buildContainerCreateOptions(input: ContainerSpecInput): Dockerode.ContainerCreateOptions {
  const tmpfs: Record<string, string> = { ...TMPFS };
  const volumeSize = input.disk?.volumeMiB !== undefined ? `${input.disk.volumeMiB}m` : undefined;
  const { uid, gid } = input.identity;
  const mounts: Dockerode.MountSettings[] = [
    { Type: 'bind', Source: input.hostDir, Target: SANDBOX_RPC_DIR, ReadOnly: false },
  ];
  if (input.accountFiles) {
    mounts.push(
      { Type: 'bind', Source: input.accountFiles.passwd, Target: '/etc/passwd', ReadOnly: true },
      { Type: 'bind', Source: input.accountFiles.group, Target: '/etc/group', ReadOnly: true },
    );
  }
  if (input.resolvConf) mounts.push({ Type: 'bind', Source: input.resolvConf, Target: '/etc/resolv.conf', ReadOnly: true });
  if (input.persistentVolumes) {
    for (const [target, source] of [
      [input.workspaceDir, input.persistentVolumes.workspace],
      [input.homeDir, input.persistentVolumes.home],
    ] as const) {
      mounts.push({
        Type: 'volume',
        Source: source,
        Target: target,
        ReadOnly: false,
        // Docker copies the image's files (and their owner) into a new volume.
        VolumeOptions: {
          NoCopy: false,
          // The uid rides along, so a later container of the task (on any executor) runs as the files' owner.
          Labels: { ...input.volumeLabels, [LABEL.uid]: String(uid) },
          // Applies when Docker creates the volume (the task's first container); an existing volume keeps its own.
          DriverConfig: { Name: 'local', Options: volumeSize ? { size: volumeSize } : {} },
        },
      });
    }
  } else if (input.readOnlyRoot) {
    // Nothing else would be writable: the workspace and home live in memory.
    const owner = `uid=${uid},gid=${gid}`;
    tmpfs[input.workspaceDir] = `rw,nosuid,nodev,${owner},mode=755,size=1024m`;
    tmpfs[input.homeDir] = `rw,nosuid,nodev,${owner},mode=755,size=256m`;
  }
  const hostConfig: Dockerode.HostConfig = {
    Init: true,
    CapDrop: ['ALL'],
    CapAdd: [...CONTAINER_CAPABILITIES],
    SecurityOpt: ['no-new-privileges:true'],
    PidsLimit: input.pidsLimit,
    Memory: Math.round(input.memoryMiB * 1024 * 1024),
    MemorySwap: Math.round(input.memoryMiB * 1024 * 1024),
    NanoCpus: Math.round(input.cpus * 1e9),
    NetworkMode: input.network,
    ReadonlyRootfs: input.readOnlyRoot,
    Tmpfs: tmpfs,
    Mounts: mounts,
    Binds: [...input.binds],
    RestartPolicy: { Name: 'no' },
    AutoRemove: false,
  };
  if (input.runtime) hostConfig.Runtime = input.runtime;
  if (input.cgroupParent !== undefined) hostConfig.CgroupParent = input.cgroupParent;
  if (input.disk?.layerMiB !== undefined) hostConfig.StorageOpt = { size: `${input.disk.layerMiB}m` };
  if (input.extra) applyExtra(hostConfig, input.extra);
  // The agent's token never enters the container's environment (every process could read it from
  // /proc/1/environ): it is handed over in a file the agent removes (AGENT_TOKEN_FILE). Names of the
  // agent's own settings are Berth's, whatever the operator's extra args say.
  const env = Object.fromEntries(
    Object.entries({ ...input.env, ...input.extra?.env }).filter(([name]) => !name.startsWith('BERTH_AGENT_')),
  );
  return {
    name: input.name,
    Image: input.image,
    // Root with four capabilities, for the entrypoint and the agent only: see the top of this file.
    User: '0:0',
    WorkingDir: input.workspaceDir,
    Entrypoint: [
      '/bin/sh',
      '-c',
      AGENT_ENTRYPOINT_SCRIPT,
      'berth-sandbox',
      ...entrypointArgs(input.identity, [input.workspaceDir, input.homeDir]),
    ],
    Cmd: [],
    Env: Object.entries(env).map(([k, v]) => `${k}=${v}`),
    Labels: { ...input.extra?.labels, ...input.labels, [LABEL.uid]: String(uid), [LABEL.memory]: String(input.memoryMiB) },
    Tty: false,
    OpenStdin: false,
    AttachStdin: false,
    AttachStdout: false,
    AttachStderr: false,
    StopTimeout: 1,
    HostConfig: hostConfig,
  };
}

/** Adds what terminal.docker_extra_args asked for to the hardened host config. */
function applyExtra(h: Dockerode.HostConfig, extra: ExtraDockerOptions): void {
  h.Binds = [...(h.Binds ?? []), ...extra.binds];
  h.Tmpfs = { ...h.Tmpfs, ...extra.tmpfs };
  // Every capability is dropped already: a --cap-drop only takes back one Berth adds.
  const dropped = new Set(extra.capDrop);
  h.CapAdd = [...new Set([...(h.CapAdd ?? []), ...extra.capAdd])].filter((c) => !dropped.has(c));
  h.SecurityOpt = [...(h.SecurityOpt ?? []), ...extra.securityOpt.filter((o) => !h.SecurityOpt?.includes(o))];
  if (extra.shmSizeBytes !== undefined) h.ShmSize = extra.shmSizeBytes;
  if (extra.ulimits.length > 0) h.Ulimits = extra.ulimits.map((u) => ({ ...u }));
  if (extra.extraHosts.length > 0) h.ExtraHosts = [...extra.extraHosts];
  if (extra.dns.length > 0) h.Dns = [...extra.dns];
  if (extra.dnsSearch.length > 0) h.DnsSearch = [...extra.dnsSearch];
  if (extra.dnsOptions.length > 0) h.DnsOptions = [...extra.dnsOptions];
  if (extra.devices.length > 0) h.Devices = extra.devices.map((d) => ({ ...d }));
  if (extra.gpus) {
    h.DeviceRequests = [
      {
        Driver: '',
        Count: extra.gpus.count,
        DeviceIDs: [...extra.gpus.deviceIds],
        Capabilities: [['gpu']],
        Options: {},
      },
    ];
  }
}
