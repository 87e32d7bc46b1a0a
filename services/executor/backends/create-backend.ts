/**
 * Backend factory: a table of backend name → loader. Each loader imports
 * only its own backend's folder (and that backend's SDK) when called, so an
 * executor loads what its backend needs and nothing of the others: the local
 * executor never loads the Docker client or ssh2, the ssh executor never
 * loads the Docker client. (The docker backend's client, dockerode, loads
 * ssh2 by itself for ssh:// Docker hosts; Berth's ssh backend stays unloaded.)
 */
import { isBackendPackageSpecifier, type BerthConfig } from '../../common/config.js';
import { FailedPreconditionError } from '../../common/errors.js';
import type { Logger } from '../../common/logging.js';
import type {
  Backend,
  BackendCapabilities,
  BackendFactory,
  CodeRunnerEnvironments,
  CodeRunnersFactory,
  ContainerStartSink,
} from '../backend.js';
import { loadBackendPackage } from './backend-package.js';

const BACKEND_LOADERS: Readonly<Record<string, () => Promise<BackendFactory>>> = {
  local: async () => (await import('./local/create-local-backend.js')).createLocalBackend,
  docker: async () => (await import('./docker/create-docker-backend.js')).createDockerBackend,
  ssh: async () => (await import('./ssh/create-ssh-backend.js')).createSshBackend,
  singularity: async () => (await import('./singularity/create-singularity-backend.js')).createSingularityBackend,
  modal: async () => (await import('./modal/create-modal-backend.js')).createModalBackend,
  daytona: async () => (await import('./daytona/create-daytona-backend.js')).createDaytonaBackend,
  kubernetes: async () => (await import('./kubernetes/create-kubernetes-backend.js')).createKubernetesBackend,
};

/** The backends this version of Berth has, in the order the error message lists them. */
export const BACKEND_NAMES: readonly string[] = Object.keys(BACKEND_LOADERS);

/**
 * Loads the factory of backend `name` (its module and SDK, nothing else),
 * or of a backend package (backend-package.ts) when `name` is a package
 * name or a path.
 */
export async function loadBackendFactory(name: string): Promise<BackendFactory> {
  const load = Object.hasOwn(BACKEND_LOADERS, name) ? BACKEND_LOADERS[name] : undefined;
  if (!load && isBackendPackageSpecifier(name)) return loadBackendPackage(name);
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

/**
 * Where execute_code runs scripts of tasks whose environment can run none
 * (a host or image without python3 for the exec agent): per-task docker
 * code containers.
 */
const CODE_RUNNERS_LOADER = async (): Promise<CodeRunnersFactory> =>
  (await import('./docker/create-code-containers.js')).createCodeContainers;

/**
 * execute_code's code-runner environments for a backend whose environments
 * may run no script themselves (`sharesRpcDir` false), per
 * `code_execution.code_container`; undefined when it needs none or they are
 * off. Loaded only then, so other executors never load the Docker client for it.
 */
export async function createCodeRunners(
  config: BerthConfig,
  capabilities: BackendCapabilities,
  logger: Logger,
  onContainerStart?: ContainerStartSink,
): Promise<CodeRunnerEnvironments | undefined> {
  if (capabilities.sharesRpcDir || config.code_execution.code_container === 'off') return undefined;
  const create = await CODE_RUNNERS_LOADER();
  return create(config, capabilities.name, logger, onContainerStart);
}
