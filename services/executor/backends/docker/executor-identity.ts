/**
 * Who created a container, and whether that executor still lives. Every
 * container carries its executor's identity in labels; the orphan sweep
 * removes containers whose executor is gone.
 *
 * "Gone" is decided these ways:
 * - Same pid namespace (same boot, same host or pod): the executor's pid no
 *   longer runs, or runs a process with another start time (pid reused).
 *   This is immediate, so after `kill -9` and a restart the new executor's
 *   first sweep removes every container of the old one. A process that still
 *   runs but whose heartbeat (same state root) is stale is gone too: it is
 *   stopped (SIGSTOP, a frozen cgroup) or hung, and is fenced off below.
 * - Same state root (executors sharing a host directory, e.g. pods on one
 *   node with a hostPath state root): its heartbeat file under
 *   `<stateRoot>/docker/executors/` is missing or stale. Stale: older than
 *   `docker.executor_stale_ms` (15 s by default); it is touched every fifth
 *   of that.
 * - Its own container (an executor that runs in a container of the same
 *   Docker daemon, as in the compose stack, labels its containers with that
 *   container's id): the daemon says that container has exited or is gone.
 *   Immediate, across pid namespaces. A paused executor container is not
 *   gone by this rule: its heartbeat decides.
 * Otherwise (another host's executor on a shared daemon) nothing is known,
 * and the container is left to its own executor.
 *
 * Fencing: a task's container is taken over only by removing it (the new
 * owner removes the gone executor's container, then starts its own with the
 * task's volumes), so an executor judged gone that was only paused finds,
 * when it runs again, that its container is gone, and it cannot start
 * another for the task while the new owner's lives (the name is taken by a
 * live executor's container). Volumes are reached only through a container,
 * so two executors never drive one container or one volume at once. The
 * task's host directory (shared by name, like the volumes) is touched only
 * after the same check: a replacement or a release by the old owner leaves
 * it alone while another executor's container holds the task's name.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, readlinkSync } from 'node:fs';
import { mkdir, readdir, rm, stat, utimes, writeFile } from 'node:fs/promises';
import path from 'node:path';
import Dockerode from 'dockerode';
import { LABEL, type ExecutorLabels } from './container-spec.js';

export interface ExecutorIdentity {
  /** Random per executor (backend instance); the value of `berth.executor`. */
  readonly id: string;
  readonly pid: number;
  /** Start time of the process in clock ticks since boot (/proc/PID/stat field 22). */
  readonly startTicks: string;
  /** Boot id and pid-namespace inode: pids are only comparable within one. */
  readonly pidNamespace: string;
  readonly stateRoot: string;
  /** The executor's own container on the task containers' Docker daemon, when it runs in one. */
  readonly containerId?: string;
}

/**
 * The id of the Docker container this process runs in, from its mount table
 * (Docker bind-mounts `/var/lib/docker/containers/<id>/{hostname,hosts,resolv.conf}`
 * into every container); undefined outside one.
 */
export function containerIdFromMountinfo(mountinfo: string): string | undefined {
  return /\/containers\/([0-9a-f]{64})\/(?:hostname|hosts|resolv\.conf)\s/.exec(mountinfo)?.[1];
}

/** {@link containerIdFromMountinfo} of this process. */
export function ownContainerId(): string | undefined {
  try {
    return containerIdFromMountinfo(readFileSync('/proc/self/mountinfo', 'utf8'));
  } catch {
    return undefined;
  }
}

/**
 * The container this executor runs in, when the task containers' daemon
 * runs it too (it answers for that id, running): its containers are then
 * labelled with it, so another executor knows at once when it has exited.
 */
export async function ownContainerOn(socketPath: string | undefined): Promise<string | undefined> {
  const id = ownContainerId();
  if (!id) return undefined;
  try {
    const info = await new Dockerode(socketPath ? { socketPath } : undefined).getContainer(id).inspect();
    return info.State.Running && info.Id === id ? id : undefined;
  } catch {
    return undefined;
  }
}

/** `starttime` of a process from /proc, or undefined when it does not exist. */
export function processStartTicks(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // fields[0] is the state (field 3); starttime is field 22.
    if (fields[0] === 'Z') return undefined;
    return fields[19];
  } catch {
    return undefined;
  }
}

function currentPidNamespace(): string {
  let boot = 'unknown-boot';
  let ns = 'unknown-ns';
  try {
    boot = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    // Not Linux, or /proc hidden: pids then only match within this process.
  }
  try {
    ns = readlinkSync('/proc/self/ns/pid');
  } catch {
    ns = `pid-${process.pid}-${randomBytes(4).toString('hex')}`;
  }
  return `${boot}/${ns}`;
}

/** A fresh identity for this process's executor; `containerId`: its own container, confirmed on the daemon. */
export function newExecutorIdentity(stateRoot: string, id?: string, containerId?: string): ExecutorIdentity {
  return {
    id: id ?? `ex-${randomBytes(6).toString('hex')}`,
    pid: process.pid,
    startTicks: processStartTicks(process.pid) ?? '0',
    pidNamespace: currentPidNamespace(),
    stateRoot,
    ...(containerId ? { containerId } : {}),
  };
}

export function executorLabels(identity: ExecutorIdentity): ExecutorLabels {
  return {
    [LABEL.executor]: identity.id,
    [LABEL.executorPid]: String(identity.pid),
    [LABEL.executorStart]: identity.startTicks,
    [LABEL.executorPidNs]: identity.pidNamespace,
    [LABEL.stateRoot]: identity.stateRoot,
    ...(identity.containerId ? { [LABEL.executorContainer]: identity.containerId } : {}),
  };
}

