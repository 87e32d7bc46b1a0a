/**
 * A cold start of a task's container (no warm pool container to claim): a
 * fresh host directory, the uid its volumes record (else a free one), and
 * one more try when the directory vanished under the create.
 */
import { rm } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from '../../../common/logging.js';
import type { TaskKey } from '../../backend.js';
import type { ContainerFactory } from './container-factory.js';
import { taskLabels, type ContainerRole, type ExecutorLabels, type PersistentVolumeNames } from './container-spec.js';
import type { SandboxContainer } from './sandbox-container.js';
import type { TaskNames } from './task-names.js';
import type { TaskUids } from './task-uids.js';

export interface TaskContainerContext {
  readonly factory: ContainerFactory;
  readonly uids: TaskUids;
  readonly names: TaskNames;
  /** The backend's directory under the state root (`<stateRoot>/docker`). */
  readonly root: string;
  readonly role: ContainerRole;
  readonly labels: ExecutorLabels;
}

export interface TaskContainerParams {
  readonly key: TaskKey;
  readonly name: string;
  readonly logger: Logger;
  readonly volumes?: PersistentVolumeNames;
  readonly volumeLabels?: Readonly<Record<string, string>>;
  /** The uid the task's workspace volume records, when it exists. */
  readonly recordedUid: string | undefined;
  /** A fork's snapshot image. */
  readonly image?: string;
}

/** Starts the task's container afresh. */
export async function startTaskContainer(ctx: TaskContainerContext, p: TaskContainerParams): Promise<SandboxContainer> {
  const { key, name, volumes } = p;
  await ctx.factory.ensureImage();
  const hostDir = path.join(ctx.root, ctx.role === 'code' ? 'code' : 'tasks', ctx.names.task(key));
  // The name first: a live executor's container of the task keeps its host directory (and refuses this start).
  await ctx.factory.options.resolveNameConflict(name);
  // A directory left by a dead executor must not leak its snapshot into the new task.
  await rm(hostDir, { recursive: true, force: true });
  // The uid the task's volumes record, so their files stay its own; else a free one.
  const owner = { containerName: name, ...(volumes ? { volumeNames: [volumes.workspace, volumes.home] } : {}) };
  const start = () =>
    ctx.uids.startWith(owner, p.recordedUid, (identity) =>
      ctx.factory.start({
        name,
        hostDir,
        identity,
        labels: taskLabels(key, ctx.labels, hostDir, new Date(), ctx.role),
        tenant: key.tenant,
        ...(volumes ? { persistentVolumes: volumes, ...(p.volumeLabels ? { volumeLabels: p.volumeLabels } : {}) } : {}),
        ...(p.image !== undefined ? { image: p.image } : {}),
      }),
    );
  // Another executor's orphan sweep may remove this path (its dead container of the same task used it)
  // between our mkdir and Docker's create: start once more, which makes the directory again.
  return start().catch((err: unknown) => {
    if (!/bind source path does not exist/.test(String((err as Error).message))) throw err;
    p.logger.warn({ hostDir }, 'the task directory vanished before its container was created; starting again');
    return start();
  });
}
