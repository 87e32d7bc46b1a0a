/**
 * Suspending and resuming one task's environment (the Suspend and Resume
 * calls, and idle suspension after `idle_suspend_after_s`).
 *
 * A task is suspended only while no call runs on it: an explicit Suspend
 * during a call is refused (FAILED_PRECONDITION naming the task) rather than
 * waiting, so the caller learns at once that its agent is still busy, and a
 * command never finds its environment stopped under it. A call that arrives
 * while a suspension is under way waits for it, then resumes the task: every
 * call, file operation and process action on a suspended task resumes it
 * transparently first. When the backend could not keep the task's
 * background processes, the registry records them as ended (killed,
 * `kill_all`) at suspension, and the task's next command says so in a notice.
 */
import { FailedPreconditionError } from '../common/errors.js';
import type { Logger } from '../common/logging.js';
import type { BackendCapabilities, BackendEnvironment, TaskKey } from './backend.js';
import { taskKeyString } from './backend.js';
import type { SuspendMetricReason, SuspensionMetrics } from './executor-metrics.js';
import type { ProcessRegistry } from './process-registry.js';

/** Why a task is suspended: a Suspend call, or idle time past `idle_suspend_after_s`. */
export type SuspendReason = SuspendMetricReason;

/** Where a task's environment is in its suspension life. */
export interface SuspensionState {
  suspended: boolean;
  /** A suspension or a resumption under way; calls wait for it. */
  transition: Promise<unknown> | undefined;
}

/** What of a task the suspender works on (a task table entry, task-state.ts). */
export interface SuspendableTask {
  readonly key: TaskKey;
  readonly env: BackendEnvironment;
  readonly registry: ProcessRegistry;
  inFlight: number;
  readonly pendingNotices: string[];
  readonly suspension: SuspensionState;
}

export interface SuspendOutcome {
  readonly suspended: boolean;
  readonly processesKept: boolean;
}

export function activeSuspension(): SuspensionState {
  return { suspended: false, transition: undefined };
}

/** The notice the first command after a suspension gets when its background processes ended. */
export function processesEndedNotice(count: number): string {
  const what = count === 1 ? '1 background process was' : `${count} background processes were`;
  return (
    `The task's environment was suspended and resumed; ${what} running then and ended with the suspension ` +
    '(files, the working directory and environment variables were kept). Start them again if they are still needed.'
  );
}

export interface TaskSuspenderOptions {
  readonly capabilities: BackendCapabilities;
  readonly logger: Logger;
  readonly metrics?: SuspensionMetrics;
}

/** Suspends and resumes tasks' environments on a backend that can (`capabilities.lifecycle.suspend`). */
export class TaskSuspender {
  readonly #o: TaskSuspenderOptions;

  constructor(options: TaskSuspenderOptions) {
    this.#o = options;
  }

  /** Whether the backend can suspend at all. */
  get supported(): boolean {
    return this.#o.capabilities.lifecycle?.suspend === true;
  }

  /** Refuses with FAILED_PRECONDITION naming the backend (and its notes) when it cannot suspend. */
  assertSupported(): void {
    if (this.supported) return;
    const caps = this.#o.capabilities;
    const notes = caps.lifecycle?.notes?.length ? ` (${caps.lifecycle.notes.join('; ')})` : '';
    throw new FailedPreconditionError(
      `the ${caps.name} backend cannot suspend task environments${notes}; end the task instead (EndTask), ` +
        'or run it on a backend that can (berth doctor lists what each can do)',
    );
  }

  /**
   * Suspends `task` now. False when it is suspended already. Throws
   * FAILED_PRECONDITION while a call runs on it.
   */
  async suspend(task: SuspendableTask, reason: SuspendReason): Promise<SuspendOutcome> {
    this.assertSupported();
    while (task.suspension.transition) await task.suspension.transition.catch(() => undefined);
    if (task.suspension.suspended) return { suspended: false, processesKept: false };
    if (task.inFlight > 0) {
      throw new FailedPreconditionError(
        `task '${task.key.taskId}' has a call running; suspend it once its calls have ended (Interrupt stops them)`,
      );
    }
    const env = task.env;
    if (!env.suspend || !env.resume) throw new FailedPreconditionError(`${env.description} cannot be suspended`);
    const processes = task.registry.expectAllToEnd();
    const suspending = env.suspend();
    task.suspension.transition = suspending;
    try {
      const { processesKept } = await suspending.catch((err: unknown) => {
        processes.kept();
        throw err;
      });
      task.suspension.suspended = true;
      if (processesKept) processes.kept();
      else {
        const ended = processes.ended();
        if (ended > 0) task.pendingNotices.push(processesEndedNotice(ended));
      }
      this.#o.metrics?.taskSuspended(reason);
      this.#o.logger.info({ tenant: task.key.tenant, task: task.key.taskId, reason, processesKept }, 'task environment suspended');
      return { suspended: true, processesKept };
    } finally {
      task.suspension.transition = undefined;
    }
  }

  /** Resumes `task` if it is suspended; false when it was not. */
  async resume(task: SuspendableTask): Promise<boolean> {
    while (task.suspension.transition) await task.suspension.transition.catch(() => undefined);
    if (!task.suspension.suspended) return false;
    const env = task.env;
    const startedMs = performance.now();
    const resuming = env.resume?.() ?? Promise.resolve();
    task.suspension.transition = resuming;
    try {
      await resuming;
      task.suspension.suspended = false;
      this.#o.metrics?.taskResumed((performance.now() - startedMs) / 1000);
      this.#o.logger.info({ tenant: task.key.tenant, task: task.key.taskId }, 'task environment resumed');
      return true;
    } catch (err) {
      this.#o.logger.warn({ err, task: taskKeyString(task.key) }, 'resuming a task environment failed');
      throw err;
    } finally {
      task.suspension.transition = undefined;
    }
  }

  /**
   * Counts a call in flight on `task`, once no suspension or resumption is
   * under way and the task is resumed (counted synchronously after the
   * check, so no suspension starts in between).
   */
  async enter(task: SuspendableTask): Promise<void> {
    for (;;) {
      const s = task.suspension;
      if (s.transition) {
        await s.transition.catch(() => undefined);
        continue;
      }
      if (s.suspended) {
        await this.resume(task);
        continue;
      }
      task.inFlight += 1;
      return;
    }
  }
}
