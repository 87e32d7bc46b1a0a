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
 * environment and says so in its notices.
 */
import { posix } from 'node:path';
import { StringDecoder } from 'node:string_decoder';
import { InvalidArgumentError, UnavailableError } from '../common/errors.js';
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
import type { Backend, BackendCapabilities, BackendEnvironment, TaskKey } from './backend.js';
import { taskKeyString } from './backend.js';
import { HeadTailBuffer, stripAnsi, truncateHeadTail, truncateOutput } from './output.js';
import type { EnvironmentMetrics, ReleaseReason } from './executor-metrics.js';
import { ProcessRegistry, type ProcessEvent, type ProcessRegistryOptions } from './process-registry.js';
import { ShellStateRunner, type ShellStateRunnerOptions } from './shell-state-runner.js';

/** The terminal tool's output cap (spec §3); used when a call names none. */
export const DEFAULT_MAX_OUTPUT_CHARS = 50_000;

/** How many reaped task ids are remembered, to tell their next call the environment is new. */
const REAPED_MEMORY = 1000;

export interface TaskEnvironmentsOptions {
  readonly backend: Backend;
  readonly logger: Logger;
  /** Idle time before a task without running background processes is released; default 300. 0 disables reaping. */
  readonly lifetimeSeconds?: number;
  /** Output cap for exec calls that do not set one; default {@link DEFAULT_MAX_OUTPUT_CHARS}. */
  readonly defaultMaxOutputChars?: number;
  /** Limits for each task's background processes. */
  readonly processes?: Omit<ProcessRegistryOptions, 'launch' | 'onEvent' | 'logger' | 'ownerTaskId'>;
  readonly runner?: Omit<ShellStateRunnerOptions, 'logger'>;
  /** Watch-pattern matches and completions of background processes, for notifications. */
  readonly onProcessEvent?: (key: TaskKey, event: ProcessEvent) => void;
  /** Told when environments are created and released; absent: metrics are off. */
  readonly metrics?: EnvironmentMetrics;
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
}

