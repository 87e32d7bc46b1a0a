/**
 * The tasks that have an environment on this executor, and each one's life:
 * made lazily on a task's first call (or from a snapshot, for a fork),
 * counted while calls use it, held alone by an exclusive operation (a
 * snapshot), suspended and released when idle (task-idle.ts,
 * task-suspension.ts), released by EndTask and at shutdown.
 *
 * Idle tasks are released after `lifetimeSeconds` without calls, unless a
 * background process is still running. The next call creates a fresh
 * environment and says so in its notices. On a backend that can suspend,
 * idle tasks are suspended first, after `idleSuspendSeconds`; any call
 * resumes them.
 */
import { FailedPreconditionError, NotFoundError, UnavailableError } from '../common/errors.js';
import { InterruptedBeforeStartError, unlessAborted } from '../common/interrupts.js';
import type { Logger } from '../common/logging.js';
import type { Backend, BackendEnvironment, BackendSnapshot, TaskKey } from './backend.js';
import { taskKeyString } from './backend.js';
import type { EnvironmentMetrics, ReleaseReason, SuspensionMetrics } from './executor-metrics.js';
import type { ProcessEvent } from './process-registry.js';
import type { ShellStateRunner } from './shell-state/shell-state-runner.js';
import { disposeCompanions } from './task-companions.js';
import { IdleTimers } from './task-idle.js';
import { TaskProcessEvents } from './task-process-events.js';
import { newTaskState, type TaskProcessOptions, type TaskRunnerOptions, type TaskState } from './task-state.js';
import { TaskSuspender, type SuspendOutcome } from './task-suspension.js';

/** How many reaped task ids are remembered, to tell their next call the environment is new. */
const REAPED_MEMORY = 1000;

export interface TaskTableOptions {
  readonly backend: Backend;
  readonly logger: Logger;
  /** Idle time before a task without running background processes is released; default 300. 0 disables reaping. */
  readonly lifetimeSeconds?: number;
  /** Idle time before a task is suspended (backends that can suspend); default 0: never. */
  readonly idleSuspendSeconds?: number;
  /** Limits for each task's background processes. */
  readonly processes?: TaskProcessOptions;
  readonly runner?: TaskRunnerOptions;
  /**
   * Events of background processes for the agent (completions, watch
   * matches, heartbeats). A watch-overflow summary (no `session_id`) goes to
   * every task of the tenant that has a process watching its output.
   */
  readonly onProcessEvent?: (key: TaskKey, event: ProcessEvent) => void;
  /** Told when environments are created and released; absent: metrics are off. */
  readonly metrics?: EnvironmentMetrics & Partial<SuspensionMetrics>;
}

export class TaskTable {
  readonly #backend: Backend;
  readonly #logger: Logger;
  readonly #lifetimeMs: number;
  readonly #suspender: TaskSuspender;
  readonly #idle: IdleTimers;
  readonly #processOptions: TaskProcessOptions;
  readonly #runnerOptions: TaskRunnerOptions;
  readonly #processEvents: TaskProcessEvents;
  readonly #metrics: (EnvironmentMetrics & Partial<SuspensionMetrics>) | undefined;
  readonly #tasks = new Map<string, Promise<TaskState>>();
  /** Tasks whose environment is ready, for synchronous access (interrupt). */
  readonly #settled = new Map<string, TaskState>();
  /** Releases in progress; a new environment for the same task waits for the old one to go. */
  readonly #releasing = new Map<string, Promise<void>>();
  readonly #reaped = new Set<string>();
  #closed = false;
  #draining = false;

