/**
 * What the docker backend can do with a task's life under its settings
 * (docs/lifecycle.md, docs/suspend.md). Pure, for unit tests and `berth doctor`.
 *
 * Snapshots are images: the container's changes and its volumes, committed
 * (docs/lifecycle.md has the measured choices), under runc and under gVisor
 * alike (docker-snapshots.ts says what gVisor needs for it). Running
 * processes are never in one: Berth does not checkpoint container memory.
 *
 * Suspension stops the task's container (`docker stop`; docs/suspend.md has
 * the measured choices): no process and no memory are left on the host; the
 * container's filesystem, its volumes and the host directory with the
 * runner's shell state stay, and resuming starts the same container again.
 * Running background processes end. `docker pause` would keep them but
 * keeps every byte of their memory too; gVisor's checkpoint (`docker
 * checkpoint create` under runsc) would keep them without the memory but
 * needs the Docker daemon's experimental mode.
 */
import type { LifecycleCapabilities } from '../../backend.js';
import type { ContainerRole } from './container-spec.js';

export interface DockerLifecycleInput {
  /** docker.runtime ('' for the daemon's default). */
  readonly runtime: string;
  /** terminal.container_persistent. */
  readonly persistent: boolean;
  /** terminal.container_read_only_root (docker.read_only_root). */
  readonly readOnlyRoot: boolean;
  readonly role: ContainerRole;
}

/** Why processes are never in a docker snapshot (yet). */
export const NO_PROCESS_CHECKPOINT =
  'snapshots hold files and shell state, not running processes: Berth does not checkpoint container memory (CRIU or gVisor checkpoint)';

/** What snapshots need under gVisor (checked by the executor before its first one: docker-snapshots.ts). */
export const GVISOR_SNAPSHOTS =
  "gVisor: snapshots need runsc to write the container's changes through to the host (--overlay2=none, as scripts/ensure-docker.sh registers it); the executor checks before its first snapshot and refuses otherwise";

const SUSPEND_STOPS = 'suspend stops the container: files, volumes and shell state are kept, background processes end';

/** Why snapshots are off under these settings; undefined when they work. */
function snapshotRefusal(input: DockerLifecycleInput): string | undefined {
  if (input.readOnlyRoot && !input.persistent) {
    return (
      'with a read-only root and terminal.container_persistent: false the workspace and home are in memory (tmpfs), which ' +
      'a snapshot cannot hold; set terminal.container_persistent: true'
    );
  }
  return undefined;
}

export function dockerLifecycle(input: DockerLifecycleInput): LifecycleCapabilities {
  if (input.role === 'code') {
    return { snapshot: false, processes: false, suspend: false, notes: ['execute_code code containers are not snapshotted or suspended'] };
  }
  const refusal = snapshotRefusal(input);
  const notes = [
    refusal ?? NO_PROCESS_CHECKPOINT,
    SUSPEND_STOPS,
    ...(input.runtime === 'runsc' ? [GVISOR_SNAPSHOTS, "gVisor checkpoint/restore (keeping processes) is not used: it needs the Docker daemon's experimental mode, and a restored container could not be checkpointed again (docs/lifecycle.md)"] : []),
  ];
  return { snapshot: refusal === undefined, processes: false, suspend: true, notes };
}
