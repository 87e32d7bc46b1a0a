/**
 * The docker backend's options from config, for its task containers and for
 * execute_code's code containers beside the ssh and singularity backends.
 */
import type { BerthConfig } from '../../../common/config.js';
import type { Logger } from '../../../common/logging.js';
import type { ContainerStartSink } from '../../backend.js';
import type { DockerBackendOptions } from './docker-backend-options.js';

/**
 * The docker backend's options from `terminal.docker_*`, `terminal.container_*`
 * and `docker.*`: for the docker backend's task containers and for
 * execute_code's code containers beside the ssh and singularity backends.
 */
export function dockerOptionsFromConfig(
  config: BerthConfig,
  logger: Logger,
  onContainerStart?: ContainerStartSink,
): DockerBackendOptions {
  return {
    image: config.terminal.docker_image,
    ...(config.docker.socket_path ? { socketPath: config.docker.socket_path } : {}),
    ...(config.executor.state_root ? { stateRoot: config.executor.state_root } : {}),
    network: config.docker.network,
    egress: config.docker.egress,
    egressAllow: config.docker.egress_allow,
    // The executor learns each tenant's policy from its own config (the dispatcher's file, in deployments).
    tenantNetworks: Object.fromEntries(config.tenants.flatMap((t) => (t.network ? [[t.id, t.network]] : []))),
    pidsLimit: config.terminal.container_pids,
    runtime: config.docker.runtime,
    readOnlyRoot: config.docker.read_only_root,
    warmPool: config.docker.warm_pool,
    warmPoolAdaptive: { max: config.docker.warm_pool_max, windowMs: config.docker.warm_pool_window_s * 1000, memoryMiB: config.docker.warm_pool_memory_mb },
    memoryMiB: config.terminal.container_memory,
    diskMiB: config.terminal.container_disk,
    diskLimit: config.docker.disk_limit,
    taskUids: config.docker.task_uids,
    nameKeyFile: config.docker.name_key_file,
    memoryOvercommit: config.docker.memory_overcommit,
    memoryScope: config.docker.memory_scope,
    executorStaleMs: config.docker.executor_stale_ms,
    startConcurrency: config.docker.start_concurrency,
    cpus: config.terminal.container_cpu,
    persistent: config.terminal.container_persistent,
    dockerEnv: config.terminal.docker_env,
    forwardEnv: config.terminal.docker_forward_env,
    envPassthrough: config.terminal.env_passthrough,
    volumes: config.terminal.docker_volumes,
    extraArgs: config.terminal.docker_extra_args,
    ...(onContainerStart ? { onContainerStart } : {}),
    logger,
  };
}
