/**
 * Who created a container, and whether that executor still lives. Every
 * container carries its executor's identity in labels; the orphan sweep
 * removes containers whose executor is gone.
 *
 * "Gone" is decided two ways:
 * - Same pid namespace (same boot, same host or pod): the executor's pid no
 *   longer runs, or runs a process with another start time (pid reused).
 *   This is immediate, so after `kill -9` and a restart the new executor's
 *   first sweep removes every container of the old one.
 * - Same state root (executors sharing a host directory, e.g. pods on one
 *   node with a hostPath state root): its heartbeat file under
 *   `<stateRoot>/docker/executors/` is missing or stale.
 * Otherwise (another host's executor on a shared daemon) nothing is known,
 * and the container is left to its own executor.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, readlinkSync } from 'node:fs';
import { mkdir, readdir, rm, stat, utimes, writeFile } from 'node:fs/promises';
import path from 'node:path';
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

/** A fresh identity for this process's executor. */
export function newExecutorIdentity(stateRoot: string, id?: string): ExecutorIdentity {
  return {
    id: id ?? `ex-${randomBytes(6).toString('hex')}`,
    pid: process.pid,
    startTicks: processStartTicks(process.pid) ?? '0',
    pidNamespace: currentPidNamespace(),
    stateRoot,
  };
}

export function executorLabels(identity: ExecutorIdentity): ExecutorLabels {
  return {
    [LABEL.executor]: identity.id,
    [LABEL.executorPid]: String(identity.pid),
    [LABEL.executorStart]: identity.startTicks,
    [LABEL.executorPidNs]: identity.pidNamespace,
    [LABEL.stateRoot]: identity.stateRoot,
  };
}

export type Liveness = 'self' | 'alive' | 'gone' | 'unknown';

export interface LivenessProbes {
  /** Start ticks of a pid in our namespace; undefined when no such process runs. */
  readonly processStartTicks: (pid: number) => string | undefined;
  /** Age of an executor's heartbeat file in ms; undefined when it does not exist. */
  readonly heartbeatAgeMs: (executorId: string) => number | undefined;
}

/**
 * How old a heartbeat may be before its executor counts as gone: five missed
 * beats, so a stalled event loop is not mistaken for death, while a killed
 * executor's tasks can start elsewhere within seconds.
 */
export const HEARTBEAT_STALE_MS = 15_000;

/** Judges the executor named by a container's labels. Pure given the probes. */
export function judgeExecutor(
  labels: Readonly<Record<string, string>>,
  self: ExecutorIdentity,
  probes: LivenessProbes,
): Liveness {
  const id = labels[LABEL.executor];
  if (!id) return 'unknown';
  if (id === self.id) return 'self';
  const pidNs = labels[LABEL.executorPidNs];
  const pid = Number(labels[LABEL.executorPid]);
  if (pidNs && pidNs === self.pidNamespace && Number.isInteger(pid) && pid > 0) {
    const ticks = probes.processStartTicks(pid);
    return ticks !== undefined && ticks === labels[LABEL.executorStart] ? 'alive' : 'gone';
  }
  if (labels[LABEL.stateRoot] && labels[LABEL.stateRoot] === self.stateRoot) {
    const age = probes.heartbeatAgeMs(id);
    return age === undefined || age > HEARTBEAT_STALE_MS ? 'gone' : 'alive';
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

  constructor(stateRoot: string, executorId: string, intervalMs = 3000) {
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

/** Probes against this host's /proc and the heartbeat files under `stateRoot`. */
export function hostProbes(stateRoot: string): LivenessProbes & { refresh(): Promise<void> } {
  const ages = new Map<string, number>();
  return {
    processStartTicks,
    heartbeatAgeMs: (id) => ages.get(id),
    /** Heartbeat ages are read ahead of a sweep, since judging is synchronous. */
    async refresh() {
      ages.clear();
      const dir = heartbeatDir(stateRoot);
      const names = await readdir(dir).catch(() => [] as string[]);
      const now = Date.now();
      await Promise.all(
        names.map(async (name) => {
          const info = await stat(path.join(dir, name)).catch(() => undefined);
          if (info) ages.set(name, now - info.mtimeMs);
        }),
      );
    },
  };
}
