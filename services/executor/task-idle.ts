/**
 * The idle timer of each task's environment: suspension first, where the
 * backend can and `idleSuspendSeconds` is set below `lifetimeSeconds`, then
 * the release, `lifetimeSeconds` after the task's last call either way
 * (suspended or not). A task whose background processes still run is
 * neither suspended nor released; it is looked at again later.
 */
import type { Logger } from '../common/logging.js';
import type { SuspendableTask, TaskSuspender } from './task-suspension.js';

/** What of a task the idle timer works on (a task table entry, task-state.ts). */
export interface IdleTask extends SuspendableTask {
  idleTimer: NodeJS.Timeout | undefined;
  /** When the last call ended (or the environment was made). */
  idleSinceMs: number;
}

export interface IdleTimersOptions {
  readonly lifetimeMs: number;
  /** 0: never suspend. */
  readonly idleSuspendMs: number;
  readonly suspender: TaskSuspender;
  readonly logger: Logger;
  /** False once the timer no longer speaks for the task (released, replaced, executor closing). */
  readonly current: (task: IdleTask) => boolean;
  /** Releases the idle task. */
  readonly release: (task: IdleTask) => Promise<unknown>;
}

export class IdleTimers {
  readonly #o: IdleTimersOptions;

  constructor(options: IdleTimersOptions) {
    this.#o = options;
  }

  /** Arms the task's timer (after its last call, a suspension or a resumption). */
  schedule(task: IdleTask): void {
    clearTimeout(task.idleTimer);
    task.idleTimer = undefined;
    if (!this.#o.current(task)) return;
    const { idleSuspendMs, lifetimeMs } = this.#o;
    const suspendFirst = idleSuspendMs > 0 && !task.suspension.suspended && (lifetimeMs <= 0 || idleSuspendMs < lifetimeMs);
    if (suspendFirst) this.#arm(task, () => this.#suspend(task), idleSuspendMs);
    else this.#armRelease(task);
  }

  #armRelease(task: IdleTask): void {
    if (this.#o.lifetimeMs > 0) this.#arm(task, () => this.#release(task), this.#o.lifetimeMs);
  }

  /** Runs `fn` once the task has been idle `afterMs` (counted from its last call). */
  #arm(task: IdleTask, fn: () => void, afterMs: number): void {
    clearTimeout(task.idleTimer);
    task.idleTimer = setTimeout(fn, Math.max(0, afterMs - (Date.now() - task.idleSinceMs)));
    // Reaping must never keep the executor process alive on its own.
    task.idleTimer.unref();
  }

  /** Whether the timer that fired still speaks for the task: no call in flight (it reschedules when it ends), still current. */
  #stillIdle(task: IdleTask): boolean {
    task.idleTimer = undefined;
    return task.inFlight === 0 && this.#o.current(task);
  }

  /** Its processes would end with a suspension or release: look again later. */
  #busy(task: IdleTask): boolean {
    if (!task.registry.hasRunning()) return false;
    task.idleSinceMs = Date.now();
    this.schedule(task);
    return true;
  }

  #suspend(task: IdleTask): void {
    if (!this.#stillIdle(task) || this.#busy(task)) return;
    this.#o.suspender.suspend(task, 'idle').then(
      () => {
        if (task.inFlight === 0) this.schedule(task);
      },
      (err: unknown) => {
        // The backend failed to suspend: the release still comes (a call that arrived meanwhile reschedules).
        if (task.inFlight === 0) this.#armRelease(task);
        this.#o.logger.warn({ err, tenant: task.key.tenant, task: task.key.taskId }, 'suspending an idle task failed');
      },
    );
  }

  #release(task: IdleTask): void {
    if (!this.#stillIdle(task) || this.#busy(task)) return;
    this.#o.logger.info({ tenant: task.key.tenant, task: task.key.taskId }, 'releasing idle task environment');
    this.#o.release(task).catch((err: unknown) =>
      this.#o.logger.warn({ err, tenant: task.key.tenant, task: task.key.taskId }, 'releasing an idle task failed'),
    );
  }
}
