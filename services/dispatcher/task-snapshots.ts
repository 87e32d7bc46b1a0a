/**
 * The Dispatcher's Snapshot, Fork, ListSnapshots and DeleteSnapshot
 * (docs/lifecycle.md). A snapshot is taken by the executor that holds its
 * task; it belongs to the tenant, and every executor of the tenant's backend
 * that can see it (on docker: every executor on the same Docker host) lists
 * it. A fork's new task is placed on one of those, by rendezvous among them,
 * and stays there like any task.
 */
import { FailedPreconditionError, InvalidArgumentError, NotFoundError, ResourceExhaustedError } from '../common/errors.js';
import type { Logger } from '../common/logging.js';
import { SNAPSHOT_ID_PATTERN, snapshotIncludes, unknownSnapshotMessage } from '../common/snapshot-ids.js';
import type { QuotasConfig } from '../common/config.js';
import type { SnapshotInfo } from '../gen/berth/v1/dispatcher.js';
import type { ExecutorClient, TaskSnapshotRecord } from '../gen/berth/v1/executor.js';
import { rendezvousPick, type ExecutorEndpoint, type ExecutorRouter, type Placement } from './executors/executor-router.js';
import type { QuotaLedger } from './quotas/quota-ledger.js';
import { checkTaskId } from './task-ids.js';

/** The refusal sentences of the snapshot quotas (docs/quotas.md lists them). */
export const snapshotQuotaMessages = {
  max_snapshots: (tenant: string, use: number, limit: number) =>
    `tenant ${tenant} is at quotas.max_snapshots (${use} of ${limit} snapshots); delete a snapshot ('berth snapshot-delete ID') or raise the quota`,
  max_snapshot_mb: (tenant: string, use: number, limit: number) =>
    `tenant ${tenant} is at quotas.max_snapshot_mb (${use} of ${limit} MB of snapshots with this one); ` +
    "delete a snapshot ('berth snapshot-delete ID') or raise the quota",
} as const;

export interface TaskSnapshotsOptions {
  readonly router: ExecutorRouter;
  readonly logger: Logger;
  readonly quotas?: QuotaLedger;
  /** Where the task lives (as EndTask finds it). */
  readonly place: (tenant: string, taskId: string) => Promise<Placement>;
  /** Records that the task now lives on `executorId`. */
  readonly remember: (tenant: string, taskId: string, executorId: string) => void;
}

/** A snapshot and the executors that see it. */
interface Seen {
  readonly record: TaskSnapshotRecord;
  readonly endpoints: ExecutorEndpoint[];
}

export class TaskSnapshots {
  readonly #o: TaskSnapshotsOptions;

  constructor(options: TaskSnapshotsOptions) {
    this.#o = options;
  }

  /** Snapshots the tenant's task `taskId` on the executor that holds it. */
  async snapshot(tenant: string, taskId: string, label: string): Promise<SnapshotInfo> {
    const id = checkTaskId(taskId);
    const limits = this.#limits(tenant);
    const before = limits.max_snapshots !== undefined || limits.max_snapshot_mb !== undefined ? await this.#seen(tenant) : undefined;
    if (before && limits.max_snapshots !== undefined && before.size >= limits.max_snapshots) {
      throw new ResourceExhaustedError(snapshotQuotaMessages.max_snapshots(tenant, before.size, limits.max_snapshots));
    }
    const placement = await this.#o.place(tenant, id);
    const { snapshot } = await placement.client.snapshotTask({ task: { tenant, taskId: id }, label });
    if (!snapshot) throw new Error('the executor answered a snapshot without one');
    if (before && limits.max_snapshot_mb !== undefined) {
      const bytes = [...before.values()].reduce((sum, s) => sum + s.record.sizeBytes, 0) + snapshot.sizeBytes;
      const mb = Math.ceil(bytes / (1024 * 1024));
      if (mb > limits.max_snapshot_mb) {
        await placement.client.deleteTaskSnapshot({ tenant, snapshotId: snapshot.snapshotId });
        throw new ResourceExhaustedError(snapshotQuotaMessages.max_snapshot_mb(tenant, mb, limits.max_snapshot_mb));
      }
    }
    this.#o.logger.info({ tenant, task: id, snapshot: snapshot.snapshotId, sizeBytes: snapshot.sizeBytes }, 'snapshot');
    return snapshotInfo(snapshot);
  }

