/**
 * The singularity backend from config: `terminal.singularity_image`,
 * `singularity_binary`, the container limits and persistence, and the
 * executor's state root.
 */
import path from 'node:path';
import type { BerthConfig } from '../../../common/config.js';
import type { Logger } from '../../../common/logging.js';
import { executorStateDir } from '../shared/state-root.js';
import { SingularityBackend, type SingularityBackendOptions } from './singularity-backend.js';

/** `<state_root>/singularity`, or under the OS temp dir when no state root is set. */
export function singularityStateRoot(stateRoot: string): string {
  return path.join(executorStateDir(stateRoot), 'singularity');
}

/** Maps config to backend options. */
export function singularityOptionsFromConfig(config: BerthConfig, logger?: Logger): SingularityBackendOptions {
  const t = config.terminal;
  return {
    ...(t.singularity_binary ? { binary: t.singularity_binary } : {}),
    image: t.singularity_image,
    stateRoot: singularityStateRoot(config.executor.state_root),
    persistent: t.container_persistent,
    memoryMiB: t.container_memory,
    cpus: t.container_cpu,
    pidsLimit: t.container_pids,
    envPassthrough: t.env_passthrough,
    ...(logger ? { logger } : {}),
  };
}

export function createSingularityBackend(config: BerthConfig, logger: Logger): Promise<SingularityBackend> {
  return SingularityBackend.start(singularityOptionsFromConfig(config, logger));
}
