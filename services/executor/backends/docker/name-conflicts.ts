/**
 * A task's container name that is taken when its container is created (or
 * a pool container renamed to it): a leftover of this executor or of one
 * that is gone is removed; a live executor's container is not touched (the
 * task is being served there); a container that is not Berth's is refused.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type Dockerode from 'dockerode';
import { FailedPreconditionError, UnavailableError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import { LABEL } from './container-spec.js';
import { dockerError, isNotFound } from './docker-errors.js';
import { heartbeatIntervalMs, judgeExecutor, type ExecutorIdentity, type Liveness, type hostProbes } from './executor-identity.js';
import { removeContainer } from './sandbox-container.js';

export interface NameConflictContext {
  readonly docker: Dockerode;
  readonly daemon: string;
  /** This executor. */
  readonly identity: ExecutorIdentity;
  /** Whether other executors on this host still run (executor-identity.ts). */
  readonly probes: ReturnType<typeof hostProbes>;
  /** docker.executor_stale_ms: how old another executor's heartbeat may be before it counts as gone. */
  readonly staleMs: number;
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
  const liveness = await judgeOwner(ctx, labels);
  if (liveness === 'self' || liveness === 'gone') {
    ctx.logger.info({ container: name, liveness }, 'removing a leftover container of the same task');
    await removeContainer(ctx.docker.getContainer(info.Id), ctx.daemon);
    return;
  }
  if (liveness === 'alive') {
    // Often an executor that was just killed: its heartbeat goes stale soon, and a retry then succeeds.
    throw new UnavailableError(
      `container ${name} for this task belongs to executor ${labels[LABEL.executor]}, which still counts as running ` +
        `(an executor killed or stopped moments ago counts as gone once its heartbeat is ${ctx.staleMs / 1000} s old, ` +
        'docker.executor_stale_ms); retry shortly',
    );
  }
  throw new FailedPreconditionError(
    `container ${name} for this task already exists and belongs to something other than Berth; refusing to replace it`,
  );
}

/**
 * Judges the executor of a container's labels. One whose heartbeat has
 * missed beats (killed or stopped, not yet stale) is waited for until it is
 * stale or beats again, so a task taken over from it gets no error meanwhile;
 * one beating on is alive at once.
 */
async function judgeOwner(ctx: NameConflictContext, labels: Readonly<Record<string, string>>): Promise<Liveness> {
  const executorContainer = labels[LABEL.executorContainer];
  const beat = heartbeatIntervalMs(ctx.staleMs);
  const deadline = Date.now() + ctx.staleMs + beat;
  for (;;) {
    await ctx.probes.refresh(executorContainer ? [executorContainer] : []);
    const liveness = judgeExecutor(labels, ctx.identity, ctx.probes, ctx.staleMs);
    const age = ctx.probes.heartbeatAgeMs(labels[LABEL.executor] ?? '');
    if (liveness !== 'alive' || age === undefined || age <= 2 * beat || Date.now() >= deadline) return liveness;
    await sleep(Math.min(beat, ctx.staleMs - age + 10));
  }
}

/**
 * Whether another executor's container holds the task's name now: the old
 * owner of a task taken over then leaves the task's host directory alone.
 * `ownId`: the caller's own container of the task, if any.
 */
export async function nameHeldByAnother(ctx: NameConflictContext, name: string, ownId?: string): Promise<boolean> {
  try {
    const info = await ctx.docker.getContainer(name).inspect();
    return info.Id !== ownId && (info.Config.Labels ?? {})[LABEL.executor] !== ctx.identity.id;
  } catch (err) {
    if (isNotFound(err)) return false;
    throw dockerError(err, `inspecting container ${name}`, ctx.daemon);
  }
}
