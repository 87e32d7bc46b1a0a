/**
 * Task environments on one executor: a backend environment per task, created
 * lazily on first use, with its shell-state runner and background processes.
 * The methods mirror the dispatcher's TaskClient, keyed by task.
 *
 * Concurrent calls on one task are allowed; each command is its own bash. If
 * two commands run at once, each starts from the cwd current when it started
 * and the one that finishes last decides the task's cwd and exported state
 * (last writer wins).
 *
 * Idle tasks are released after `lifetimeSeconds` without calls, unless a
 * background process is still running. The next call creates a fresh
 * environment and says so in its notices. On a backend that can suspend,
 * idle tasks are suspended first, after `idleSuspendSeconds`
 * (task-suspension.ts); any call resumes them.
 */
import { posix } from 'node:path';
import { FailedPreconditionError, InvalidArgumentError, NotFoundError, UnavailableError } from '../common/errors.js';
import { InterruptedBeforeStartError, unlessAborted } from '../common/interrupts.js';
import type { Logger } from '../common/logging.js';
import type {
  TaskBackgroundRequest,
  TaskExecRequest,
  TaskExecResult,
  TaskFile,
  TaskProcessRequest,
  TaskStat,
  TaskWriteResult,
} from '../common/task-client.js';
import type { Backend, BackendCapabilities, BackendEnvironment, BackendSnapshot, TaskKey } from './backend.js';
import { taskKeyString } from './backend.js';
import type { EnvironmentMetrics, ReleaseReason, SuspensionMetrics } from './executor-metrics.js';
import { ProcessRegistry, type ProcessEvent, type ProcessRegistryOptions } from './process-registry.js';
import { ShellStateRunner, type ShellStateRunnerOptions } from './shell-state/shell-state-runner.js';
import { TaskLifecycle } from './task-lifecycle.js';
import { CommandOutput } from './task-output.js';
import { IdleTimers } from './task-idle.js';
import { activeSuspension, TaskSuspender, type SuspendOutcome, type SuspensionState } from './task-suspension.js';
import { WatchBreaker } from './watch-breaker.js';

/** The terminal tool's output cap (spec §3); used when a call names none. */
export const DEFAULT_MAX_OUTPUT_CHARS = 50_000;

/** How many reaped task ids are remembered, to tell their next call the environment is new. */
const REAPED_MEMORY = 1000;

export interface TaskEnvironmentsOptions {
  readonly backend: Backend;
  readonly logger: Logger;
  /** Idle time before a task without running background processes is released; default 300. 0 disables reaping. */
  readonly lifetimeSeconds?: number;
  /** Idle time before a task is suspended (backends that can suspend); default 0: never. */
  readonly idleSuspendSeconds?: number;
  /** Output cap for exec calls that do not set one; default {@link DEFAULT_MAX_OUTPUT_CHARS}. */
  readonly defaultMaxOutputChars?: number;
  /** Limits for each task's background processes. */
  readonly processes?: Omit<ProcessRegistryOptions, 'launch' | 'onEvent' | 'logger' | 'ownerTaskId' | 'watchBreaker'>;
  readonly runner?: Omit<ShellStateRunnerOptions, 'logger'>;
  /**
   * Events of background processes for the agent (completions, watch
   * matches, heartbeats). A watch-overflow summary (no `session_id`) goes to
   * every task of the tenant that has a process watching its output.
   */
  readonly onProcessEvent?: (key: TaskKey, event: ProcessEvent) => void;
  /** Told when environments are created and released; absent: metrics are off. */
  readonly metrics?: EnvironmentMetrics & Partial<SuspensionMetrics>;
}

/** Something that lives and goes with a task's environment (execute_code's code container). */
export interface TaskCompanion {
  dispose(): Promise<void>;
}

/** What {@link TaskEnvironments.withForeground} hands its callback. */
export interface ForegroundTask {
  readonly env: BackendEnvironment;
  readonly runner: ShellStateRunner;
  /** Aborted by `interrupt` for the task, or by the caller's signal. */
  readonly signal: AbortSignal;
  /** Notices for the task's first call (e.g. the environment was recreated). */
  readonly notices: string[];
  /**
   * The task's companion called `name`: made by `create` on first use, shared
   * by later calls, disposed when the task is released (EndTask, the idle
   * reaper, shutdown). A failed `create` is not kept; the next call tries
   * again. Rejects once the task is being released.
   */
  companion<T extends TaskCompanion>(name: string, create: () => Promise<T>): Promise<T>;
}

