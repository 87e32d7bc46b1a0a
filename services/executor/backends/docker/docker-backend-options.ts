/** What a docker backend is started with: the executor's config as DockerBackend.start takes it. */
import type { EgressMode } from '../../../common/config.js';
import type { Logger } from '../../../common/logging.js';
import type { ContainerStartSink } from '../../backend.js';
import type { ContainerRole } from './container-spec.js';
import type { DiskLimitMode } from './disk-limits.js';
import type { TenantNetworkOverride } from './network-policy.js';

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
  /** How long a new container's agent has to connect, from its start; default 30 s. */
  readonly agentConnectTimeoutMs?: number;
  /** docker.start_concurrency: containers created and started at once; 0 or unset, as many as the Docker host has CPUs. */
  readonly startConcurrency?: number;
  /** The agent's archive; default: this installation's (findAgentScript). */
  readonly agentScriptPath?: string;
  /**
   * docker.executor_stale_ms: how old another executor's heartbeat may be before it counts as gone (stopped,
   * hung, or killed in another pid namespace) and its tasks' containers may be taken over; its own heartbeat
   * is touched every fifth of this. Default 15 s (see executor-identity.ts).
   */
  readonly executorStaleMs?: number;
  /** Interval of the orphan sweep after the one at start; 0 disables it. Default 60 s. */
  readonly sweepIntervalMs?: number;
  /**
   * docker.name_key_file: the executor's secret that container, volume and host directory names are keyed hashes
   * under (see task-names.ts); empty or absent: `<stateRoot>/docker/name-key`, made on the first start.
   */
  readonly nameKeyFile?: string;
  /**
   * docker.memory_overcommit: the memory limits of every Berth sandbox on the engine (this executor's and other
   * executors') add up to at most the Docker host's memory (or the executor's cgroup limit if lower) times this;
   * 0: no bound. Default 1.5 (see memory-admission.ts).
   */
  readonly memoryOvercommit?: number;
  /** docker.memory_scope: 'executor' (default) counts only this executor's sandboxes, 'engine' every Berth sandbox on the engine. */
  readonly memoryScope?: 'engine' | 'executor';
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
