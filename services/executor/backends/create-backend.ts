/**
 * Backend factory. Each backend's module (and its SDK) is loaded lazily, so
 * an executor only loads what its backend needs.
 */
import type { BerthConfig } from '../../common/config.js';
import { FailedPreconditionError } from '../../common/errors.js';
import type { Logger } from '../../common/logging.js';
import type { Backend } from '../backend.js';
import type { ContainerStartSink } from '../executor-metrics.js';
import type { DockerBackendOptions } from './docker/docker-backend.js';

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
    memoryMiB: config.terminal.container_memory,
    diskMiB: config.terminal.container_disk,
    diskLimit: config.docker.disk_limit,
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

/** `onContainerStart`: told of each docker container made ready for a task (metrics). */
export async function createBackend(config: BerthConfig, logger: Logger, onContainerStart?: ContainerStartSink): Promise<Backend> {
  const name = config.terminal.backend;
  switch (name) {
    case 'local': {
      const { LocalBackend } = await import('./local/local-backend.js');
      return new LocalBackend({
        ...(config.executor.state_root ? { stateRoot: config.executor.state_root } : {}),
        ...(config.terminal.cwd ? { initialCwd: config.terminal.cwd } : {}),
        envPassthrough: config.terminal.env_passthrough,
        logger,
      });
    }
    case 'docker': {
      const { DockerBackend } = await import('./docker/docker-backend.js');
      return DockerBackend.start(dockerOptionsFromConfig(config, logger, onContainerStart));
    }
    case 'ssh': {
      const { createSshBackend } = await import('./ssh/create-ssh-backend.js');
      return createSshBackend(config, logger);
    }
    case 'singularity': {
      const { createSingularityBackend } = await import('./singularity/create-singularity-backend.js');
      return createSingularityBackend(config, logger);
    }
    default:
      // Never fall back to a weaker sandbox: a backend that is not here is an error.
      throw new FailedPreconditionError(
        `the ${name} backend is not available in this version of Berth; available: local, docker, ssh, singularity`,
      );
  }
}
