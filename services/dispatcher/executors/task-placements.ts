/**
 * Which executor holds each task's environment, remembered so that a task
 * whose executor went is told its environment was lost (see
 * ExecutorRouter.place) rather than silently given a new one.
 */
import type { ExecutorClient } from '../../gen/berth/v1/executor.js';
import type { ExecutorRouter, LossReason, Placement } from './executor-router.js';

/** Placements remembered for noticing lost environments. */
const MAX_PLACEMENTS = 100_000;

export class TaskPlacements {
  readonly #router: ExecutorRouter;
  /** By `tenant/task`, oldest first. */
  readonly #placements = new Map<string, string>();

  constructor(router: ExecutorRouter) {
    this.#router = router;
  }

  /** Places the task, where it was last seen if it was (a loss is reported in the placement). */
  place(tenant: string, taskId: string): Promise<Placement> {
    return this.#router.place(tenant, taskId, this.#placements.get(`${tenant}/${taskId}`));
  }

  /** The executor holding the task's environment, without reporting a loss (interrupt, end). */
  async locate(tenant: string, taskId: string): Promise<ExecutorClient> {
    return (await this.place(tenant, taskId)).client;
  }

  /** Records where a task lives. */
  remember(tenant: string, taskId: string, executorId: string): void {
    const key = `${tenant}/${taskId}`;
    if (this.#placements.get(key) === executorId) return;
    // Bounded: forget the oldest placements first (Map keeps insertion order).
    if (this.#placements.size >= MAX_PLACEMENTS) {
      const oldest = this.#placements.keys().next().value;
      if (oldest !== undefined) this.#placements.delete(oldest);
    }
    this.#placements.delete(key);
    this.#placements.set(key, executorId);
  }

  /** Forgets where the task lives: its next call is placed afresh. */
  forget(tenant: string, taskId: string): void {
    this.#placements.delete(`${tenant}/${taskId}`);
  }
}

const LOSS_CAUSES: Readonly<Record<LossReason, string>> = {
  unreachable: 'stopped answering',
  draining: 'was shut down (drained for an upgrade or a scale-down)',
  removed: 'is gone from the executor membership (scaled down, replaced or failed)',
};

/** The one error a task gets when its environment went with its executor. */
export function lostEnvironmentMessage(taskId: string, executorId: string, reason: LossReason): string {
  return (
    `The environment of task '${taskId}' was lost: its executor (${executorId}) ${LOSS_CAUSES[reason]}. ` +
    'A new environment will be created on a healthy executor; working directory, variables, files ' +
    'outside shared storage and background processes are gone (on the docker backend with ' +
    'terminal.container_persistent, /workspace and the home directory come back from their volumes). ' +
    'Re-run any setup, then retry.'
  );
}
