/**
 * Snapshots and forks of task environments on one executor: the executor's
 * half of the Dispatcher's Snapshot, Fork, ListSnapshots and DeleteSnapshot.
 * The backend keeps the files (and memory, where it can); this adds the
 * shell state, read from the task's shell-state runner while no foreground
 * work runs, and gives it to the fork's runner.
 */
import { randomBytes } from 'node:crypto';
import { FailedPreconditionError, InvalidArgumentError, NotFoundError } from '../common/errors.js';
import { SNAPSHOT_ID_PATTERN, unknownSnapshotMessage } from '../common/snapshot-ids.js';
import type { Backend, BackendSnapshot, TaskKey } from './backend.js';
import type { TaskTable } from './task-table.js';

/** The largest shell state a snapshot keeps (the runner's snapshot file: variables, functions, aliases). */
export const MAX_SHELL_STATE_BYTES = 1024 * 1024;
/** The longest label a snapshot takes. */
export const MAX_SNAPSHOT_LABEL_CHARS = 256;

export function newSnapshotId(): string {
  return `snap_${randomBytes(12).toString('hex')}`;
}


type SnapshotBackend = Backend & Required<Pick<Backend, 'snapshot' | 'listSnapshots' | 'deleteSnapshot'>>;

export class TaskLifecycle {
  readonly #tasks: TaskTable;
  readonly #backend: Backend;

  constructor(tasks: TaskTable, backend: Backend) {
    this.#tasks = tasks;
    this.#backend = backend;
  }

  /** The backend, when it takes snapshots; else the refusal that names it and what to use instead. */
  #snapshots(): SnapshotBackend {
    const backend = this.#backend;
    const caps = backend.capabilities;
    if (caps.lifecycle?.snapshot !== true || !backend.snapshot || !backend.listSnapshots || !backend.deleteSnapshot) {
      const why = caps.lifecycle?.notes?.length ? ` (${caps.lifecycle.notes.join('; ')})` : '';
      throw new FailedPreconditionError(
        `the ${caps.name} backend cannot snapshot or fork tasks${why}; use the docker backend for snapshots and forks ` +
          '(see docs/lifecycle.md)',
      );
    }
    return backend as SnapshotBackend;
  }

  /** Snapshots task `key` (waits for its foreground work, blocks new work meanwhile). */
  async snapshot(key: TaskKey, label: string): Promise<BackendSnapshot> {
    const backend = this.#snapshots();
    if (label.length > MAX_SNAPSHOT_LABEL_CHARS) {
      throw new InvalidArgumentError(`a snapshot label takes at most ${MAX_SNAPSHOT_LABEL_CHARS} characters, got ${label.length}`);
    }
    return this.#tasks.exclusive(key, async ({ env, runner }) => {
      await runner.bootstrap();
      // Written by the task's own shell: hostile input, bounded before it is kept.
      const script = await env.readFile(runner.snapshotPath);
      if (script.length > MAX_SHELL_STATE_BYTES) {
        throw new FailedPreconditionError(
          `the task's shell state (exported variables and functions) is ${script.length} bytes, more than a snapshot keeps ` +
            `(${MAX_SHELL_STATE_BYTES}); unset large variables or functions and snapshot again`,
        );
      }
      return backend.snapshot(key, env, {
        id: newSnapshotId(),
        tenant: key.tenant,
        sourceTaskId: key.taskId,
        label,
        createdAtMs: Date.now(),
        shell: { cwd: runner.cwd, script: script.toString('utf8') },
      });
    });
  }

  /** Creates task `key`'s environment from the tenant's snapshot `snapshotId`; resolves to the snapshot. */
  async fork(key: TaskKey, snapshotId: string): Promise<BackendSnapshot> {
    const snapshot = await this.#find(key.tenant, snapshotId);
    await this.#tasks.createFrom(key, snapshot);
    return snapshot;
  }

  /** The tenant's complete snapshots here, newest first. */
  async list(tenant: string): Promise<BackendSnapshot[]> {
    const snapshots = await this.#snapshots().listSnapshots(tenant);
    return snapshots.filter((s) => s.tenant === tenant).sort((a, b) => b.createdAtMs - a.createdAtMs);
  }

  async delete(tenant: string, snapshotId: string): Promise<boolean> {
    const backend = this.#snapshots();
    if (!SNAPSHOT_ID_PATTERN.test(snapshotId)) return false;
    return backend.deleteSnapshot(tenant, snapshotId);
  }

  async #find(tenant: string, snapshotId: string): Promise<BackendSnapshot> {
    const found = SNAPSHOT_ID_PATTERN.test(snapshotId) ? (await this.list(tenant)).find((s) => s.id === snapshotId) : undefined;
    if (!found) throw new NotFoundError(unknownSnapshotMessage(snapshotId));
    return found;
  }
}
