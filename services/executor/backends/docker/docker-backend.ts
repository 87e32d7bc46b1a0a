/**
 * The `docker` backend: one long-lived, hardened container per task,
 * created on first use, with commands run by an exec agent inside it (see
 * sandbox-image/agent/berth_agent.py), or by `docker exec` for images that
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
import type { Backend, BackendCapabilities, BackendEnvironment, TaskKey } from '../../backend.js';
import type { ContainerStartSink } from '../../executor-metrics.js';
import { taskKeyString } from '../../backend.js';
import { defaultStateRoot } from '../shared/state-root.js';
import { findAgentScript } from '../shared/agent/agent-script.js';

export { findAgentScript };
import {
  LABEL,
  buildSandboxEnv,
  parseVolumeSpec,
  persistentVolumeNames,
  poolLabels,
  taskContainerName,
  taskHash,
  taskLabels,
  type ContainerRole,
  type ExecutorLabels,
} from './container-spec.js';
import { DiskLimits, type DiskLimitMode, type DiskLimitState, type DiskLimitPart } from './disk-limits.js';
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
  type ExecutorIdentity,
} from './executor-identity.js';
import { NetworkIsolation } from './network-isolation.js';
import type { TenantNetworkOverride } from './network-policy.js';
import { sweepOrphans, type SweepResult } from './orphan-sweep.js';
import { ContainerFactory, removeContainer, type SandboxContainer } from './sandbox-container.js';
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
  readonly workspaceDir?: string;
  readonly homeDir?: string;
  /** Between SIGTERM and SIGKILL of a command's process group; default 1000 ms. */
  readonly killGraceMs?: number;
  /** How long a new container's agent has to connect; default 30 s. */
  readonly agentConnectTimeoutMs?: number;
  /** berth_agent.py; default: sandbox-image/agent/berth_agent.py of this package. */
  readonly agentScriptPath?: string;
  /** Interval of the orphan sweep after the one at start; 0 disables it. Default 60 s. */
  readonly sweepIntervalMs?: number;
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
  #isolation: NetworkIsolation | undefined;
  /** Containers of ours whose removal failed (daemon down); retried by each sweep. */
  readonly #leftovers = new Set<string>();
  #sweepTimer: NodeJS.Timeout | undefined;
  #sweeping: Promise<SweepResult> | undefined;
  #closed = false;

  private constructor(options: DockerBackendOptions, stateRoot: string) {
    this.#options = options;
    this.#logger = options.logger.child({ backend: 'docker' });
    this.#docker = new Dockerode(options.socketPath ? { socketPath: options.socketPath } : undefined);
    this.#daemon = describeDaemon(options.socketPath);
    this.identity = newExecutorIdentity(stateRoot, options.executorId);
    this.#labels = executorLabels(this.identity);
    this.#root = path.join(stateRoot, 'docker');
    this.#persistent = options.persistent ?? true;
    this.#role = options.role ?? 'task';
    this.#heartbeat = new Heartbeat(stateRoot, this.identity.id);
    this.#probes = hostProbes(stateRoot);
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
      agentConnectTimeoutMs: options.agentConnectTimeoutMs ?? 30_000,
      logger: this.#logger,
      resolveNameConflict: (name) => this.#resolveNameConflict(name),
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
        ? new WarmPool({ size: poolSize, create: () => this.#startPoolContainer(), logger: this.#logger })
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
    const backend = new DockerBackend(options, stateRoot);
    await backend.#ensureRoot(stateRoot);
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
    return { name: 'docker', pty: true, hostFilesystem: hostBinds > 0, sharesRpcDir: true };
  }

  /** The Docker client (tests inspect containers with it). */
  get docker(): Dockerode {
    return this.#docker;
  }

  /** Whether terminal.container_disk holds for the writable layer and the named volumes (known after the first create). */
  get diskLimits(): Readonly<Record<DiskLimitPart, DiskLimitState>> {
    return this.#factory.options.diskLimits.state;
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
    const { workspace, home } = persistentVolumeNames(key);
    for (const name of [workspace, home]) {
      try {
        await this.#docker.getVolume(name).remove();
      } catch (err) {
        if (!isNotFound(err)) throw dockerError(err, `removing volume ${name}`, this.#daemon);
      }
    }
  }

  async #volumeExists(name: string): Promise<boolean> {
    try {
      await this.#docker.getVolume(name).inspect();
      return true;
    } catch (err) {
      if (isNotFound(err)) return false;
      throw dockerError(err, `inspecting volume ${name}`, this.#daemon);
    }
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
      return sweepOrphans({
        docker: this.#docker,
        daemon: this.#daemon,
        identity: this.identity,
        probes: this.#probes,
        logger: this.#logger,
      });
    })().finally(() => {
      this.#sweeping = undefined;
    });
    return this.#sweeping;
  }

  async createEnvironment(key: TaskKey): Promise<BackendEnvironment> {
    if (this.#closed) throw new UnavailableError('the docker backend is shutting down');
    const id = taskKeyString(key);
    if (this.#environments.has(id)) {
      throw new FailedPreconditionError(`an environment for task ${id} already exists on this executor`);
    }
    const name = taskContainerName(key, this.#role);
    const logger = this.#logger.child({ tenant: key.tenant, task: key.taskId, container: name });
    const volumes = this.#persistent ? persistentVolumeNames(key) : undefined;
    const volumeLabels = { [LABEL.task]: key.taskId, [LABEL.tenant]: key.tenant };
    const started = Date.now();
    // Volumes that already exist come from an earlier environment of this task (here, or on an executor drained or lost).
    const resumed = this.#role === 'task' && volumes !== undefined && (await this.#volumeExists(volumes.workspace));
    let container = await this.#claimFromPool(key, name, logger);
    const fromPool = container !== undefined;
    if (!container) {
      await this.#factory.ensureImage();
      const hostDir = path.join(this.#root, this.#role === 'code' ? 'code' : 'tasks', taskHash(key));
      // A directory left by a dead executor must not leak its snapshot into the new task.
      await rm(hostDir, { recursive: true, force: true });
      container = await this.#factory.start({
        name,
        hostDir,
        labels: taskLabels(key, this.#labels, hostDir, new Date(), this.#role),
        tenant: key.tenant,
        ...(volumes ? { persistentVolumes: volumes, volumeLabels } : {}),
      });
    }
    const hostDir = container.hostDir;
    const environment = new DockerEnvironment(container, {
      key,
      ...(container.preparedSnapshot !== undefined ? { preparedSnapshot: container.preparedSnapshot } : {}),
      containerName: name,
      factory: this.#factory,
      labels: () => taskLabels(key, this.#labels, hostDir, new Date(), this.#role),
      ...(volumes ? { persistentVolumes: volumes, volumeLabels } : {}),
      initialCwd: this.#factory.options.workspaceDir,
      homeDir: this.#factory.options.homeDir,
      killGraceMs: this.#options.killGraceMs ?? 1000,
      memoryMiB: this.#factory.options.memoryMiB,
      pidsLimit: this.#factory.options.pidsLimit,
      logger,
      ownsHostDir: true,
      onDisposed: () => this.#environments.delete(id),
      onRemoveFailed: (containerId) => this.#leftovers.add(containerId),
      onReplaced: () => this.#options.onContainerStart?.(this.#role, 'replacement'),
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

  async #startPoolContainer(): Promise<SandboxContainer> {
    await this.#factory.ensureImage();
    const poolId = `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`;
    const hostDir = path.join(this.#root, 'pool', poolId);
    const container = await this.#factory.start({
      name: `berth-pool-${poolId}`,
      hostDir,
      labels: poolLabels(this.#labels, hostDir, new Date()),
    });
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
    await this.#probes.refresh();
    const labels = info.Config.Labels ?? {};
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

  /** The state root holds every task's directory: ours and private, not a planted symlink. */
  async #ensureRoot(stateRoot: string): Promise<void> {
    await mkdir(stateRoot, { recursive: true, mode: 0o700 });
    const info = await lstat(stateRoot);
    const uid = typeof process.getuid === 'function' ? process.getuid() : info.uid;
    if (!info.isDirectory() || info.uid !== uid) {
      throw new FailedPreconditionError(
        `state root ${stateRoot} must be a directory owned by uid ${uid}; refusing to use it`,
      );
    }
    if ((info.mode & 0o077) !== 0) await chmod(stateRoot, 0o700);
    await mkdir(this.#root, { recursive: true, mode: 0o700 });
  }
}