  /**
   * Makes task `taskId` from snapshot `from.snapshotId`, or from task
   * `from.taskId` (snapshotted first, the snapshot kept and returned).
   */
  async fork(
    tenant: string,
    from: { readonly snapshotId: string; readonly taskId: string },
    taskId: string,
    label: string,
  ): Promise<{ taskId: string; snapshot: SnapshotInfo }> {
    if ((from.snapshotId === '') === (from.taskId === '')) {
      throw new InvalidArgumentError('give exactly one of snapshot_id and source_task_id to fork from');
    }
    if (taskId === '') throw new InvalidArgumentError('task_id (the new task) is required');
    const id = checkTaskId(taskId);
    const where = await this.#o.place(tenant, id);
    if (!where.fresh && where.lost === undefined) {
      throw new FailedPreconditionError(`task '${id}' exists already; fork into a new task id (or end that task first)`);
    }
    const snapshotId = from.snapshotId !== '' ? from.snapshotId : (await this.snapshot(tenant, from.taskId, label)).snapshotId;
    const seen = SNAPSHOT_ID_PATTERN.test(snapshotId) ? (await this.#seen(tenant)).get(snapshotId) : undefined;
    const target = seen && rendezvousPick(seen.endpoints, `${tenant}/${id}`);
    if (!seen || !target) throw new NotFoundError(unknownSnapshotMessage(snapshotId));
    const lease = await this.#o.quotas?.admitTask(tenant, id, target.id);
    try {
      const { snapshot } = await target.client.forkTask({ task: { tenant, taskId: id }, snapshotId });
      this.#o.remember(tenant, id, target.id);
      this.#o.logger.info({ tenant, task: id, snapshot: snapshotId, executor: target.id }, 'fork');
      return { taskId: id, snapshot: snapshotInfo(snapshot ?? seen.record) };
    } catch (err) {
      this.#o.quotas?.releaseTask(tenant, id)();
      throw err;
    } finally {
      lease?.release();
    }
  }

  /** The tenant's snapshots, newest first. */
  async list(tenant: string): Promise<SnapshotInfo[]> {
    const seen = await this.#seen(tenant);
    return [...seen.values()].map((s) => s.record).sort((a, b) => b.createdAtMs - a.createdAtMs).map(snapshotInfo);
  }

  /** Deletes one of the tenant's snapshots. Another tenant's id answers like one never made. */
  async delete(tenant: string, snapshotId: string): Promise<boolean> {
    const seen = SNAPSHOT_ID_PATTERN.test(snapshotId) ? (await this.#seen(tenant)).get(snapshotId) : undefined;
    if (!seen) throw new NotFoundError(unknownSnapshotMessage(snapshotId));
    for (const endpoint of seen.endpoints) {
      const { deleted } = await endpoint.client.deleteTaskSnapshot({ tenant, snapshotId });
      if (deleted) {
        this.#o.logger.info({ tenant, snapshot: snapshotId }, 'snapshot deleted');
        return true;
      }
    }
    throw new NotFoundError(unknownSnapshotMessage(snapshotId));
  }

  #limits(tenant: string): QuotasConfig {
    return this.#o.quotas?.limits(tenant) ?? {};
  }

  /**
   * Every snapshot of the tenant that an executor of its backend sees, with
   * those executors. An executor that does not answer is left out, unless
   * none does: then its error is the answer.
   */
  async #seen(tenant: string): Promise<Map<string, Seen>> {
    const backend = this.#o.router.route(tenant, '').backend;
    const endpoints = this.#o.router.endpoints.filter((e) => e.backend === backend);
    const healthy = endpoints.filter((e) => e.healthy);
    const asked = healthy.length > 0 ? healthy : endpoints;
    const answers = await Promise.allSettled(asked.map((e) => listOn(e.client, tenant)));
    const failed = answers.find((a): a is PromiseRejectedResult => a.status === 'rejected');
    if (failed && answers.every((a) => a.status === 'rejected')) throw failed.reason;
    const seen = new Map<string, Seen>();
    answers.forEach((answer, i) => {
      if (answer.status !== 'fulfilled') return;
      for (const record of answer.value) {
        // Never trust a record of another tenant, whoever sent it.
        if (record.tenant !== tenant) continue;
        const entry = seen.get(record.snapshotId) ?? { record, endpoints: [] };
        entry.endpoints.push(asked[i] as ExecutorEndpoint);
        seen.set(record.snapshotId, entry);
      }
    });
    return seen;
  }
}

async function listOn(client: ExecutorClient, tenant: string): Promise<TaskSnapshotRecord[]> {
  return (await client.listTaskSnapshots({ tenant })).snapshots;
}

/** A snapshot as the public API lists it. */
export function snapshotInfo(record: TaskSnapshotRecord): SnapshotInfo {
  return {
    snapshotId: record.snapshotId,
    label: record.label,
    sourceTaskId: record.sourceTaskId,
    backend: record.backend,
    createdAt: new Date(record.createdAtMs).toISOString(),
    sizeBytes: record.sizeBytes,
    includesProcesses: record.includesProcesses,
    includes: snapshotIncludes(record.includesProcesses),
  };
}