interface TaskState {
  readonly key: TaskKey;
  readonly env: BackendEnvironment;
  readonly runner: ShellStateRunner;
  readonly registry: ProcessRegistry;
  /** Foreground operations (exec, process wait) that `interrupt` aborts. */
  readonly foreground: Set<AbortController>;
  inFlight: number;
  idleTimer: NodeJS.Timeout | undefined;
  /** Notices for the first exec after creation. */
  pendingNotices: string[];
  /** The environment replaces one released while idle; told to the first exec. */
  pendingRecreated: boolean;
  /** See {@link ForegroundTask.companion}. */
  readonly companions: Map<string, Promise<TaskCompanion>>;
  /** Set when release begins: no new companions after that. */
  released: boolean;
  readonly suspension: SuspensionState;
  /** When the last call ended (or the environment was made): idle release counts from here, suspended or not. */
  idleSinceMs: number;
  /** Set while an exclusive operation (a snapshot) holds the task: foreground work waits for it. */
  blocked: Promise<void> | undefined;
  /** Told when `inFlight` drops to zero (an exclusive operation waits for it). */
  drained: Array<() => void>;
}

/** Manages every task's environment on this executor. */
export class TaskEnvironments {
  readonly #backend: Backend;
  readonly #logger: Logger;
  readonly #lifetimeMs: number;
  readonly #suspender: TaskSuspender;
  readonly #idle: IdleTimers;
  readonly #defaultMaxOutputChars: number;
  readonly #processOptions: Omit<ProcessRegistryOptions, 'launch' | 'onEvent' | 'logger' | 'ownerTaskId' | 'watchBreaker'>;
  readonly #runnerOptions: Omit<ShellStateRunnerOptions, 'logger'>;
  readonly #onProcessEvent: ((key: TaskKey, event: ProcessEvent) => void) | undefined;
  readonly #metrics: (EnvironmentMetrics & Partial<SuspensionMetrics>) | undefined;
  readonly #tasks = new Map<string, Promise<TaskState>>();
  /** Tasks whose environment is ready, for synchronous access (interrupt). */
  readonly #settled = new Map<string, TaskState>();
  /** Releases in progress; a new environment for the same task waits for the old one to go. */
  readonly #releasing = new Map<string, Promise<void>>();
  readonly #reaped = new Set<string>();
  /** One watch-match breaker per tenant: a tenant's flood never silences another tenant's watches. */
  readonly #watchBreakers = new Map<string, WatchBreaker>();
  /** Answers process actions for tasks that have no environment (nothing to list, ids unknown). */
  readonly #emptyRegistry = new ProcessRegistry({
    launch: () => Promise.reject(new Error('no environment')),
  });
  #closed = false;
  #draining = false;
  #lifecycle: TaskLifecycle | undefined;

  constructor(options: TaskEnvironmentsOptions) {
    this.#backend = options.backend;
    this.#logger = options.logger;
    this.#lifetimeMs = (options.lifetimeSeconds ?? 300) * 1000;
    this.#defaultMaxOutputChars = options.defaultMaxOutputChars ?? DEFAULT_MAX_OUTPUT_CHARS;
    this.#processOptions = options.processes ?? {};
    this.#runnerOptions = options.runner ?? {};
    this.#onProcessEvent = options.onProcessEvent;
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

  get capabilities(): BackendCapabilities {
    return this.#backend.capabilities;
  }

  /** Snapshots and forks of these environments (docs/lifecycle.md). */
  get lifecycle(): TaskLifecycle {
    this.#lifecycle ??= new TaskLifecycle(this, this.#backend);
    return this.#lifecycle;
  }

  /** True when the task currently has an environment (created or being created). */
  has(key: TaskKey): boolean {
    return this.#tasks.has(taskKeyString(key));
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
   * Runs a command with the task's persistent shell state. The output has
   * stderr merged, ANSI escapes stripped, the cwd marker removed, and is
   * head/tail-truncated to `maxOutputChars`; memory stays bounded whatever
   * the command prints. `onOutput` receives the raw text as produced.
   */
  async exec(key: TaskKey, request: TaskExecRequest): Promise<TaskExecResult> {
    const notices: string[] = [];
    try {
      return await this.#exec(key, request, notices);
    } catch (err) {
      // Interrupted before the command started (the environment was being created or replaced): nothing ran.
      if (!(err instanceof InterruptedBeforeStartError)) throw err;
      return { output: '', exitCode: 130, timedOut: false, interrupted: true, notices };
    }
  }

  #exec(key: TaskKey, request: TaskExecRequest, notices: string[]): Promise<TaskExecResult> {
    return this.#withTask(key, request.signal, 'the command', async (state) => {
      const controller = new AbortController();
      state.foreground.add(controller);
      const signal = request.signal ? AbortSignal.any([request.signal, controller.signal]) : controller.signal;
      const output = new CommandOutput(request.maxOutputChars ?? this.#defaultMaxOutputChars, request.onOutput);
      notices.push(...state.pendingNotices.splice(0));
      let recreated = state.pendingRecreated;
      state.pendingRecreated = false;
      try {
        const result = await state.runner.run({
          command: request.command,
          timeoutMs: request.timeoutMs,
          ...(request.workdir !== undefined ? { workdir: this.#resolvePath(state, request.workdir) } : {}),
          ...(request.stdin !== undefined ? { stdin: request.stdin } : {}),
          ...(request.pty ? { pty: true } : {}),
          ...(request.stateless ? { stateless: true } : {}),
          signal,
          onOutput: (chunk) => output.push(chunk),
        });
        output.end();
        notices.push(...(state.env.takeNotices?.() ?? []));
        if (state.env.takeRecreated?.() === true) recreated = true;
        if (result.cwdResetTo !== undefined) {
          notices.push(`The working directory no longer existed; it was reset to ${result.cwdResetTo}.`);
        }
        return {
          output: output.render(request.pty ?? false, result.timedOut || result.interrupted),
          exitCode: result.exitCode,
          timedOut: result.timedOut,
          interrupted: result.interrupted,
          notices,
          ...(result.cwdReport ? { startCwd: result.cwdReport.start, endCwd: result.cwdReport.end } : {}),
          ...(recreated ? { environmentRecreated: true } : {}),
        };
      } finally {
        state.foreground.delete(controller);
      }
    });
  }

  /** Reads a file; relative paths are against the task's cwd, `~` is the environment's home. */
  readFile(key: TaskKey, path: string, signal?: AbortSignal): Promise<TaskFile> {
    return this.#withTask(key, signal, 'the read', async (state) => {
      const absPath = this.#resolvePath(state, path);
      return { absPath, content: await state.env.readFile(absPath) };
    });
  }

  /** Writes a file, creating parent directories (`dirsCreated` says whether any were missing). */
  writeFile(key: TaskKey, path: string, content: string | Uint8Array, signal?: AbortSignal): Promise<TaskWriteResult> {
    return this.#withTask(key, signal, 'the write', async (state) => {
      const absPath = this.#resolvePath(state, path);
      const bytes = typeof content === 'string' ? Buffer.from(content, 'utf8') : content;
      const parent = await state.env.stat(posix.dirname(absPath));
      await state.env.writeFile(absPath, bytes);
      return { absPath, bytesWritten: bytes.length, dirsCreated: !parent.exists };
    });
  }

  stat(key: TaskKey, path: string, signal?: AbortSignal): Promise<TaskStat> {
    return this.#withTask(key, signal, 'the stat', async (state) => {
      const absPath = this.#resolvePath(state, path);
      return { absPath, ...(await state.env.stat(absPath)) };
    });
  }

  /** Starts a background process with the task's snapshot and cwd (no state is saved). */
  startBackground(key: TaskKey, request: TaskBackgroundRequest, signal?: AbortSignal): Promise<{ sessionId: string; pid: number }> {
    return this.#withTask(key, signal, 'the background start', (state) => {
      const workdir = request.workdir !== undefined ? this.#resolvePath(state, request.workdir) : undefined;
      return state.registry.start({
        command: request.command,
        ...(workdir !== undefined ? { workdir } : {}),
        cwd: workdir ?? state.runner.cwd,
        ...(request.pty ? { pty: true } : {}),
        ...(request.pipeStdin ? { pipeStdin: true } : {}),
        ...(request.notifyOnComplete ? { notifyOnComplete: true } : {}),
        ...(request.watchPatterns ? { watchPatterns: request.watchPatterns } : {}),
        ...(request.heartbeatSeconds ? { heartbeatSeconds: request.heartbeatSeconds } : {}),
        ...(request.persistOnRelease ? { persistOnRelease: true } : {}),
      });
    });
  }

  /**
   * Runs a `process` tool action and returns its result JSON (shapes in
   * process-registry.ts). A task without an environment has no processes;
   * asking about one does not create an environment.
   */
  async process(key: TaskKey, request: TaskProcessRequest, signal?: AbortSignal): Promise<string> {
    this.#assertOpen();
    const entry = this.#tasks.get(taskKeyString(key));
    if (!entry) return this.#emptyRegistry.handle(request, signal);
    return this.#withTask(key, undefined, 'the process action', async (state) => {
      const controller = new AbortController();
      state.foreground.add(controller);
      try {
        const combined = signal ? AbortSignal.any([signal, controller.signal]) : controller.signal;
        return await state.registry.handle(request, combined);
      } finally {
        state.foreground.delete(controller);
      }
    });
  }

  /**
   * Runs `fn` as one foreground operation of the task, with its backend
   * environment and shell-state runner: `interrupt` aborts the signal `fn`
   * gets, and the task is not reaped while `fn` runs. For work made of
   * several backend calls (execute_code). Notices pending for the task's
   * first call are handed over. Rejects with InterruptedBeforeStartError when
   * `signal` aborts before the environment is ready (`fn` is not called).
   */
  withForeground<T>(key: TaskKey, fn: (task: ForegroundTask) => Promise<T>, signal?: AbortSignal): Promise<T> {
    return this.#withTask(key, signal, 'the script', async (state) => {
      const controller = new AbortController();
      state.foreground.add(controller);
      // The notices go to this operation's result; so does the flag that goes with them (execute_code shows no flag).
      state.pendingRecreated = false;
      state.env.takeRecreated?.();
      try {
        return await fn({
          env: state.env,
          runner: state.runner,
          signal: signal ? AbortSignal.any([signal, controller.signal]) : controller.signal,
          notices: [...state.pendingNotices.splice(0), ...(state.env.takeNotices?.() ?? [])],
          companion: (name, create) => this.#companion(state, name, create),
        });
      } finally {
        state.foreground.delete(controller);
      }
    });
  }

  /**
   * Aborts the task's running foreground commands (they end with exit 130)
   * and process waits. Background processes keep running. Returns how many
   * operations were interrupted. (The executor service interrupts whole
   * calls instead, including those still waiting for the environment: see
   * call-interrupts.ts.)
   */
  interrupt(key: TaskKey): number {
    const state = this.#settled.get(taskKeyString(key));
    if (!state) return 0;
    const controllers = [...state.foreground];
    for (const c of controllers) c.abort();
    return controllers.length;
  }

  /**
   * Suspends the task's environment (task-suspension.ts). A task without an
   * environment here answers `suspended: false`. FAILED_PRECONDITION when
   * the backend cannot suspend, or while a call runs on the task.
   */
  async suspend(key: TaskKey): Promise<SuspendOutcome> {
    this.#assertOpen();
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
    this.#assertOpen();
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
      await Promise.all([...state.companions].map(([name, companion]) => this.#disposeCompanion(state, name, companion)));
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

  #companion<T extends TaskCompanion>(state: TaskState, name: string, create: () => Promise<T>): Promise<T> {
    if (state.released) {
      return Promise.reject(new UnavailableError(`task ${taskKeyString(state.key)} was released while it was being used`));
    }
    let entry = state.companions.get(name);
    if (!entry) {
      const created = create();
      entry = created;
      state.companions.set(name, created);
      created.catch(() => {
        if (state.companions.get(name) === created) state.companions.delete(name);
      });
    }
    return entry as Promise<T>;
  }

  /** Disposes one companion of a released task; one that was never made, or fails to go, does not stop the release. */
  async #disposeCompanion(state: TaskState, name: string, companion: Promise<TaskCompanion>): Promise<void> {
    let made: TaskCompanion;
    try {
      made = await companion;
    } catch {
      return;
    }
    await made.dispose().catch((err: unknown) =>
      this.#logger.warn({ err, tenant: state.key.tenant, task: state.key.taskId, companion: name }, 'disposing a task companion failed'),
    );
  }

  #assertOpen(): void {
    if (this.#closed) throw new UnavailableError('the executor is shutting down');
  }

  /**
   * Runs `fn` with the task's environment, created first if need be. When
   * `signal` aborts before the environment is ready (it is being created,
   * or a release must finish first), rejects at once with
   * InterruptedBeforeStartError naming `what`, and `fn` never runs; the
   * environment itself is still made, for the task's next call.
   */
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
    this.#assertOpen();
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
    this.#assertOpen();
    const id = taskKeyString(key);
    if (this.#tasks.has(id)) {
      throw new FailedPreconditionError(`task '${key.taskId}' exists already; fork into a new task id (or end that task first)`);
    }
    await this.#withTask(key, undefined, 'the fork', (state) => state.runner.bootstrap(), false, snapshot);
  }

  async #acquire(key: TaskKey, fromSnapshot?: BackendSnapshot): Promise<TaskState> {
    this.#assertOpen();
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
    const runner = new ShellStateRunner(env, { ...this.#runnerOptions, logger, ...(fromSnapshot ? { seed: fromSnapshot.shell } : {}) });
    const registry = new ProcessRegistry({
      ...this.#processOptions,
      ownerTaskId: key.taskId,
      launch: (options) => runner.startBackground(options),
      watchBreaker: this.#watchBreaker(key.tenant),
      onEvent: (event) => this.#processEvent(key, event),
      logger,
    });
    const pendingNotices: string[] = [];
    const reaped = this.#reaped.delete(id);
    if (reaped) {
      pendingNotices.push(
        `The task's environment had been idle for more than ${Math.round(this.#lifetimeMs / 1000)}s and was recreated: ` +
          'the working directory, environment variables and background processes were reset.',
      );
    }
    logger.info({ environment: env.description }, 'task environment created');
    this.#metrics?.environmentCreated();
    return {
      key,
      env,
      runner,
      registry,
      foreground: new Set(),
      inFlight: 0,
      idleTimer: undefined,
      pendingNotices,
      pendingRecreated: reaped,
      companions: new Map(),
      released: false,
      suspension: activeSuspension(),
      idleSinceMs: Date.now(),
      blocked: undefined,
      drained: [],
    };
  }

  #watchBreaker(tenant: string): WatchBreaker {
    let breaker = this.#watchBreakers.get(tenant);
    if (!breaker) {
      breaker = new WatchBreaker();
      this.#watchBreakers.set(tenant, breaker);
    }
    return breaker;
  }

  /** An event of one task's process goes to that task; a breaker summary to every watching task of the tenant. */
  #processEvent(key: TaskKey, event: ProcessEvent): void {
    if (!this.#onProcessEvent) return;
    if (event.session_id !== '') {
      this.#onProcessEvent(key, event);
      return;
    }
    const targets = new Map([[taskKeyString(key), key]]);
    for (const state of this.#settled.values()) {
      if (state.key.tenant === key.tenant && state.registry.isWatching()) targets.set(taskKeyString(state.key), state.key);
    }
    for (const target of targets.values()) this.#onProcessEvent(target, event);
  }

  #rememberReaped(id: string): void {
    this.#reaped.add(id);
    if (this.#reaped.size > REAPED_MEMORY) {
      const oldest = this.#reaped.values().next();
      if (!oldest.done) this.#reaped.delete(oldest.value);
    }
  }

  /** Relative paths resolve against the task's cwd; `~` and `~/...` against the environment's home. */
  #resolvePath(state: TaskState, path: string): string {
    if (path === '') throw new InvalidArgumentError('path must not be empty');
    if (path.includes('\0')) throw new InvalidArgumentError('path must not contain NUL characters');
    if (path === '~') return posix.normalize(state.env.homeDir);
    if (path.startsWith('~/')) return posix.join(state.env.homeDir, path.slice(2));
    if (path.startsWith('/')) return posix.normalize(path);
    return posix.resolve(state.runner.cwd, path);
  }
}
