/**
 * The warm pool's containers on the docker backend: starting one before its
 * task is known (its login shell's snapshot written ahead), claiming one for
 * a task (renamed to the task's container name, the task written to
 * task.json in its /run/berth), and whether the adaptive pool may grow
 * within the memory admission's room (warm-pool.ts keeps the pool itself).
 */
import { rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from '../../../common/logging.js';
import type { TaskKey } from '../../backend.js';
import type { ContainerFactory } from './container-factory.js';
import { poolLabels, type ExecutorLabels } from './container-spec.js';
import { prepareShellSnapshot } from './docker-environment.js';
import type { MemoryAdmission } from './memory-admission.js';
import type { NetworkIsolation } from './network-isolation.js';
import type { SandboxContainer } from './sandbox-container.js';
import type { TaskUids } from './task-uids.js';
import type { WarmPool } from './warm-pool.js';

export interface PoolContainersOptions {
  readonly factory: ContainerFactory;
  readonly uids: TaskUids;
  /** The backend's directory under the state root (`<stateRoot>/docker`). */
  readonly root: string;
  readonly labels: () => ExecutorLabels;
  readonly logger: Logger;
  readonly isolation: () => NetworkIsolation | undefined;
  readonly pool: () => WarmPool | undefined;
  /** Containers whose removal failed, for the next sweep. */
  readonly leftovers: Set<string>;
  readonly memory: MemoryAdmission;
  /** terminal.container_memory, MiB. */
  readonly memoryMiB: number;
  /** docker.warm_pool_memory_mb; 0: none of its own. */
  readonly poolBudgetMiB: number;
}

export class PoolContainers {
  readonly #o: PoolContainersOptions;

  constructor(options: PoolContainersOptions) {
    this.#o = options;
  }

  /**
   * Whether the adaptive pool may start one more container beyond
   * `warm_pool`: within its memory budget, and leaving the memory admission
   * room for one more task beside it.
   */
  async mayGrow(ready: number): Promise<boolean> {
    const per = this.#o.memoryMiB;
    const budgetMiB = this.#o.poolBudgetMiB;
    if (budgetMiB > 0 && (ready + 1) * per > budgetMiB) return false;
    const admission = await this.#o.memory.budget().catch(() => undefined);
    return admission === undefined || admission.heldMiB + 2 * per <= admission.limitMiB;
  }

  async start(): Promise<SandboxContainer> {
    await this.#o.factory.ensureImage();
    const poolId = `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`;
    const hostDir = path.join(this.#o.root, 'pool', poolId);
    const name = `berth-pool-${poolId}`;
    // The claiming task takes the container's uid with it (pool containers are never persistent).
    const container = await this.#o.uids.startWith({ containerName: name }, undefined, (identity) =>
      this.#o.factory.start({ name, hostDir, identity, labels: poolLabels(this.#o.labels(), hostDir, new Date()), priority: 'pool' }),
    );
    // The login shell's snapshot depends only on the image and the container's
    // environment, which every task of this executor shares: write it now, not
    // on the claiming task's first call.
    container.preparedSnapshot = await prepareShellSnapshot(container.channel, this.#o.factory.options.workspaceDir).catch(
      (err: unknown) => {
        this.#o.logger.warn({ err, container: container.name }, 'warm pool: preparing the shell snapshot failed; the claiming task runs the login shell itself');
        return undefined;
      },
    );
    return container;
  }

  /**
   * Binds a ready pool container to the task: renamed to the task's
   * container name, with the task written to task.json in its /run/berth.
   */
  async claim(key: TaskKey, name: string, logger: Logger): Promise<SandboxContainer | undefined> {
    // Pool containers sit on the operator's network; a tenant with a narrower policy needs its own.
    const isolation = this.#o.isolation();
    if (isolation && isolation.policyIdOf(key.tenant) !== isolation.policyIdOf(undefined)) return undefined;
    const container = this.#o.pool()?.take();
    if (!container) return undefined;
    try {
      await container.rename(name);
      // The sandbox can write in its host dir: never follow what may be a planted link.
      const binding = path.join(container.hostDir, 'task.json');
      await rm(binding, { force: true });
      await writeFile(
        binding,
        `${JSON.stringify({ tenant: key.tenant, task: key.taskId, claimedAt: new Date().toISOString() })}\n`,
        { flag: 'wx', mode: 0o644 },
      );
      return container;
    } catch (err) {
      logger.warn({ err }, 'claiming a warm pool container failed; starting a new one');
      await container.remove().catch(() => this.#o.leftovers.add(container.id));
      this.#o.uids.release(container.identity.uid);
      await rm(container.hostDir, { recursive: true, force: true }).catch(() => undefined);
      return undefined;
    }
  }
}
