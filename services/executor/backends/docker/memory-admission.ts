/**
 * How much sandbox memory one docker executor admits: the memory limits of
 * every Berth sandbox on its Docker engine (its own containers: task
 * containers, those starting, warm pool ones; and those of the other
 * executors sharing the engine, found by Berth's labels) may add up to at
 * most the Docker host's memory, or the cgroup limit the executor runs under
 * if that is lower, times `docker.memory_overcommit`. A new task past that
 * is answered RESOURCE_EXHAUSTED naming the setting, rather than started to
 * push the host into swapping or its OOM killer, where one tenant's tasks
 * would take every tenant's memory. Executors sharing an engine each check
 * what the engine holds before they start a container, so only containers
 * two of them start at the same moment can pass the bound together.
 */
import { readFile } from 'node:fs/promises';
import type Dockerode from 'dockerode';
import { ResourceExhaustedError, type CAPACITY_SETTINGS } from '../../../common/errors.js';
import { LABEL } from './container-spec.js';
import { dockerError } from './docker-errors.js';

/** A capacity setting: its refusal reaches the caller as RESOURCE_EXHAUSTED, not as a tool result. */
export const MEMORY_OVERCOMMIT_SETTING: (typeof CAPACITY_SETTINGS)[number] = 'docker.memory_overcommit';
/** The default factor: limits are ceilings, which most tasks stay far below. */
export const DEFAULT_MEMORY_OVERCOMMIT = 1.5;
const MIB = 1024 * 1024;

/** The memory limit of the cgroup this process runs in, MiB (v2, then v1); undefined when there is none. */
export async function ownCgroupMemoryMiB(root = '/sys/fs/cgroup'): Promise<number | undefined> {
  for (const file of [`${root}/memory.max`, `${root}/memory/memory.limit_in_bytes`]) {
    const text = (await readFile(file, 'utf8').catch(() => '')).trim();
    if (!/^\d+$/.test(text)) continue;
    const bytes = Number(text);
    // v1 reports "no limit" as a number near 2^63.
    if (bytes > 0 && bytes < 2 ** 60) return Math.floor(bytes / MIB);
  }
  return undefined;
}

/** Container states that hold no memory: a stopped (suspended) container of another executor counts once it runs again. */
const STOPPED_STATES = new Set(['exited', 'dead', 'removing']);

/**
 * The memory limits of the Berth sandboxes on the engine that are not
 * `ownExecutor`'s, MiB: every container carrying Berth's executor label,
 * by its memory label (one from before that label: `fallbackMiB`).
 */
export async function otherSandboxesMiB(docker: Dockerode, ownExecutor: string, fallbackMiB: number): Promise<number> {
  const containers = await docker.listContainers({ all: true, filters: { label: [LABEL.executor] } });
  let total = 0;
  for (const c of containers) {
    if (c.Labels[LABEL.executor] === ownExecutor || STOPPED_STATES.has(c.State)) continue;
    const labelled = Number(c.Labels[LABEL.memory]);
    total += Number.isFinite(labelled) && labelled > 0 ? labelled : fallbackMiB;
  }
  return total;
}

export interface MemoryBudget {
  /** The memory admission is measured against (the Docker host's, or the executor's cgroup limit if lower), MiB. */
  readonly hostMiB: number;
  readonly factor: number;
  /** hostMiB × factor. */
  readonly limitMiB: number;
  /** Memory limits of the sandboxes held now on the engine, every executor's, MiB. */
  readonly heldMiB: number;
  /** Of those, this executor's, MiB. */
  readonly ownMiB: number;
  /** Whether other executors' sandboxes on the engine count (docker.memory_scope: engine). */
  readonly engineWide: boolean;
}

export interface MemoryAdmissionOptions {
  /** terminal.container_memory: each container's limit. */
  readonly perContainerMiB: number;
  /** docker.memory_overcommit; 0 admits without a bound. */
  readonly factor: number;
  /** The Docker host's memory (`docker info` MemTotal), MiB. */
  readonly hostMiB: () => Promise<number | undefined>;
  /** The executor's own cgroup limit, MiB. */
  readonly cgroupMiB?: () => Promise<number | undefined>;
  /** This executor's containers held now that are not being admitted (live environments, ready pool containers). */
  readonly held: () => number;
  /** The memory limits of other executors' sandboxes on the same engine, MiB (none with docker.memory_scope: executor). */
  readonly others?: () => Promise<number>;
}

export class MemoryAdmission {
  readonly #o: MemoryAdmissionOptions;
  /** Containers admitted and still starting. */
  #starting = 0;

