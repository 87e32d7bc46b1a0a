/**
 * Removes containers left by executors that are gone (killed, crashed, host
 * rebooted): every container labelled `berth.executor` whose executor
 * {@link judgeExecutor} finds gone, task and warm-pool containers alike, in
 * any state (running, exited, stuck in Created). Their host directories go
 * too when they are under this executor's state root. Persistent volumes
 * are kept: the task may come back on another executor.
 */
import { rm } from 'node:fs/promises';
import path from 'node:path';
import type Dockerode from 'dockerode';
import type { Logger } from '../../../common/logging.js';
import { LABEL } from './container-spec.js';
import { dockerError } from './docker-errors.js';
import { heartbeatDir, judgeExecutor, type ExecutorIdentity, type LivenessProbes } from './executor-identity.js';
import { removeContainer } from './sandbox-container.js';

export interface SweepOptions {
  readonly docker: Dockerode;
  readonly daemon: string;
  readonly identity: ExecutorIdentity;
  readonly probes: LivenessProbes & { refresh(executorContainers?: readonly string[]): Promise<void> };
  /** docker.executor_stale_ms: how old another executor's heartbeat may be. */
  readonly staleMs?: number;
  readonly logger: Logger;
}

export interface SweepResult {
  /** Names of the containers removed. */
  readonly removed: string[];
  /** Executors judged gone. */
  readonly goneExecutors: string[];
}

/** True when `dir` lies inside `root` (so the sweep may delete it). */
export function isInside(root: string, dir: string): boolean {
  const rel = path.relative(root, dir);
  return rel !== '' && !rel.startsWith('..') && !path.isAbsolute(rel);
}

export async function sweepOrphans(options: SweepOptions): Promise<SweepResult> {
  const { docker, daemon, identity, probes, logger } = options;
  let containers: Dockerode.ContainerInfo[];
  try {
    containers = await docker.listContainers({ all: true, filters: { label: [LABEL.executor] } });
  } catch (err) {
    throw dockerError(err, 'listing containers for the orphan sweep', daemon);
  }
  await probes.refresh(containers.flatMap((c) => c.Labels?.[LABEL.executorContainer] ?? []));
  const removed: string[] = [];
  const gone = new Set<string>();
  const dockerRoot = path.join(identity.stateRoot, 'docker');
  await Promise.all(
    containers.map(async (info) => {
      const labels = info.Labels ?? {};
      if (judgeExecutor(labels, identity, probes, options.staleMs) !== 'gone') return;
      const executor = labels[LABEL.executor] ?? '?';
      gone.add(executor);
      const name = (info.Names?.[0] ?? info.Id).replace(/^\//, '');
      try {
        await removeContainer(docker.getContainer(info.Id), daemon);
      } catch (err) {
        logger.warn({ err, container: name }, 'orphan sweep: removing a container failed');
        return;
      }
      removed.push(name);
      const hostDir = labels[LABEL.hostDir];
      if (hostDir && isInside(dockerRoot, hostDir)) await rm(hostDir, { recursive: true, force: true }).catch(() => undefined);
      logger.info(
        { container: name, executor, state: info.State, task: labels[LABEL.task], pool: labels[LABEL.pool] === '1' },
        'orphan sweep: removed a container of an executor that is gone',
      );
    }),
  );
  // Heartbeat files of executors that are gone and left nothing behind.
  for (const executor of gone) {
    await rm(path.join(heartbeatDir(identity.stateRoot), executor), { force: true }).catch(() => undefined);
  }
  return { removed, goneExecutors: [...gone] };
}
