/**
 * Snapshots and forks of tasks (docs/lifecycle.md), as `berth.snapshots`:
 *
 * ```ts
 * const snap = await berth.snapshots.create('base', { label: 'deps installed' });
 * const { task } = await berth.snapshots.fork({ snapshotId: snap.snapshotId }, 'try-1');
 * await task.terminal({ command: 'pwd' });   // same files, cwd and variables as base had
 * ```
 */
import type { CallOptions as RpcCallOptions } from 'nice-grpc';
import type { DispatcherClient, SnapshotInfo as SnapshotMessage } from '../gen/berth/v1/dispatcher.js';
import { toBerthError } from './errors.js';

/** One snapshot, as the server lists it. */
export interface SnapshotInfo {
  /** `snap_` and random characters. */
  readonly snapshotId: string;
  readonly label: string;
  /** The task it was taken of. */
  readonly sourceTaskId: string;
  /** The backend that holds it (`docker`, ...). */
  readonly backend: string;
  /** RFC 3339, UTC. */
  readonly createdAt: string;
  readonly sizeBytes: number;
  /** True only when forks get the source's running processes back. */
  readonly includesProcesses: boolean;
  /** What a fork gets: `files`, `shell_state`, and `processes` where `includesProcesses`. */
  readonly includes: string[];
}

/** Where {@link BerthSnapshots.fork} forks from: a snapshot, or a task (snapshotted first, the snapshot kept). */
export type ForkSource = { readonly snapshotId: string } | { readonly taskId: string };

interface CallOptions {
  readonly signal?: AbortSignal;
}

/**
 * What {@link BerthSnapshots} calls through: a BerthClient, whose task
 * handles (`Task`, a BerthTask) forks resolve to.
 */
export interface SnapshotsClient<Task> {
  readonly rpc: Pick<DispatcherClient, 'snapshot' | 'fork' | 'listSnapshots' | 'deleteSnapshot'>;
  callOptions(options?: CallOptions): RpcCallOptions;
  retrying<T>(method: string, signal: AbortSignal | undefined, call: () => Promise<T>): Promise<T>;
  task(taskId: string): Task;
}

function info(message: SnapshotMessage | undefined): SnapshotInfo {
  if (!message) throw new Error('the server answered without the snapshot');
  return { ...message, includes: [...message.includes] };
}

/** Snapshots and forks through a client; `Task` is its task handle (`berth.snapshots` is a `BerthSnapshots<BerthTask>`). */
export class BerthSnapshots<Task> {
  readonly #client: SnapshotsClient<Task>;

  /** @internal Made by BerthClient.snapshots. */
  constructor(client: SnapshotsClient<Task>) {
    this.#client = client;
  }

  /** Snapshots task `taskId` (its files and shell state; processes only where the backend can). Sent once. */
  async create(taskId: string, options: CallOptions & { readonly label?: string } = {}): Promise<SnapshotInfo> {
    try {
      const r = await this.#client.rpc.snapshot({ taskId, label: options.label ?? '' }, this.#client.callOptions(options));
      return info(r.snapshot);
    } catch (err) {
      throw toBerthError(err);
    }
  }

  /**
   * Makes task `taskId` from a snapshot or from another task (snapshotted
   * first; `label` names that snapshot). Resolves to the new task and the
   * snapshot it came from. Sent once.
   */
  async fork(from: ForkSource, taskId: string, options: CallOptions & { readonly label?: string } = {}): Promise<{ task: Task; snapshot: SnapshotInfo }> {
    const source = 'snapshotId' in from ? { snapshotId: from.snapshotId, sourceTaskId: '' } : { snapshotId: '', sourceTaskId: from.taskId };
    try {
      const r = await this.#client.rpc.fork({ ...source, taskId, label: options.label ?? '' }, this.#client.callOptions(options));
      return { task: this.#client.task(r.taskId), snapshot: info(r.snapshot) };
    } catch (err) {
      throw toBerthError(err);
    }
  }

  /** The tenant's snapshots, newest first. Retried on UNAVAILABLE. */
  async list(options: CallOptions = {}): Promise<SnapshotInfo[]> {
    const r = await this.#client.retrying('ListSnapshots', options.signal, () => this.#client.rpc.listSnapshots({}, this.#client.callOptions(options)));
    return r.snapshots.map(info);
  }

  /** Deletes a snapshot (forks made from it keep working); an unknown id rejects with NOT_FOUND. Sent once. */
  async delete(snapshotId: string, options: CallOptions = {}): Promise<boolean> {
    try {
      return (await this.#client.rpc.deleteSnapshot({ snapshotId }, this.#client.callOptions(options))).deleted;
    } catch (err) {
      throw toBerthError(err);
    }
  }
}