/** Manages every task's environment on this executor. */
export class TaskEnvironments {
  readonly #backend: Backend;
  readonly #logger: Logger;
  readonly #lifetimeMs: number;
  readonly #defaultMaxOutputChars: number;
  readonly #processOptions: Omit<ProcessRegistryOptions, 'launch' | 'onEvent' | 'logger' | 'ownerTaskId'>;
  readonly #runnerOptions: Omit<ShellStateRunnerOptions, 'logger'>;
  readonly #onProcessEvent: ((key: TaskKey, event: ProcessEvent) => void) | undefined;
  readonly #metrics: EnvironmentMetrics | undefined;
  readonly #tasks = new Map<string, Promise<TaskState>>();
  /** Tasks whose environment is ready, for synchronous access (interrupt). */
  readonly #settled = new Map<string, TaskState>();
  /** Releases in progress; a new environment for the same task waits for the old one to go. */
  readonly #releasing = new Map<string, Promise<void>>();
  readonly #reaped = new Set<string>();
  /** Answers process actions for tasks that have no environment (nothing to list, ids unknown). */
  readonly #emptyRegistry = new ProcessRegistry({
    launch: () => Promise.reject(new Error('no environment')),
  });
  #closed = false;
  #draining = false;

  constructor(options: TaskEnvironmentsOptions) {
    this.#backend = options.backend;
    this.#logger = options.logger;
    this.#lifetimeMs = (options.lifetimeSeconds ?? 300) * 1000;
    this.#defaultMaxOutputChars = options.defaultMaxOutputChars ?? DEFAULT_MAX_OUTPUT_CHARS;
    this.#processOptions = options.processes ?? {};
    this.#runnerOptions = options.runner ?? {};
    this.#onProcessEvent = options.onProcessEvent;
    this.#metrics = options.metrics;
  }

  get capabilities(): BackendCapabilities {
    return this.#backend.capabilities;
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
  exec(key: TaskKey, request: TaskExecRequest): Promise<TaskExecResult> {
    return this.#withTask(key, async (state) => {
      const controller = new AbortController();
      state.foreground.add(controller);
      const signal = request.signal ? AbortSignal.any([request.signal, controller.signal]) : controller.signal;
      const maxChars = request.maxOutputChars ?? this.#defaultMaxOutputChars;
      const buffer = HeadTailBuffer.forMaxChars(maxChars);
      const live = request.onOutput;
      const decoder = live ? new StringDecoder('utf8') : undefined;
      const notices = state.pendingNotices.splice(0);
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
          onOutput: (chunk) => {
            buffer.push(chunk);
            if (live && decoder) {
              const text = decoder.write(chunk);
              if (text) live(text);
            }
          },
        });
        if (live && decoder) {
          const rest = decoder.end();
          if (rest) live(rest);
        }
        notices.push(...(state.env.takeNotices?.() ?? []));
        if (state.env.takeRecreated?.() === true) recreated = true;
        if (result.cwdResetTo !== undefined) {
          notices.push(`The working directory no longer existed; it was reset to ${result.cwdResetTo}.`);
        }
        const rendered = renderOutput(buffer, maxChars, request.pty ?? false);
        return {
          // When we killed the command, bash's own report of that kill is noise, not output.
          output: result.timedOut || result.interrupted ? dropKillReport(rendered) : rendered,
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
  readFile(key: TaskKey, path: string): Promise<TaskFile> {
    return this.#withTask(key, async (state) => {
      const absPath = this.#resolvePath(state, path);
      return { absPath, content: await state.env.readFile(absPath) };
    });
  }

  /** Writes a file, creating parent directories (`dirsCreated` says whether any were missing). */
  writeFile(key: TaskKey, path: string, content: string | Uint8Array): Promise<TaskWriteResult> {
    return this.#withTask(key, async (state) => {
      const absPath = this.#resolvePath(state, path);
      const bytes = typeof content === 'string' ? Buffer.from(content, 'utf8') : content;
      const parent = await state.env.stat(posix.dirname(absPath));
      await state.env.writeFile(absPath, bytes);
      return { absPath, bytesWritten: bytes.length, dirsCreated: !parent.exists };
    });
  }

  stat(key: TaskKey, path: string): Promise<TaskStat> {
    return this.#withTask(key, async (state) => {
      const absPath = this.#resolvePath(state, path);
      return { absPath, ...(await state.env.stat(absPath)) };
    });
  }

  /** Starts a background process with the task's snapshot and cwd (no state is saved). */
  startBackground(key: TaskKey, request: TaskBackgroundRequest): Promise<{ sessionId: string; pid: number }> {
    return this.#withTask(key, (state) => {
      const workdir = request.workdir !== undefined ? this.#resolvePath(state, request.workdir) : undefined;
      return state.registry.start({
        command: request.command,
        ...(workdir !== undefined ? { workdir } : {}),
        cwd: workdir ?? state.runner.cwd,
        ...(request.pty ? { pty: true } : {}),
        ...(request.notifyOnComplete ? { notifyOnComplete: true } : {}),
        ...(request.watchPatterns ? { watchPatterns: request.watchPatterns } : {}),
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
    return this.#withTask(key, async (state) => {
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
   * first call are handed over.
   */
  withForeground<T>(key: TaskKey, fn: (task: ForegroundTask) => Promise<T>, signal?: AbortSignal): Promise<T> {
    return this.#withTask(key, async (state) => {
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
   * operations were interrupted.
   */
  interrupt(key: TaskKey): number {
    const state = this.#settled.get(taskKeyString(key));
    if (!state) return 0;
    const controllers = [...state.foreground];
    for (const c of controllers) c.abort();
    return controllers.length;
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
      clearTimeout(state.idleTimer);
      for (const c of state.foreground) c.abort();
      await state.registry.closeAll();
      await Promise.all([...state.companions].map(([name, companion]) => this.#disposeCompanion(state, name, companion)));
      await state.env.dispose();
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

  async #withTask<T>(key: TaskKey, fn: (state: TaskState) => Promise<T>): Promise<T> {
    const state = await this.#acquire(key);
    state.inFlight += 1;
    clearTimeout(state.idleTimer);
    state.idleTimer = undefined;
    try {
      return await fn(state);
    } finally {
      state.inFlight -= 1;
      if (state.inFlight === 0) this.#scheduleIdle(state);
    }
  }

  async #acquire(key: TaskKey): Promise<TaskState> {
    this.#assertOpen();
    const id = taskKeyString(key);
    let entry = this.#tasks.get(id);
    if (!entry) {
      if (this.#draining) {
        throw new UnavailableError(`this executor is draining (shutting down): it takes no new tasks; send task ${id} to another executor`);
      }
      entry = this.#create(key);
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

  async #create(key: TaskKey): Promise<TaskState> {
    const id = taskKeyString(key);
    await this.#releasing.get(id);
    const env = await this.#backend.createEnvironment(key);
    const logger = this.#logger.child({ tenant: key.tenant, task: key.taskId });
    const runner = new ShellStateRunner(env, { ...this.#runnerOptions, logger });
    const registry = new ProcessRegistry({
      ...this.#processOptions,
      ownerTaskId: key.taskId,
      launch: (options) => runner.startBackground(options),
      onEvent: (event) => this.#onProcessEvent?.(key, event),
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
    };
  }

  #scheduleIdle(state: TaskState): void {
    if (this.#lifetimeMs <= 0 || this.#closed) return;
    clearTimeout(state.idleTimer);
    state.idleTimer = setTimeout(() => {
      state.idleTimer = undefined;
      if (state.inFlight > 0) return; // The call in flight reschedules when it ends.
      if (state.registry.hasRunning()) {
        this.#scheduleIdle(state);
        return;
      }
      const id = taskKeyString(state.key);
      if (this.#settled.get(id) !== state) return;
      this.#logger.info({ tenant: state.key.tenant, task: state.key.taskId }, 'releasing idle task environment');
      this.#rememberReaped(id);
      this.release(state.key, 'idle').catch((err: unknown) =>
        this.#logger.warn({ err, tenant: state.key.tenant, task: state.key.taskId }, 'releasing an idle task failed'),
      );
    }, this.#lifetimeMs);
    // Reaping must never keep the executor process alive on its own.
    state.idleTimer.unref();
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

/**
 * Turns what the buffer kept into the model's output: ANSI stripped, PTY line
 * endings normalised, head/tail-truncated to `maxChars` with the spec notice.
 */
function renderOutput(buffer: HeadTailBuffer, maxChars: number, pty: boolean): string {
  const clean = (text: string) => {
    const stripped = stripAnsi(text);
    return pty ? stripped.replaceAll('\r\n', '\n') : stripped;
  };
  const { head, tail, omittedChars } = buffer.text();
  if (omittedChars === 0 && tail === '') return truncateOutput(clean(head), maxChars);
  return truncateHeadTail(clean(head), clean(tail), omittedChars, maxChars);
}

/**
 * bash prints `Terminated` (or `bash: line 3:  1234 Killed  sleep 30`) when a
 * job it waits for dies by the signal we sent on timeout or interrupt. Drop
 * that last line so the output is what the command printed.
 */
export function dropKillReport(output: string): string {
  return output.replace(/(^|\n)(?:bash: line \d+: +\d+ )?(?:Terminated|Killed)(?: +[^\n]*)?\n?$/, '$1');
}
