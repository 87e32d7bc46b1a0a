/**
 * Backend factory: a table of backend name → loader. Each loader imports
 * only its own backend's folder (and that backend's SDK) when called, so an
 * executor loads what its backend needs and nothing of the others: the local
 * executor never loads the Docker client or ssh2, the ssh executor never
 * loads the Docker client. (The docker backend's client, dockerode, loads
 * ssh2 by itself for ssh:// Docker hosts; Berth's ssh backend stays unloaded.)
 */
import type { BerthConfig } from '../../common/config.js';
import { FailedPreconditionError } from '../../common/errors.js';
import type { Logger } from '../../common/logging.js';
import type { Backend } from '../backend.js';
import type { ContainerStartSink } from '../executor-metrics.js';

/** Makes a started backend from config. `onContainerStart`: told of each docker container made ready (metrics). */
export type BackendFactory = (config: BerthConfig, logger: Logger, onContainerStart?: ContainerStartSink) => Promise<Backend>;

const BACKEND_LOADERS: Readonly<Record<string, () => Promise<BackendFactory>>> = {
  local: async () => (await import('./local/create-local-backend.js')).createLocalBackend,
  docker: async () => (await import('./docker/create-docker-backend.js')).createDockerBackend,
  ssh: async () => (await import('./ssh/create-ssh-backend.js')).createSshBackend,
  singularity: async () => (await import('./singularity/create-singularity-backend.js')).createSingularityBackend,
  modal: async () => (await import('./modal/create-modal-backend.js')).createModalBackend,
  daytona: async () => (await import('./daytona/create-daytona-backend.js')).createDaytonaBackend,
};

/** The backends this version of Berth has, in the order the error message lists them. */
export const BACKEND_NAMES: readonly string[] = Object.keys(BACKEND_LOADERS);

/** Loads the factory of backend `name` (its module and SDK, nothing else). */
export async function loadBackendFactory(name: string): Promise<BackendFactory> {
  const load = Object.hasOwn(BACKEND_LOADERS, name) ? BACKEND_LOADERS[name] : undefined;
  // Never fall back to a weaker sandbox: a backend that is not here is an error.
  if (!load) {
    throw new FailedPreconditionError(
      `the ${name} backend is not available in this version of Berth; available: ${BACKEND_NAMES.join(', ')}`,
    );
  }
  return load();
}

/** `onContainerStart`: told of each docker container made ready for a task (metrics). */
export async function createBackend(config: BerthConfig, logger: Logger, onContainerStart?: ContainerStartSink): Promise<Backend> {
  const create = await loadBackendFactory(config.terminal.backend);
  return create(config, logger, onContainerStart);
}
