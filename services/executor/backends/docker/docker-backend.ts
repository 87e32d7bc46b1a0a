/**
 * The `docker` backend: one long-lived, hardened container per task,
 * created on first use, with commands run by an exec agent inside it (see
 * sandbox-image/agent/), or by `docker exec` for images that
 * cannot run the agent. Talks to the Docker Engine API through dockerode;
 * never runs the docker CLI and never pulls images.
 *
 * Lifecycle: TaskEnvironments releases idle tasks and EndTask releases a
 * task; either way the environment's dispose removes the container. On
 * start, and every minute, an orphan sweep removes containers of executors
 * that are gone. A warm pool (docker.warm_pool) keeps started containers
 * ready for new tasks.
 */
import path from 'node:path';
import Dockerode from 'dockerode';
import { FailedPreconditionError, UnavailableError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import type {
  Backend,
  BackendCapabilities,
  BackendEnvironment,
  BackendSnapshot,
  CreateEnvironmentOptions,
  DiagnosisPhase,
  DiagnosticFinding,
  TaskKey,
} from '../../backend.js';
import { taskKeyString } from '../../backend.js';
import { stageSpan } from '../../../common/tracing/stage-spans.js';
import { defaultStateRoot } from '../shared/state-root.js';
import { findAgentScript } from '../shared/agent/agent-script.js';

export { findAgentScript };
import { LABEL, taskLabels, type ContainerRole, type ExecutorLabels } from './container-spec.js';
import { DiskMeter, type DiskUsage } from './disk-meter.js';
import type { DiskLimitState, DiskLimitPart } from './disk-limits.js';
import { diagnoseDocker } from './docker-diagnosis.js';
import { DockerEnvironment } from './docker-environment.js';
import { describeDaemon, dockerError, isNotFound } from './docker-errors.js';
import { HEARTBEAT_STALE_MS, Heartbeat, executorLabels, heartbeatIntervalMs, hostProbes, newExecutorIdentity, ownContainerOn, type ExecutorIdentity } from './executor-identity.js';
import { nameHeldByAnother, resolveNameConflict, type NameConflictContext } from './name-conflicts.js';
import { ensureRoot } from './docker-state-root.js';
import { NetworkIsolation } from './network-isolation.js';
import { sweepOrphans, type SweepResult } from './orphan-sweep.js';
import { dockerLifecycle } from './docker-lifecycle.js';
import { DockerSnapshots, sweepSnapshotLeftovers } from './docker-snapshots.js';
import { ContainerFactory } from './container-factory.js';
import { removeContainer } from './sandbox-container.js';
import { TaskUids } from './task-uids.js';
import { DEFAULT_NAME_KEY_FILE, TaskNames } from './task-names.js';
import { DEFAULT_MEMORY_OVERCOMMIT, engineMemoryAdmission, type MemoryAdmission, type MemoryBudget } from './memory-admission.js';
import { WarmPool } from './warm-pool.js';
import { containerFactoryOptions } from './factory-options.js';
import { startTaskContainer } from './task-container-start.js';
import { removeVolumes, volumeLabels as labelsOfVolume } from './task-volumes.js';
import { PoolContainers } from './pool-containers.js';
import type { DockerBackendOptions } from './docker-backend-options.js';

export class DockerBackend implements Backend {
  readonly identity: ExecutorIdentity;
  readonly #docker: Dockerode;
  readonly #daemon: string;
  readonly #logger: Logger;
  readonly #factory: ContainerFactory;
  readonly #labels: ExecutorLabels;
  readonly #root: string;
  readonly #persistent: boolean;
  readonly #role: ContainerRole;
  readonly #options: DockerBackendOptions;
  readonly #heartbeat: Heartbeat;
  /** docker.executor_stale_ms. */
  readonly #staleMs: number;
  readonly #probes: ReturnType<typeof hostProbes>;
  readonly #environments = new Map<string, DockerEnvironment>();
  readonly #pool: WarmPool | undefined;
  readonly #poolContainers: PoolContainers;
  readonly #uids: TaskUids;
  readonly #names: TaskNames;
  readonly #memory: MemoryAdmission;
  readonly #diskMeter: DiskMeter;
  #isolation: NetworkIsolation | undefined;
  /** Containers of ours whose removal failed (daemon down); retried by each sweep. */
  readonly #leftovers = new Set<string>();
  #sweepTimer: NodeJS.Timeout | undefined;
  #sweeping: Promise<SweepResult> | undefined;
  #closed = false;
  readonly #snapshots: DockerSnapshots;

  private constructor(options: DockerBackendOptions, stateRoot: string, names: TaskNames, ownContainer: string | undefined) {
    this.#names = names;
    this.#options = options;
    this.#logger = options.logger.child({ backend: 'docker' });
    this.#docker = new Dockerode(options.socketPath ? { socketPath: options.socketPath } : undefined);
    this.#daemon = describeDaemon(options.socketPath);
    this.identity = newExecutorIdentity(stateRoot, options.executorId, ownContainer);
    this.#labels = executorLabels(this.identity);
    this.#memory = engineMemoryAdmission({
      docker: this.#docker,
      daemon: this.#daemon,
      ownExecutor: this.identity.id,
      perContainerMiB: options.memoryMiB ?? 5120,
      factor: options.memoryOvercommit ?? DEFAULT_MEMORY_OVERCOMMIT,
      scope: options.memoryScope ?? 'executor',
      held: () => this.#environments.size + (this.#pool?.readyCount ?? 0),
    });
    this.#root = path.join(stateRoot, 'docker');
    this.#persistent = options.persistent ?? true;
    this.#role = options.role ?? 'task';
    this.#staleMs = options.executorStaleMs ?? HEARTBEAT_STALE_MS;
    this.#heartbeat = new Heartbeat(stateRoot, this.identity.id, heartbeatIntervalMs(this.#staleMs));
    this.#probes = hostProbes(stateRoot, async (id) => {
      try {
        return (await this.#docker.getContainer(id).inspect()).State.Status;
      } catch (err) {
        return isNotFound(err) ? 'gone' : undefined;
      }
    });
    this.#uids = new TaskUids({ docker: this.#docker, daemon: this.#daemon, configured: options.taskUids ?? '', logger: this.#logger });
    this.#factory = new ContainerFactory(
      containerFactoryOptions(options, {
        docker: this.#docker,
        daemon: this.#daemon,
        logger: this.#logger,
        persistent: this.#persistent,
        names,
        labels: () => this.#labels,
        isolation: () => this.#isolation,
        resolveNameConflict: (name) => resolveNameConflict(this.#executorContext(), name),
      }),
    );
    const factoryOptions = this.#factory.options;
    this.#snapshots = new DockerSnapshots({
      docker: this.#docker,
      daemon: this.#daemon,
      logger: this.#logger,
      ownerOf: (tenant) => names.snapshotOwner(tenant),
      baseImage: options.image,
      workspaceDir: factoryOptions.workspaceDir,
      homeDir: factoryOptions.homeDir,
      executorLabels: () => ({ ...this.#labels, [LABEL.created]: new Date().toISOString() }),
      // A read-only root has no changes of its own to miss.
      probeCommitVisibility: options.runtime === 'runsc' && !(options.readOnlyRoot ?? false),
    });
    this.#diskMeter = new DiskMeter({
      docker: this.#docker,
      limitMiB: factoryOptions.diskLimits.sizeMiB,
      parts: () => factoryOptions.diskLimits.state,
      volumeDirs: this.#persistent ? [factoryOptions.workspaceDir, factoryOptions.homeDir] : [],
      cacheMs: options.diskMeterCacheMs ?? 5000,
    });
    this.#poolContainers = new PoolContainers({
      factory: this.#factory,
      uids: this.#uids,
      root: this.#root,
      labels: () => this.#labels,
      logger: this.#logger,
      isolation: () => this.#isolation,
      pool: () => this.#pool,
      leftovers: this.#leftovers,
      memory: this.#memory,
      memoryMiB: options.memoryMiB ?? 5120,
      poolBudgetMiB: options.warmPoolAdaptive?.memoryMiB ?? 0,
    });
    // A pool container is renamed to its task's name when claimed, but its labels cannot change: task containers only.
    const poolSize = this.#role === 'task' ? (options.warmPool ?? 0) : 0;
    if (poolSize > 0 && this.#persistent) {
      this.#logger.warn(
        { warmPool: poolSize },
        'docker.warm_pool is not used with terminal.container_persistent: true: a pool container is started before ' +
          "its task is known, and the task's named volumes cannot be mounted into a running container",
      );
    }
    this.#pool =
      poolSize > 0 && !this.#persistent
        ? new WarmPool({
            size: poolSize,
            create: () => this.#poolContainers.start(),
            logger: this.#logger,
            ...(options.warmPoolAdaptive && options.warmPoolAdaptive.max > poolSize
              ? { adaptive: options.warmPoolAdaptive, mayGrow: (ready) => this.#poolContainers.mayGrow(ready) }
              : {}),
          })
        : undefined;
  }

  /**
   * Creates the backend: prepares the state root, starts the heartbeat,
   * sweeps orphans and starts filling the warm pool. A Docker daemon that
   * does not answer yet is not fatal: calls fail with UNAVAILABLE until it
   * does, and the sweep and pool catch up then.
   */
  static async start(options: DockerBackendOptions): Promise<DockerBackend> {
    const stateRoot = path.resolve(options.stateRoot || defaultStateRoot());
    await ensureRoot(stateRoot, path.join(stateRoot, 'docker'));
    const names = await TaskNames.load(options.nameKeyFile || path.join(stateRoot, 'docker', DEFAULT_NAME_KEY_FILE));
    const backend = new DockerBackend(options, stateRoot, names, await ownContainerOn(options.socketPath));
    if ((options.network ?? 'isolated') === 'isolated') {
      // Refuses to start where the rules cannot go in: never a silent fall back to the plain bridge.
      backend.#isolation = await NetworkIsolation.install({
        docker: backend.#docker,
        daemon: backend.#daemon,
        operator: { egress: options.egress ?? 'public-only', egressAllow: options.egressAllow ?? [] },
        tenants: options.tenantNetworks ?? {},
        extraDns: backend.#factory.options.extra?.dns ?? [],
        logger: backend.#logger,
      });
    }
    await backend.#heartbeat.start();
    try {
      await backend.#docker.ping();
      await backend.sweep();
    } catch (err) {
      backend.#logger.warn(
        { err: dockerError(err, 'starting the docker backend', backend.#daemon).message },
        'Docker is not answering; docker tasks fail with UNAVAILABLE until it does',
      );
    }
    // A docker.task_uids this host cannot use stops the executor here (if the daemon answers now), not at a task.
    const unusable = await backend.#uids.range().then(
      () => undefined,
      (err: unknown) => (err instanceof UnavailableError ? undefined : err),
    );
    if (unusable) {
      await backend.close();
      throw unusable;
    }
    backend.#pool?.start();
    // The label value on this executor's containers: how an operator tells whose a sandbox is.
    backend.#logger.info({ [LABEL.executor]: backend.identity.id, stateRoot }, 'docker backend ready');
    const interval = options.sweepIntervalMs ?? 60_000;
    if (interval > 0) {
      backend.#sweepTimer = setInterval(() => {
        backend.sweep().catch((err: unknown) => backend.#logger.debug({ err }, 'orphan sweep failed'));
      }, interval);
      backend.#sweepTimer.unref();
    }
    return backend;
  }

  get capabilities(): BackendCapabilities {
    // Host paths bound in (terminal.docker_volumes, -v in docker_extra_args) are host access: approval must not be skipped then.
    const hostBinds = (this.#options.volumes ?? []).length + (this.#factory.options.extra?.binds.length ?? 0);
    return {
      name: 'docker',
      pty: true,
      hostFilesystem: hostBinds > 0,
      sharesRpcDir: true,
      lifecycle: dockerLifecycle({ runtime: this.#options.runtime ?? '', persistent: this.#persistent, readOnlyRoot: this.#options.readOnlyRoot ?? false, role: this.#role }),
    };
  }

  async snapshot(key: TaskKey, _env: BackendEnvironment, snapshot: Omit<BackendSnapshot, 'sizeBytes' | 'includesProcesses'>): Promise<BackendSnapshot> {
    const environment = this.#environments.get(taskKeyString(key));
    if (!environment) throw new FailedPreconditionError(`task ${taskKeyString(key)} has no container on this executor to snapshot`);
    return this.#snapshots.take(environment.container.id, this.#persistent ? this.#names.volumes(key) : undefined, snapshot);
  }

  listSnapshots(tenant: string): Promise<BackendSnapshot[]> {
    return this.#snapshots.list(tenant);
  }

  deleteSnapshot(tenant: string, id: string): Promise<boolean> {
    return this.#snapshots.delete(tenant, id);
  }

  /** The Docker client (tests inspect containers with it). */
  get docker(): Dockerode {
    return this.#docker;
  }

  /** The disk Berth measures for task `key` where Docker cannot enforce terminal.container_disk (`berth doctor`). */
  async diskUsage(key: TaskKey): Promise<DiskUsage | undefined> {
    const environment = this.#environments.get(taskKeyString(key));
    if (!environment) return undefined;
    const { id, identity } = environment.container;
    return this.#diskMeter.usage(id, `${identity.uid}:${identity.gid}`);
  }

  /** Whether terminal.container_disk holds for the writable layer and the named volumes (known after the first create). */
  get diskLimits(): Readonly<Record<DiskLimitPart, DiskLimitState>> {
    return this.#factory.options.diskLimits.state;
  }

  warmPoolStatus(): { ready: number; target: number } {
    return { ready: this.#pool?.readyCount ?? 0, target: this.#pool?.target ?? 0 };
  }

  get pool(): WarmPool | undefined {
    return this.#pool;
  }

  /** docker.runtime ('' for the daemon's default). */
  get runtime(): string {
    return this.#options.runtime ?? '';
  }

  /** The installed rules and networks of `docker.network: isolated` (undefined under none or bridge). */
  get networkIsolation(): NetworkIsolation | undefined {
    return this.#isolation;
  }

  /**
   * Removes a released task's persistent volumes (they outlive the task by
   * design; `berth doctor` leaves nothing behind). Missing ones are fine.
   */
  async removeTaskVolumes(key: TaskKey): Promise<void> {
    if (this.#persistent) await removeVolumes(this.#docker, this.#daemon, Object.values(this.#names.volumes(key)));
  }

  diagnose(key: TaskKey, phase: DiagnosisPhase): Promise<DiagnosticFinding[]> {
    return diagnoseDocker(this, key, phase);
  }

  /** The name of a task's container (tests and `berth doctor` inspect it). */
  containerNameOf(key: TaskKey): string {
    return this.#names.container(key, this.#role);
  }

  /** The names of a task's persistent volumes, whether or not they exist. */
  volumeNamesOf(key: TaskKey): { readonly workspace: string; readonly home: string } {
    return this.#names.volumes(key);
  }

  /** The live environment of a task, if this backend has one. */
  environmentOf(key: TaskKey): DockerEnvironment | undefined {
    return this.#environments.get(taskKeyString(key));
  }

  /** Removes containers of executors that are gone, and retries our own failed removals. */
  sweep(): Promise<SweepResult> {
    this.#sweeping ??= (async () => {
      for (const id of [...this.#leftovers]) {
        await removeContainer(this.#docker.getContainer(id), this.#daemon);
        this.#leftovers.delete(id);
      }
      const result = await sweepOrphans(this.#executorContext());
      // After the containers: a gone executor's snapshot helper holds its intermediate image.
      await sweepSnapshotLeftovers(this.#docker, this.#logger).catch((err: unknown) =>
        this.#logger.warn({ err }, 'orphan sweep: looking for snapshot leftovers failed'),
      );
      return result;
    })().finally(() => {
      this.#sweeping = undefined;
    });
    return this.#sweeping;
  }

  /** docker.memory_overcommit's budget now (`berth doctor`); undefined when it is off or the host's memory is unknown. */
  memoryBudget(): Promise<MemoryBudget | undefined> {
    return this.#memory.budget();
  }

  async createEnvironment(key: TaskKey, options?: CreateEnvironmentOptions): Promise<BackendEnvironment> {
    if (this.#closed) throw new UnavailableError('the docker backend is shutting down');
    const id = taskKeyString(key);
    if (this.#environments.has(id)) {
      throw new FailedPreconditionError(`an environment for task ${id} already exists on this executor`);
    }
    const admitted = await stageSpan('memory_admission', () => this.#memory.admit());
    try {
      const image = options?.fromSnapshot ? await this.#snapshots.imageFor(options.fromSnapshot) : undefined;
      return await this.#createAdmitted(key, id, image);
    } finally {
      admitted();
    }
  }

  /** `image`: a fork's snapshot image (its volumes are filled from it: they must be new). */
  async #createAdmitted(key: TaskKey, id: string, image?: string): Promise<BackendEnvironment> {
    const name = this.#names.container(key, this.#role);
    const logger = this.#logger.child({ tenant: key.tenant, task: key.taskId, container: name });
    const volumes = this.#persistent ? this.#names.volumes(key) : undefined;
    const volumeLabels = { [LABEL.task]: key.taskId, [LABEL.tenant]: key.tenant };
    const started = Date.now();
    // Volumes that already exist come from an earlier environment of this task (here, or on an executor drained or lost).
    const workspaceLabels = volumes ? await labelsOfVolume(this.#docker, this.#daemon, volumes.workspace) : undefined;
    const resumed = this.#role === 'task' && workspaceLabels !== undefined;
    if (image !== undefined && resumed) {
      throw new FailedPreconditionError(
        `task '${key.taskId}' still has the volumes of an earlier environment; fork into a new task id (EndTask does not remove them)`,
      );
    }
    let container = image === undefined ? await this.#poolContainers.claim(key, name, logger) : undefined;
    const fromPool = container !== undefined;
    container ??= await startTaskContainer(
      { factory: this.#factory, uids: this.#uids, names: this.#names, root: this.#root, role: this.#role, labels: this.#labels },
      { key, name, logger, ...(volumes ? { volumes, volumeLabels } : {}), recordedUid: workspaceLabels?.[LABEL.uid], ...(image !== undefined ? { image } : {}) },
    );
    const hostDir = container.hostDir;
    const uid = container.identity.uid;
    const environment = new DockerEnvironment(container, {
      key,
      ...(container.preparedSnapshot !== undefined ? { preparedSnapshot: container.preparedSnapshot } : {}),
      containerName: name,
      factory: this.#factory,
      labels: () => taskLabels(key, this.#labels, hostDir, new Date(), this.#role),
      ...(volumes ? { persistentVolumes: volumes, volumeLabels } : {}),
      ...(image !== undefined ? { image } : {}),
      initialCwd: this.#factory.options.workspaceDir,
      homeDir: this.#factory.options.homeDir,
      killGraceMs: this.#options.killGraceMs ?? 1000,
      memoryMiB: this.#factory.options.memoryMiB,
      pidsLimit: this.#factory.options.pidsLimit,
      logger,
      ownsHostDir: true,
      onDisposed: () => {
        this.#environments.delete(id);
        this.#uids.release(uid);
      },
      onRemoveFailed: (containerId) => this.#leftovers.add(containerId),
      onReplaced: () => this.#options.onContainerStart?.(this.#role, 'replacement'),
      heldByAnother: (containerName, ownId) => nameHeldByAnother(this.#executorContext(), containerName, ownId),
      diskMeter: this.#diskMeter,
      ...(this.#options.diskCheckIntervalMs !== undefined ? { diskCheckIntervalMs: this.#options.diskCheckIntervalMs } : {}),
    });
    this.#environments.set(id, environment);
    await stageSpan('environment_init', () => environment.init()).catch(() => undefined);
    if (resumed) {
      environment.addNotice(
        `This task's environment was started anew (its previous one was released: idle, or its executor was drained or lost); ` +
          `files in ${this.#factory.options.workspaceDir} and ${this.#factory.options.homeDir} were kept in the task's volumes, ` +
          'but variables, the working directory and background processes were not.',
      );
    }
    logger.info(
      { containerId: container.id.slice(0, 12), channel: container.channel.kind, fromPool, ms: Date.now() - started },
      this.#role === 'code' ? 'execute_code code container ready' : 'task container ready',
    );
    this.#options.onContainerStart?.(this.#role, fromPool ? 'warm' : 'cold');
    return environment;
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#sweepTimer);
    await this.#pool?.close();
    await Promise.all([...this.#environments.values()].map((e) => e.dispose()));
    await this.#sweeping?.catch(() => undefined);
    for (const id of this.#leftovers) {
      await removeContainer(this.#docker.getContainer(id), this.#daemon).catch(() => undefined);
    }
    await this.#isolation?.close().catch((err: unknown) => this.#logger.warn({ err }, 'removing network isolation rules failed'));
    await this.#heartbeat.stop();
  }

  /** This executor among the others on the engine (for the sweep and name conflicts). */
  #executorContext(): NameConflictContext {
    return {
      docker: this.#docker,
      daemon: this.#daemon,
      identity: this.identity,
      probes: this.#probes,
      staleMs: this.#staleMs,
      logger: this.#logger,
    };
  }
}