export type Liveness = 'self' | 'alive' | 'gone' | 'unknown';

export interface LivenessProbes {
  /** Start ticks of a pid in our namespace; undefined when no such process runs. */
  readonly processStartTicks: (pid: number) => string | undefined;
  /** Age of an executor's heartbeat file in ms; undefined when it does not exist. */
  readonly heartbeatAgeMs: (executorId: string) => number | undefined;
  /** Whether an executor's own container has exited or is gone (true), runs or is paused (false), or is not known (undefined). */
  readonly containerGone?: (containerId: string) => boolean | undefined;
}

/**
 * How old a heartbeat may be before its executor counts as gone, by default
 * (`docker.executor_stale_ms`): five missed beats, so a stalled event loop is
 * not mistaken for death, while a killed executor's tasks can start elsewhere
 * within seconds.
 */
export const HEARTBEAT_STALE_MS = 15_000;

/** How often an executor touches its heartbeat file: a fifth of the staleness bound, between 100 ms and 3 s. */
export function heartbeatIntervalMs(staleMs: number): number {
  return Math.max(100, Math.min(3000, Math.floor(staleMs / 5)));
}

/**
 * Judges the executor named by a container's labels. Pure given the probes.
 * `staleMs`: how old a heartbeat may be (docker.executor_stale_ms).
 */
export function judgeExecutor(
  labels: Readonly<Record<string, string>>,
  self: ExecutorIdentity,
  probes: LivenessProbes,
  staleMs = HEARTBEAT_STALE_MS,
): Liveness {
  const id = labels[LABEL.executor];
  if (!id) return 'unknown';
  if (id === self.id) return 'self';
  const sharedRoot = labels[LABEL.stateRoot] !== undefined && labels[LABEL.stateRoot] === self.stateRoot;
  const pidNs = labels[LABEL.executorPidNs];
  const pid = Number(labels[LABEL.executorPid]);
  if (pidNs && pidNs === self.pidNamespace && Number.isInteger(pid) && pid > 0) {
    const ticks = probes.processStartTicks(pid);
    if (ticks === undefined || ticks !== labels[LABEL.executorStart]) return 'gone';
    // Its process runs, but a stale heartbeat says it is stopped or hung: fenced off like a dead one.
    const age = sharedRoot ? probes.heartbeatAgeMs(id) : undefined;
    return age !== undefined && age > staleMs ? 'gone' : 'alive';
  }
  const container = labels[LABEL.executorContainer];
  if (container && probes.containerGone?.(container) === true) return 'gone';
  if (sharedRoot) {
    const age = probes.heartbeatAgeMs(id);
    return age === undefined || age > staleMs ? 'gone' : 'alive';
  }
  return 'unknown';
}

/** `<stateRoot>/docker/executors`: one heartbeat file per live executor. */
export function heartbeatDir(stateRoot: string): string {
  return path.join(stateRoot, 'docker', 'executors');
}

/** Touches this executor's heartbeat file every `intervalMs` until stopped. */
export class Heartbeat {
  readonly #file: string;
  readonly #intervalMs: number;
  #timer: NodeJS.Timeout | undefined;

  constructor(stateRoot: string, executorId: string, intervalMs = heartbeatIntervalMs(HEARTBEAT_STALE_MS)) {
    this.#file = path.join(heartbeatDir(stateRoot), executorId);
    this.#intervalMs = intervalMs;
  }

  async start(): Promise<void> {
    await mkdir(path.dirname(this.#file), { recursive: true, mode: 0o700 });
    await writeFile(this.#file, `${process.pid}\n`);
    this.#timer = setInterval(() => {
      const now = new Date();
      utimes(this.#file, now, now).catch(() => writeFile(this.#file, `${process.pid}\n`).catch(() => undefined));
    }, this.#intervalMs);
    this.#timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer);
    this.#timer = undefined;
    await rm(this.#file, { force: true });
  }
}

/**
 * Probes against this host's /proc and the heartbeat files under `stateRoot`,
 * and, given `containerStatus` (Docker's `State.Status` of a container, `gone`
 * when the daemon has none of that id, undefined when it cannot tell), the
 * executors' own containers.
 */
export function hostProbes(
  stateRoot: string,
  containerStatus?: (id: string) => Promise<string | undefined>,
): LivenessProbes & { refresh(executorContainers?: readonly string[]): Promise<void> } {
  const ages = new Map<string, number>();
  const statuses = new Map<string, string>();
  return {
    processStartTicks,
    heartbeatAgeMs: (id) => ages.get(id),
    containerGone: (id) => {
      const status = statuses.get(id);
      if (status === undefined) return undefined;
      return status === 'gone' || status === 'exited' || status === 'dead';
    },
    /** Heartbeat ages and container states are read ahead of judging, which is synchronous. */
    async refresh(executorContainers = []) {
      ages.clear();
      statuses.clear();
      const dir = heartbeatDir(stateRoot);
      const names = await readdir(dir).catch(() => [] as string[]);
      const now = Date.now();
      await Promise.all([
        ...names.map(async (name) => {
          const info = await stat(path.join(dir, name)).catch(() => undefined);
          if (info) ages.set(name, now - info.mtimeMs);
        }),
        ...(containerStatus
          ? [...new Set(executorContainers)].map(async (id) => {
              const status = await containerStatus(id).catch(() => undefined);
              if (status !== undefined) statuses.set(id, status);
            })
          : []),
      ]);
    },
  };
}
