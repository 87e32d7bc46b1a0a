/**
 * A task's container name that is taken when its container is created (or
 * a pool container renamed to it): a leftover of this executor or of one
 * that is gone is removed; a live executor's container is not touched (the
 * task is being served there); a container that is not Berth's is refused.
 */
import type Dockerode from 'dockerode';
import { FailedPreconditionError, UnavailableError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import { LABEL } from './container-spec.js';
import { dockerError, isNotFound } from './docker-errors.js';
import { HEARTBEAT_STALE_MS, judgeExecutor, type ExecutorIdentity, type hostProbes } from './executor-identity.js';
import { removeContainer } from './sandbox-container.js';

export interface NameConflictContext {
  readonly docker: Dockerode;
  readonly daemon: string;
  /** This executor. */
  readonly identity: ExecutorIdentity;
  /** Whether other executors on this host still run (executor-identity.ts). */
  readonly probes: ReturnType<typeof hostProbes>;
  readonly logger: Logger;
}

/** Clears `name` for this executor's container of the same task, or throws saying why it cannot. */
export async function resolveNameConflict(ctx: NameConflictContext, name: string): Promise<void> {
  let info: Dockerode.ContainerInspectInfo;
  try {
    info = await ctx.docker.getContainer(name).inspect();
  } catch (err) {
    if (isNotFound(err)) return;
    throw dockerError(err, `inspecting container ${name}`, ctx.daemon);
  }
  const labels = info.Config.Labels ?? {};
  const executorContainer = labels[LABEL.executorContainer];
  await ctx.probes.refresh(executorContainer ? [executorContainer] : []);
  const liveness = judgeExecutor(labels, ctx.identity, ctx.probes);
  if (liveness === 'self' || liveness === 'gone') {
    ctx.logger.info({ container: name, liveness }, 'removing a leftover container of the same task');
    await removeContainer(ctx.docker.getContainer(info.Id), ctx.daemon);
    return;
  }
  if (liveness === 'alive') {
    // Often an executor that was just killed: its heartbeat goes stale soon, and a retry then succeeds.
    throw new UnavailableError(
      `container ${name} for this task belongs to executor ${labels[LABEL.executor]}, which still counts as running ` +
        `(an executor killed moments ago counts as gone once its heartbeat is ${HEARTBEAT_STALE_MS / 1000} s old); retry shortly`,
    );
  }
  throw new FailedPreconditionError(
    `container ${name} for this task already exists and belongs to something other than Berth; refusing to replace it`,
  );
}
