/**
 * What a task's containers hold, by backend: the sums the per-tenant quotas
 * max_memory_mb and max_cpus count. The executor reports these (TaskUsage);
 * the dispatcher uses the same rule on its own config for an executor that
 * has not answered yet.
 */
import type { BackendName, BerthConfig } from './config.js';

/** Containers and the sum of their limits. */
export interface ContainerLimits {
  readonly containers: number;
  readonly memoryMb: number;
  readonly cpus: number;
}

/** What a task environment and a task's execute_code code container hold on one executor. */
export interface TaskContainerLimits {
  /** A task environment: a container on docker and singularity, none on local and ssh. */
  readonly perTask: ContainerLimits;
  /** A task's execute_code code container (ssh, singularity); none where scripts run in the task's environment. */
  readonly perCodeContainer: ContainerLimits;
}

export const NO_CONTAINERS: ContainerLimits = Object.freeze({ containers: 0, memoryMb: 0, cpus: 0 });

/** Backends whose task environments are containers limited by terminal.container_memory / container_cpu. */
const CONTAINER_BACKENDS: ReadonlySet<BackendName> = new Set(['docker', 'singularity', 'modal', 'daytona', 'kubernetes']);

/** `codeContainers`: whether execute_code runs in per-task code containers there. */
export function taskContainerLimits(
  config: Pick<BerthConfig, 'terminal'>,
  backend: BackendName,
  codeContainers: boolean,
): TaskContainerLimits {
  const one = { containers: 1, memoryMb: config.terminal.container_memory, cpus: config.terminal.container_cpu };
  return {
    perTask: CONTAINER_BACKENDS.has(backend) ? one : NO_CONTAINERS,
    perCodeContainer: codeContainers ? one : NO_CONTAINERS,
  };
}