  constructor(options: TaskTableOptions) {
    this.#backend = options.backend;
    this.#logger = options.logger;
    this.#lifetimeMs = (options.lifetimeSeconds ?? 300) * 1000;
    this.#processOptions = options.processes ?? {};
    this.#runnerOptions = options.runner ?? {};
    this.#processEvents = new TaskProcessEvents(options.onProcessEvent, () => this.#settled.values());
    this.#metrics = options.metrics;
    const metrics = options.metrics;
    this.#suspender = new TaskSuspender({
      capabilities: options.backend.capabilities,
      logger: options.logger,
      ...(metrics?.taskSuspended && metrics.taskResumed && metrics.suspendedTaskReleased
        ? { metrics: metrics as SuspensionMetrics }
        : {}),
    });
    this.#idle = new IdleTimers({
      lifetimeMs: this.#lifetimeMs,
      idleSuspendMs: this.#suspender.supported ? (options.idleSuspendSeconds ?? 0) * 1000 : 0,
      suspender: this.#suspender,
      logger: options.logger,
      current: (task) => !this.#closed && this.#settled.get(taskKeyString(task.key)) === task,
      release: (task) => {
        this.#rememberReaped(taskKeyString(task.key));
        return this.release(task.key, 'idle');
      },
    });
  }

  /** True when the task currently has an environment (created or being created). */
  has(key: TaskKey): boolean {
    return this.#tasks.has(taskKeyString(key));
  }

  /** The task's environment when it is ready, for synchronous access (interrupt). */
  ready(key: TaskKey): TaskState | undefined {
    return this.#settled.get(taskKeyString(key));
  }

  /**
   * Every task with an environment here (created or being created) and the
   * companions it holds, for the dispatcher's quotas (TaskUsage).
   */
  liveTasks(): Array<{ key: TaskKey; companions: string[] }> {
    return [...this.#tasks.keys()].map((id) => {
      const state = this.#settled.get(id);
      const slash = id.indexOf('/');
      const key = state?.key ?? { tenant: id.slice(0, slash), taskId: id.slice(slash + 1) };
      return { key, companions: state ? [...state.companions.keys()] : [] };
    });
  }

  /** The task's current working directory, if it has an environment. */
  async cwd(key: TaskKey): Promise<string | undefined> {
    const entry = this.#tasks.get(taskKeyString(key));
    return entry ? (await entry).runner.cwd : undefined;
  }

  /**
   * Suspends the task's environment (task-suspension.ts). A task without an
   * environment here answers `suspended: false`. FAILED_PRECONDITION when
   * the backend cannot suspend, or while a call runs on the task.
   */
  async suspend(key: TaskKey): Promise<SuspendOutcome> {
    this.assertOpen();
    this.#suspender.assertSupported();
    const state = await this.#existing(key);
    if (!state) return { suspended: false, processesKept: false };
    if (state.inFlight === 0) clearTimeout(state.idleTimer);
    try {
      return await this.#suspender.suspend(state, 'explicit');
    } finally {
      if (state.inFlight === 0) this.#idle.schedule(state);
    }
  }

  /** Resumes the task's suspended environment now; false when it has none or it is not suspended. */
  async resume(key: TaskKey): Promise<boolean> {
    this.assertOpen();
    this.#suspender.assertSupported();
    const state = await this.#existing(key);
    if (!state) return false;
    const resumed = await this.#suspender.resume(state);
    if (resumed && state.inFlight === 0) this.#idle.schedule(state);
    return resumed;
  }

  /** Whether the task's environment is suspended now. */
  isSuspended(key: TaskKey): boolean {
    return this.#settled.get(taskKeyString(key))?.suspension.suspended === true;
  }

  /** The task's environment if it has one (waiting for one being made); never makes one. */
  async #existing(key: TaskKey): Promise<TaskState | undefined> {
    const entry = this.#tasks.get(taskKeyString(key));
    return entry?.catch(() => undefined);
  }

  /** Kills the task's processes and removes its environment. False when it had none. */
  async release(key: TaskKey, reason: ReleaseReason = 'end_task'): Promise<boolean> {
    const id = taskKeyString(key);
    const entry = this.#tasks.get(id);
    if (!entry) return false;
    this.#tasks.delete(id);
    this.#settled.delete(id);
    const releasing = (async () => {
      let state: TaskState;
      try {
        state = await entry;
      } catch {
        return; // Creation failed; nothing to release.
      }
      state.released = true;
      this.#metrics?.environmentReleased(reason);
      await state.suspension.transition?.catch(() => undefined);
      if (state.suspension.suspended) this.#metrics?.suspendedTaskReleased?.();
      clearTimeout(state.idleTimer);
      for (const c of state.foreground) c.abort();
      await state.registry.closeAll();
      await disposeCompanions(state, this.#logger);
      await state.env.dispose(reason);
    })();
    this.#releasing.set(id, releasing);
    try {
      await releasing;
    } finally {
      if (this.#releasing.get(id) === releasing) this.#releasing.delete(id);
    }
    return true;
  }

  /**
   * Takes no new tasks from now on: a call for a task without an environment
   * here gets UNAVAILABLE "is draining" (the dispatcher places it elsewhere);
   * tasks that have one carry on until {@link closeAll}.
   */
  drain(): void {
    this.#draining = true;
  }

  /** Releases every task; later calls fail. */
  async closeAll(): Promise<void> {
    this.#closed = true;
    const keys = await Promise.all(
      [...this.#tasks.values()].map((p) => p.then((s) => s.key).catch(() => undefined)),
    );
    await Promise.all(keys.filter((k): k is TaskKey => k !== undefined).map((k) => this.release(k, 'shutdown')));
    await Promise.all(this.#releasing.values());
  }

  assertOpen(): void {
    if (this.#closed) throw new UnavailableError('the executor is shutting down');
  }

  /**
   * Runs `fn` with the task's environment, created first if need be. When
   * `signal` aborts before the environment is ready (it is being created,
   * or a release must finish first), rejects at once with
   * InterruptedBeforeStartError naming `what`, and `fn` never runs; the
   * environment itself is still made, for the task's next call.
   */
  withTask<T>(key: TaskKey, signal: AbortSignal | undefined, what: string, fn: (state: TaskState) => Promise<T>): Promise<T> {
    return this.#withTask(key, signal, what, fn);
  }

  async #withTask<T>(
    key: TaskKey,
    signal: AbortSignal | undefined,
    what: string,
    fn: (state: TaskState) => Promise<T>,
    holdsTask = false,
    fromSnapshot?: BackendSnapshot,
  ): Promise<T> {
    const state = await unlessAborted(this.#acquire(key, fromSnapshot), signal, what);
    while (state.blocked && !holdsTask) await unlessAborted(state.blocked, signal, what);
    if (signal?.aborted) throw new InterruptedBeforeStartError(what);
    const entered = this.#suspender.enter(state);
    try {
      await unlessAborted(entered, signal, what);
    } catch (err) {
      // Interrupted while the task resumed: the resumption goes on; this call is not counted once it is done.
      entered.then(() => this.#leave(state), () => undefined);
      throw err;
    }
    clearTimeout(state.idleTimer);
    state.idleTimer = undefined;
    try {
      return await fn(state);
    } finally {
      this.#leave(state);
    }
  }

  #leave(state: TaskState): void {
    state.inFlight -= 1;
    if (state.inFlight > 0) return;
    for (const wake of state.drained.splice(0)) wake();
    state.idleSinceMs = Date.now();
    this.#idle.schedule(state);
  }

  /**
   * Runs `fn` alone on the task's existing environment: it waits until the
   * task's foreground work (commands, process waits, scripts) has ended,
   * and none starts until `fn` is done. Background processes keep running.
   * @throws NotFoundError when the task has no environment here.
   */
  async exclusive<T>(key: TaskKey, fn: (task: { env: BackendEnvironment; runner: ShellStateRunner }) => Promise<T>): Promise<T> {
    this.assertOpen();
    const entry = this.#tasks.get(taskKeyString(key));
    if (!entry) throw new NotFoundError(`task '${key.taskId}' has no environment to snapshot; run a command in it first`);
    const state = await entry;
    while (state.blocked) await state.blocked;
    let unblock = () => undefined as void;
    state.blocked = new Promise<void>((resolve) => (unblock = resolve));
    try {
      while (state.inFlight > 0) await new Promise<void>((resolve) => state.drained.push(resolve));
      return await this.#withTask(key, undefined, 'the snapshot', () => fn({ env: state.env, runner: state.runner }), true);
    } finally {
      state.blocked = undefined;
      unblock();
    }
  }

  /**
   * Creates task `key`'s environment from `snapshot` (a fork): its files
   * from the backend, its cwd and shell state from the snapshot's.
   * @throws FailedPreconditionError when the task has an environment already.
   */
  async createFrom(key: TaskKey, snapshot: BackendSnapshot): Promise<void> {
    this.assertOpen();
    const id = taskKeyString(key);
    if (this.#tasks.has(id)) {
      throw new FailedPreconditionError(`task '${key.taskId}' exists already; fork into a new task id (or end that task first)`);
    }
    await this.#withTask(key, undefined, 'the fork', (state) => state.runner.bootstrap(), false, snapshot);
  }

  async #acquire(key: TaskKey, fromSnapshot?: BackendSnapshot): Promise<TaskState> {
    this.assertOpen();
    const id = taskKeyString(key);
    let entry = this.#tasks.get(id);
    if (!entry) {
      if (this.#draining) {
        throw new UnavailableError(`this executor is draining (shutting down): it takes no new tasks; send task ${id} to another executor`);
      }
      entry = this.#create(key, fromSnapshot);
      this.#tasks.set(id, entry);
      const created = entry;
      created.then(
        (state) => {
          if (this.#tasks.get(id) === created) this.#settled.set(id, state);
        },
        () => {
          if (this.#tasks.get(id) === created) this.#tasks.delete(id);
        },
      );
    }
    return entry;
  }

  async #create(key: TaskKey, fromSnapshot?: BackendSnapshot): Promise<TaskState> {
    const id = taskKeyString(key);
    await this.#releasing.get(id);
    const env = await this.#backend.createEnvironment(key, fromSnapshot ? { fromSnapshot } : undefined);
    const logger = this.#logger.child({ tenant: key.tenant, task: key.taskId });
    const state = newTaskState({
      key,
      env,
      logger,
      runner: this.#runnerOptions,
      processes: this.#processOptions,
      watchBreaker: this.#processEvents.breaker(key.tenant),
      onProcessEvent: (event) => this.#processEvents.event(key, event),
      fromSnapshot,
      recreatedNotice: this.#reaped.delete(id)
        ? `The task's environment had been idle for more than ${Math.round(this.#lifetimeMs / 1000)}s and was recreated: ` +
          'the working directory, environment variables and background processes were reset.'
        : undefined,
    });
    logger.info({ environment: env.description }, 'task environment created');
    this.#metrics?.environmentCreated();
    return state;
  }

  #rememberReaped(id: string): void {
    this.#reaped.add(id);
    if (this.#reaped.size > REAPED_MEMORY) {
      const oldest = this.#reaped.values().next();
      if (!oldest.done) this.#reaped.delete(oldest.value);
    }
  }
}