  constructor(o: MemoryAdmissionOptions) {
    this.#o = o;
  }

  /** The budget now; undefined when the factor is 0 or the host's memory is unknown. */
  async budget(): Promise<MemoryBudget | undefined> {
    const { factor } = this.#o;
    if (factor <= 0) return undefined;
    const [host, cgroup, othersMiB] = await Promise.all([
      this.#o.hostMiB(),
      this.#o.cgroupMiB?.() ?? Promise.resolve(undefined),
      this.#o.others?.() ?? Promise.resolve(0),
    ]);
    const hostMiB = host === undefined ? cgroup : cgroup === undefined ? host : Math.min(host, cgroup);
    if (hostMiB === undefined) return undefined;
    const ownMiB = this.#ownMiB();
    return { hostMiB, factor, limitMiB: Math.floor(hostMiB * factor), heldMiB: othersMiB + ownMiB, ownMiB, engineWide: this.#o.others !== undefined };
  }

  #ownMiB(): number {
    return (this.#o.held() + this.#starting) * this.#o.perContainerMiB;
  }

  /**
   * Admits one more container or throws ResourceExhaustedError naming the
   * setting. The returned function gives the admission back once the
   * container counts as held (or failed to start); calling it twice is harmless.
   */
  async admit(): Promise<() => void> {
    const budget = await this.budget();
    // Checked and counted with no await in between, so concurrent admissions cannot both take the last room.
    if (budget !== undefined) {
      // This executor's share again: admissions that went ahead while the budget was asked for count too.
      const ownMiB = this.#ownMiB();
      const heldMiB = budget.heldMiB - budget.ownMiB + ownMiB;
      const per = this.#o.perContainerMiB;
      if (heldMiB + per > budget.limitMiB) {
        const held =
          this.#o.others === undefined
            ? `this executor's sandboxes hold ${heldMiB} MiB of memory limits (docker.memory_scope: executor, terminal.container_memory: ${per} MiB each)`
            : `the sandboxes on this Docker engine hold ${heldMiB} MiB of memory limits ` +
              `(this executor's: ${ownMiB} MiB, terminal.container_memory: ${per} MiB each)`;
        throw new ResourceExhaustedError(
          `${MEMORY_OVERCOMMIT_SETTING}: ${held}; one more would pass ${budget.limitMiB} MiB, the Docker host's ` +
            `${budget.hostMiB} MiB × ${budget.factor}. End idle tasks, lower terminal.container_memory, add executors on other Docker hosts, ` +
            `or raise ${MEMORY_OVERCOMMIT_SETTING}`,
        );
      }
    }
    this.#starting += 1;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.#starting -= 1;
    };
  }
}

export interface EngineMemoryAdmissionOptions {
  readonly docker: Dockerode;
  /** How error messages name the daemon. */
  readonly daemon: string;
  /** This executor's id (its containers' `berth.executor` label). */
  readonly ownExecutor: string;
  readonly perContainerMiB: number;
  readonly factor: number;
  /** docker.memory_scope: whether other executors' sandboxes on the engine count. */
  readonly scope: 'engine' | 'executor';
  /** This executor's containers held now that are not being admitted. */
  readonly held: () => number;
}

/**
 * The docker backend's admission: the Docker host's memory (`docker info`
 * MemTotal, asked once; a failed answer is asked again next time), the
 * executor's own cgroup limit, and the other executors' sandboxes on the
 * engine, counted at every admission.
 */
export function engineMemoryAdmission(o: EngineMemoryAdmissionOptions): MemoryAdmission {
  let hostMemory: Promise<number | undefined> | undefined;
  const hostMiB = (): Promise<number | undefined> => {
    hostMemory ??= o.docker.info().then(
      (info: { MemTotal?: number }) => (info.MemTotal ? Math.floor(info.MemTotal / MIB) : undefined),
      (err: unknown) => {
        hostMemory = undefined;
        throw dockerError(err, "asking for the host's memory", o.daemon);
      },
    );
    return hostMemory;
  };
  return new MemoryAdmission({
    perContainerMiB: o.perContainerMiB,
    factor: o.factor,
    hostMiB,
    cgroupMiB: () => ownCgroupMemoryMiB(),
    held: o.held,
    ...(o.scope === 'engine'
      ? {
          others: () =>
            otherSandboxesMiB(o.docker, o.ownExecutor, o.perContainerMiB).catch((err: unknown) => {
              throw dockerError(err, "counting the engine's sandboxes", o.daemon);
            }),
        }
      : {}),
  });
}
