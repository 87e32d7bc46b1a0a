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
import { chmod, lstat, mkdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import Dockerode from 'dockerode';
import type { EgressMode } from '../../../common/config.js';
import { FailedPreconditionError, UnavailableError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import type {
  Backend,
  BackendCapabilities,
  BackendEnvironment,
  BackendSnapshot,
  ContainerStartSink,
  CreateEnvironmentOptions,
  DiagnosisPhase,
  DiagnosticFinding,
  TaskKey,
} from '../../backend.js';
import { taskKeyString } from '../../backend.js';
import { defaultStateRoot } from '../shared/state-root.js';
import { findAgentScript } from '../shared/agent/agent-script.js';

export { findAgentScript };
import {
  LABEL,
  buildSandboxEnv,
  parseVolumeSpec,
  poolLabels,
  taskLabels,
  type ContainerRole,
  type ExecutorLabels,
} from './container-spec.js';
import { DiskMeter, type DiskUsage } from './disk-meter.js';
import { DiskLimits, type DiskLimitMode, type DiskLimitState, type DiskLimitPart } from './disk-limits.js';
import { diagnoseDocker } from './docker-diagnosis.js';
import { DockerEnvironment, prepareShellSnapshot } from './docker-environment.js';
import { parseDockerExtraArgs } from './docker-extra-args.js';
import { describeDaemon, dockerError, isNotFound } from './docker-errors.js';
import {
  HEARTBEAT_STALE_MS,
  Heartbeat,
  executorLabels,
  hostProbes,
  judgeExecutor,
  newExecutorIdentity,
  ownContainerId,
  type ExecutorIdentity,
} from './executor-identity.js';
import { NetworkIsolation } from './network-isolation.js';
import type { TenantNetworkOverride } from './network-policy.js';
import { sweepOrphans, type SweepResult } from './orphan-sweep.js';
import { dockerLifecycle } from './docker-lifecycle.js';
import { DockerSnapshots, sweepSnapshotLeftovers } from './docker-snapshots.js';
import { ImageAccounts } from './image-accounts.js';
import { ContainerFactory } from './container-factory.js';
import { removeContainer, type SandboxContainer } from './sandbox-container.js';
import { TaskUids } from './task-uids.js';
import { DEFAULT_NAME_KEY_FILE, TaskNames } from './task-names.js';
import { DEFAULT_MEMORY_OVERCOMMIT, MemoryAdmission, otherSandboxesMiB, ownCgroupMemoryMiB, type MemoryBudget } from './memory-admission.js';
import { WarmPool } from './warm-pool.js';

export interface DockerBackendOptions {
  /** The sandbox image (terminal.docker_image). It must exist on the Docker host. */
  readonly image: string;
  /** Docker API socket; empty/undefined: DOCKER_HOST or /var/run/docker.sock. */
  readonly socketPath?: string;
  /** Root of Berth's state on this host; per-task directories live under `<stateRoot>/docker`. */
  readonly stateRoot?: string;
  /** docker.network; default isolated (see network-policy.ts). */
  readonly network?: 'none' | 'isolated' | 'bridge';
  /** docker.egress under isolated; default public-only. */
  readonly egress?: EgressMode;
  /** docker.egress_allow under isolated. */
  readonly egressAllow?: readonly string[];
  /** tenants[].network of the executor's own config, by tenant id (validated to narrow, never widen). */
  readonly tenantNetworks?: Readonly<Record<string, TenantNetworkOverride>>;
  /** OCI runtime ('' = Docker's default; 'runsc' = gVisor). */
  readonly runtime?: string;
  readonly readOnlyRoot?: boolean;
  /** Memory limit in MiB (terminal.container_memory); default 5120. */
  readonly memoryMiB?: number;
  /** CPU limit (terminal.container_cpu); default 1. */
  readonly cpus?: number;
  /** Process limit (terminal.container_pids); default 256. */
  readonly pidsLimit?: number;
  /** Disk limit in MiB (terminal.container_disk) for the writable layer and each named volume; default 51200. */
  readonly diskMiB?: number;
  /** docker.disk_limit: what to do where the daemon cannot apply `diskMiB` (see disk-limits.ts); default auto. */
  readonly diskLimit?: DiskLimitMode;
  /** How long Berth's measure of a task's disk (disk-meter.ts) is reused, ms; default 5000. */
  readonly diskMeterCacheMs?: number;
  /** How often the disk of a task with background processes is measured, ms; default 30000. */
  readonly diskCheckIntervalMs?: number;
  /** Keep /workspace and home in per-task named volumes (terminal.container_persistent); default true. */
  readonly persistent?: boolean;
  /** terminal.docker_env. */
  readonly dockerEnv?: Readonly<Record<string, string>>;
  /** terminal.docker_forward_env: names taken from `baseEnv`. */
  readonly forwardEnv?: readonly string[];
  readonly envPassthrough?: readonly string[];
  /** Source of forwarded variables; default process.env. */
  readonly baseEnv?: Readonly<Record<string, string | undefined>>;
  /** terminal.docker_volumes (`/host:/container[:ro]`). */
  readonly volumes?: readonly string[];
  /** terminal.docker_extra_args: `docker run` flags, translated to create options (see docker-extra-args.ts). */
  readonly extraArgs?: readonly string[];
  /** docker.warm_pool: started containers kept ready. */
  readonly warmPool?: number;
  /** docker.warm_pool_max, warm_pool_window_s (ms here) and warm_pool_memory_mb: the adaptive pool; max 0: fixed. */
  readonly warmPoolAdaptive?: { readonly max: number; readonly windowMs: number; readonly memoryMiB: number };
  /**
   * docker.task_uids: `FIRST-LAST`, the uids (and gids) tasks' commands run as, one per task; empty or absent:
   * 1900000000-1916777215, or 10000-65533 under a daemon that remaps ids (see task-uids.ts).
   */
  readonly taskUids?: string;
  readonly workspaceDir?: string;
  readonly homeDir?: string;
  /** Between SIGTERM and SIGKILL of a command's process group; default 1000 ms. */
  readonly killGraceMs?: number;
  /** How long a new container's agent has to connect; default 30 s. */
  readonly agentConnectTimeoutMs?: number;
  /** The agent's archive; default: this installation's (findAgentScript). */
  readonly agentScriptPath?: string;
  /** Interval of the orphan sweep after the one at start; 0 disables it. Default 60 s. */
  readonly sweepIntervalMs?: number;
  /**
   * docker.name_key_file: the executor's secret that container, volume and host directory names are keyed hashes
   * under (see task-names.ts); empty or absent: `<stateRoot>/docker/name-key`, made on the first start.
   */
  readonly nameKeyFile?: string;
  /**
   * docker.memory_overcommit: the memory limits of this executor's containers add up to at most the Docker host's memory
   * (or the executor's cgroup limit if lower) times this; 0: no bound. Default 1.5 (see memory-admission.ts).
   */
  readonly memoryOvercommit?: number;
  /** Fixed executor id (tests); default random. */
  readonly executorId?: string;
  /**
   * `code`: the containers are execute_code's per-task code containers for a
   * backend without a shared directory (see code-containers.ts): named
   * `berth-code-<hash>`, labelled `berth.role=code`, host directories under
   * `<stateRoot>/docker/code`, and no warm pool. Default `task`.
   */
  readonly role?: ContainerRole;
  /** Told each time a container is made ready for a task (metrics). */
  readonly onContainerStart?: ContainerStartSink;
  readonly logger: Logger;
}

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
  readonly #probes: ReturnType<typeof hostProbes>;
  readonly #environments = new Map<string, DockerEnvironment>();
  readonly #pool: WarmPool | undefined;
  readonly #uids: TaskUids;
  readonly #names: TaskNames;
  readonly #memory: MemoryAdmission;
  readonly #diskMeter: DiskMeter;
  #hostMemory: Promise<number | undefined> | undefined;
  #isolation: NetworkIsolation | undefined;
  /** Containers of ours whose removal failed (daemon down); retried by each sweep. */
  readonly #leftovers = new Set<string>();
  #sweepTimer: NodeJS.Timeout | undefined;
  #sweeping: Promise<SweepResult> | undefined;
  #closed = false;
  readonly #snapshots: DockerSnapshots;

  private constructor(options: DockerBackendOptions, stateRoot: string, names: TaskNames, ownContainer: string | undefined) {
    this.#names = names;
    this.#memory = new MemoryAdmission({
      perContainerMiB: options.memoryMiB ?? 5120,
      factor: options.memoryOvercommit ?? DEFAULT_MEMORY_OVERCOMMIT,
      hostMiB: () => this.#hostMemoryMiB(),
      cgroupMiB: () => ownCgroupMemoryMiB(),
      held: () => this.#environments.size + (this.#pool?.readyCount ?? 0),
      others: () =>
        otherSandboxesMiB(this.#docker, this.identity.id, options.memoryMiB ?? 5120).catch((err: unknown) => {
          throw dockerError(err, "counting the engine's sandboxes", this.#daemon);
        }),
    });
    this.#options = options;
    this.#logger = options.logger.child({ backend: 'docker' });
    this.#docker = new Dockerode(options.socketPath ? { socketPath: options.socketPath } : undefined);
    this.#daemon = describeDaemon(options.socketPath);
    this.identity = newExecutorIdentity(stateRoot, options.executorId, ownContainer);
    this.#labels = executorLabels(this.identity);
    this.#root = path.join(stateRoot, 'docker');
    this.#persistent = options.persistent ?? true;
    this.#role = options.role ?? 'task';
    this.#heartbeat = new Heartbeat(stateRoot, this.identity.id);
    this.#probes = hostProbes(stateRoot, async (id) => {
      try {
        return (await this.#docker.getContainer(id).inspect()).State.Status;
      } catch (err) {
        return isNotFound(err) ? 'gone' : undefined;
      }
    });
    this.#uids = new TaskUids({ docker: this.#docker, daemon: this.#daemon, configured: options.taskUids ?? '', logger: this.#logger });
    const { env, refused } = buildSandboxEnv({
      dockerEnv: options.dockerEnv ?? {},
      forwardEnv: options.forwardEnv ?? [],
      baseEnv: options.baseEnv ?? process.env,
      envPassthrough: options.envPassthrough ?? [],
      homeDir: options.homeDir ?? '/home/sandbox',
    });
    if (refused.length > 0) {
      this.#logger.warn(
        { names: refused },
        'terminal.docker_forward_env: not forwarding variables that look like provider secrets (list them in env_passthrough to allow)',
      );
    }
    // A flag it cannot take is a config error: the executor does not start with part of its config dropped.
    const extra = parseDockerExtraArgs(options.extraArgs ?? []);
    for (const note of extra.weakening) {
      this.#logger.warn({ setting: 'terminal.docker_extra_args' }, `terminal.docker_extra_args weakens the sandbox: ${note}`);
    }
    this.#factory = new ContainerFactory({
      docker: this.#docker,
      daemon: this.#daemon,
      image: options.image,
      networkFor: async (tenant, renew) => {
        const mode = options.network ?? 'isolated';
        if (mode !== 'isolated') return mode;
        if (!this.#isolation) throw new UnavailableError('network isolation is not installed (the backend is not started)');
        return this.#isolation.networkFor(tenant, renew);
      },
      runtime: options.runtime ?? '',
      readOnlyRoot: options.readOnlyRoot ?? false,
      memoryMiB: options.memoryMiB ?? 5120,
      cpus: options.cpus ?? 1,
      pidsLimit: options.pidsLimit ?? 256,
      diskLimits: new DiskLimits({
        mode: options.diskLimit ?? 'auto',
        sizeMiB: options.diskMiB ?? 51_200,
        volumes: this.#persistent,
        daemon: this.#daemon,
        logger: this.#logger,
      }),
      env,
      extra: extra.options,
      binds: (options.volumes ?? []).map((spec) => parseVolumeSpec(spec)),
      workspaceDir: options.workspaceDir ?? '/workspace',
      homeDir: options.homeDir ?? '/home/sandbox',
      agentScriptPath: options.agentScriptPath ?? findAgentScript(),
      accounts: new ImageAccounts({
        docker: this.#docker,
        daemon: this.#daemon,
        labels: () => ({ ...this.#labels, [LABEL.created]: new Date().toISOString() }),
      }),
      agentConnectTimeoutMs: options.agentConnectTimeoutMs ?? 30_000,
      logger: this.#logger,
      resolveNameConflict: (name) => this.#resolveNameConflict(name),
      cgroupParent: (tenant, driver) => names.cgroupParent(tenant, driver),
      ...((options.network ?? 'isolated') === 'isolated'
        ? {
            embeddedDns: {
              resolvers: () => this.#isolation?.resolvers ?? [],
              close: (pid: number) => NetworkIsolation.closeEmbeddedDns(pid),
            },
          }
        : {}),
    });
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
    });
    this.#diskMeter = new DiskMeter({
      docker: this.#docker,
      limitMiB: factoryOptions.diskLimits.sizeMiB,
      parts: () => factoryOptions.diskLimits.state,
      volumeDirs: this.#persistent ? [factoryOptions.workspaceDir, factoryOptions.homeDir] : [],
      cacheMs: options.diskMeterCacheMs ?? 5000,
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
            create: () => this.#startPoolContainer(),
            logger: this.#logger,
            ...(options.warmPoolAdaptive && options.warmPoolAdaptive.max > poolSize
              ? { adaptive: options.warmPoolAdaptive, mayGrow: (ready) => this.#poolMayGrow(ready) }
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

  /** The installed rules and networks of `docker.network: isolated` (undefined under none or bridge). */
  get networkIsolation(): NetworkIsolation | undefined {
    return this.#isolation;
  }

  /**
   * Removes a released task's persistent volumes (they outlive the task by
   * design; `berth doctor` leaves nothing behind). Missing ones are fine.
   */
  async removeTaskVolumes(key: TaskKey): Promise<void> {
    if (!this.#persistent) return;
    const { workspace, home } = this.#names.volumes(key);
    for (const name of [workspace, home]) {
      try {
        await this.#docker.getVolume(name).remove();
      } catch (err) {
        if (!isNotFound(err)) throw dockerError(err, `removing volume ${name}`, this.#daemon);
      }
    }
  }

  /** A volume's labels, or undefined when it does not exist. */
  async #volumeLabels(name: string): Promise<Record<string, string> | undefined> {
    try {
      return (await this.#docker.getVolume(name).inspect()).Labels ?? {};
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw dockerError(err, `inspecting volume ${name}`, this.#daemon);
    }
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
      const result = await sweepOrphans({
        docker: this.#docker,
        daemon: this.#daemon,
        identity: this.identity,
        probes: this.#probes,
        logger: this.#logger,
      });
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

  /** The Docker host's memory (`docker info` MemTotal), asked once; a failed answer is asked again next time. */
  #hostMemoryMiB(): Promise<number | undefined> {
    this.#hostMemory ??= this.#docker.info().then(
      (info: { MemTotal?: number }) => (info.MemTotal ? Math.floor(info.MemTotal / (1024 * 1024)) : undefined),
      (err: unknown) => {
        this.#hostMemory = undefined;
        throw dockerError(err, 'asking for the host\'s memory', this.#daemon);
      },
    );
    return this.#hostMemory;
  }

  async createEnvironment(key: TaskKey, options?: CreateEnvironmentOptions): Promise<BackendEnvironment> {
    if (this.#closed) throw new UnavailableError('the docker backend is shutting down');
    const id = taskKeyString(key);
    if (this.#environments.has(id)) {
      throw new FailedPreconditionError(`an environment for task ${id} already exists on this executor`);
    }
    const admitted = await this.#memory.admit();
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
    const workspaceLabels = volumes ? await this.#volumeLabels(volumes.workspace) : undefined;
    const resumed = this.#role === 'task' && workspaceLabels !== undefined;
    if (image !== undefined && resumed) {
      throw new FailedPreconditionError(
        `task '${key.taskId}' still has the volumes of an earlier environment; fork into a new task id (EndTask does not remove them)`,
      );
    }
    let container = image === undefined ? await this.#claimFromPool(key, name, logger) : undefined;
    const fromPool = container !== undefined;
    if (!container) {
      await this.#factory.ensureImage();
      const hostDir = path.join(this.#root, this.#role === 'code' ? 'code' : 'tasks', this.#names.task(key));
      // A directory left by a dead executor must not leak its snapshot into the new task.
      await rm(hostDir, { recursive: true, force: true });
      // The uid the task's volumes record, so their files stay its own; else a free one.
      const owner = { containerName: name, ...(volumes ? { volumeNames: [volumes.workspace, volumes.home] } : {}) };
      const start = () =>
        this.#uids.startWith(owner, workspaceLabels?.[LABEL.uid], (identity) =>
          this.#factory.start({
            name,
            hostDir,
            identity,
            labels: taskLabels(key, this.#labels, hostDir, new Date(), this.#role),
            tenant: key.tenant,
            ...(volumes ? { persistentVolumes: volumes, volumeLabels } : {}),
            ...(image !== undefined ? { image } : {}),
          }),
        );
      // Another executor's orphan sweep may remove this path (its dead container of the same task used it)
      // between our mkdir and Docker's create: start once more, which makes the directory again.
      container = await start().catch((err: unknown) => {
        if (!/bind source path does not exist/.test(String((err as Error).message))) throw err;
        logger.warn({ hostDir }, 'the task directory vanished before its container was created; starting again');
        return start();
      });
    }
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
      diskMeter: this.#diskMeter,
      ...(this.#options.diskCheckIntervalMs !== undefined ? { diskCheckIntervalMs: this.#options.diskCheckIntervalMs } : {}),
    });
    this.#environments.set(id, environment);
    await environment.init().catch(() => undefined);
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

  /**
   * Whether the adaptive pool may start one more container beyond
   * `warm_pool`: within its memory budget, and leaving the memory admission
   * room for one more task beside it.
   */
  async #poolMayGrow(ready: number): Promise<boolean> {
    const per = this.#options.memoryMiB ?? 5120;
    const budgetMiB = this.#options.warmPoolAdaptive?.memoryMiB ?? 0;
    if (budgetMiB > 0 && (ready + 1) * per > budgetMiB) return false;
    const admission = await this.#memory.budget().catch(() => undefined);
    return admission === undefined || admission.heldMiB + 2 * per <= admission.limitMiB;
  }

  async #startPoolContainer(): Promise<SandboxContainer> {
    await this.#factory.ensureImage();
    const poolId = `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`;
    const hostDir = path.join(this.#root, 'pool', poolId);
    const name = `berth-pool-${poolId}`;
    // The claiming task takes the container's uid with it (pool containers are never persistent).
    const container = await this.#uids.startWith({ containerName: name }, undefined, (identity) =>
      this.#factory.start({ name, hostDir, identity, labels: poolLabels(this.#labels, hostDir, new Date()) }),
    );
    // The login shell's snapshot depends only on the image and the container's
    // environment, which every task of this executor shares: write it now, not
    // on the claiming task's first call.
    container.preparedSnapshot = await prepareShellSnapshot(container.channel, this.#factory.options.workspaceDir).catch(
      (err: unknown) => {
        this.#logger.warn({ err, container: container.name }, 'warm pool: preparing the shell snapshot failed; the claiming task runs the login shell itself');
        return undefined;
      },
    );
    return container;
  }

  /**
   * Binds a ready pool container to the task: renamed to the task's
   * container name, with the task written to task.json in its /run/berth.
   */
  async #claimFromPool(key: TaskKey, name: string, logger: Logger): Promise<SandboxContainer | undefined> {
    // Pool containers sit on the operator's network; a tenant with a narrower policy needs its own.
    if (this.#isolation && this.#isolation.policyIdOf(key.tenant) !== this.#isolation.policyIdOf(undefined)) return undefined;
    const container = this.#pool?.take();
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
      await container.remove().catch(() => this.#leftovers.add(container.id));
      this.#uids.release(container.identity.uid);
      await rm(container.hostDir, { recursive: true, force: true }).catch(() => undefined);
      return undefined;
    }
  }

  /**
   * The task's container name is taken. A leftover of ours or of an
   * executor that is gone is removed; a live executor's container is not
   * touched (the task is being served there).
   */
  async #resolveNameConflict(name: string): Promise<void> {
    let info: Dockerode.ContainerInspectInfo;
    try {
      info = await this.#docker.getContainer(name).inspect();
    } catch (err) {
      if (isNotFound(err)) return;
      throw dockerError(err, `inspecting container ${name}`, this.#daemon);
    }
    const labels = info.Config.Labels ?? {};
    const executorContainer = labels[LABEL.executorContainer];
    await this.#probes.refresh(executorContainer ? [executorContainer] : []);
    const liveness = judgeExecutor(labels, this.identity, this.#probes);
    if (liveness === 'self' || liveness === 'gone') {
      this.#logger.info({ container: name, liveness }, 'removing a leftover container of the same task');
      await removeContainer(this.#docker.getContainer(info.Id), this.#daemon);
      return;
    }
    if (liveness === 'alive') {
      // Often an executor that was just killed: its heartbeat goes stale soon, and a retry then succeeds.
      throw new UnavailableError(
        `container ${name} for this task belongs to executor ${labels[LABEL.executor]}, which still counts as running ` +
          `(an executor killed moments ago counts as gone once its heartbeat is ${HEARTBEAT_STALE_MS / 1000} s old); retry shortly`,
      );
    }
    throw new FailedPreconditionError(
      `container ${name} for this task already exists and belongs to something other than Berth; refusing to replace it`,
    );
  }
}

/**
 * The container this executor runs in, when the task containers' daemon
 * runs it too (it answers for that id, running): its containers are then
 * labelled with it, so another executor knows at once when it has exited.
 */
async function ownContainerOn(socketPath: string | undefined): Promise<string | undefined> {
  const id = ownContainerId();
  if (!id) return undefined;
  try {
    const info = await new Dockerode(socketPath ? { socketPath } : undefined).getContainer(id).inspect();
    return info.State.Running && info.Id === id ? id : undefined;
  } catch {
    return undefined;
  }
}

/** The state root holds every task's directory: ours and private, not a planted symlink. */
async function ensureRoot(stateRoot: string, dockerRoot: string): Promise<void> {
  await mkdir(stateRoot, { recursive: true, mode: 0o700 });
  const info = await lstat(stateRoot);
  const uid = typeof process.getuid === 'function' ? process.getuid() : info.uid;
  if (!info.isDirectory() || info.uid !== uid) {
    throw new FailedPreconditionError(
      `state root ${stateRoot} must be a directory owned by uid ${uid}; refusing to use it`,
    );
  }
  if ((info.mode & 0o077) !== 0) await chmod(stateRoot, 0o700);
  await mkdir(dockerRoot, { recursive: true, mode: 0o700 });
}
