/**
 * Task environments on one executor: the calls of a task on its backend
 * environment, with its shell-state runner and background processes. The
 * methods mirror the dispatcher's TaskClient, keyed by task; the environments
 * themselves (made lazily, suspended and released when idle) are the task
 * table's (task-table.ts).
 *
 * Concurrent calls on one task are allowed; each command is its own bash. If
 * two commands run at once, each starts from the cwd current when it started
 * and the one that finishes last decides the task's cwd and exported state
 * (last writer wins).
 */
import { posix } from 'node:path';
import { InterruptedBeforeStartError } from '../common/interrupts.js';
import { linkSignals } from '../common/linked-signal.js';
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
import type { ReleaseReason } from './executor-metrics.js';
import { ProcessRegistry } from './process-registry.js';
import type { ShellStateRunner } from './shell-state/shell-state-runner.js';
import { taskCompanion, type TaskCompanion } from './task-companions.js';
import { TaskLifecycle } from './task-lifecycle.js';
import { CommandOutput } from './task-output.js';
import { resolveTaskPath } from './task-paths.js';
import type { TaskState } from './task-state.js';
import type { SuspendOutcome } from './task-suspension.js';
import { TaskTable, type TaskTableOptions } from './task-table.js';

/** The terminal tool's output cap (spec §3); used when a call names none. */
export const DEFAULT_MAX_OUTPUT_CHARS = 50_000;

export interface TaskEnvironmentsOptions extends TaskTableOptions {
  /** Output cap for exec calls that do not set one; default {@link DEFAULT_MAX_OUTPUT_CHARS}. */
  readonly defaultMaxOutputChars?: number;
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

/** Manages every task's environment on this executor. */
export class TaskEnvironments {
  readonly #backend: Backend;
  readonly #tasks: TaskTable;
  readonly #defaultMaxOutputChars: number;
  /** Answers process actions for tasks that have no environment (nothing to list, ids unknown). */
  readonly #emptyRegistry = new ProcessRegistry({
    launch: () => Promise.reject(new Error('no environment')),
  });
  #lifecycle: TaskLifecycle | undefined;

  constructor(options: TaskEnvironmentsOptions) {
    this.#backend = options.backend;
    this.#tasks = new TaskTable(options);
    this.#defaultMaxOutputChars = options.defaultMaxOutputChars ?? DEFAULT_MAX_OUTPUT_CHARS;
  }

  get capabilities(): BackendCapabilities {
    return this.#backend.capabilities;
  }

  /** Snapshots and forks of these environments (docs/lifecycle.md). */
  get lifecycle(): TaskLifecycle {
    this.#lifecycle ??= new TaskLifecycle(this.#tasks, this.#backend);
    return this.#lifecycle;
  }

  /** True when the task currently has an environment (created or being created). */
  has(key: TaskKey): boolean {
    return this.#tasks.has(key);
  }

  /** {@link TaskTable.liveTasks}: the tasks with an environment here and their companions (TaskUsage). */
  liveTasks(): Array<{ key: TaskKey; companions: string[] }> {
    return this.#tasks.liveTasks();
  }

  /** The task's current working directory, if it has an environment. */
  cwd(key: TaskKey): Promise<string | undefined> {
    return this.#tasks.cwd(key);
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
    return this.#tasks.withTask(key, request.signal, 'the command', async (state) => {
      const controller = new AbortController();
      state.foreground.add(controller);
      const linked = linkSignals(request.signal, controller.signal);
      const output = new CommandOutput(request.maxOutputChars ?? this.#defaultMaxOutputChars, request.onOutput);
      notices.push(...state.pendingNotices.splice(0));
      let recreated = state.pendingRecreated;
      state.pendingRecreated = false;
      try {
        const result = await state.runner.run({
          command: request.command,
          timeoutMs: request.timeoutMs,
          ...(request.workdir !== undefined ? { workdir: pathIn(state, request.workdir) } : {}),
          ...(request.stdin !== undefined ? { stdin: request.stdin } : {}),
          ...(request.pty ? { pty: true } : {}),
          ...(request.stateless ? { stateless: true } : {}),
          signal: linked.signal,
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
        linked.done();
        state.foreground.delete(controller);
      }
    });
  }

  /** Reads a file; relative paths are against the task's cwd, `~` is the environment's home. */
  readFile(key: TaskKey, path: string, signal?: AbortSignal): Promise<TaskFile> {
    return this.#tasks.withTask(key, signal, 'the read', async (state) => {
      const absPath = pathIn(state, path);
      return { absPath, content: await state.env.readFile(absPath) };
    });
  }

  /** Writes a file, creating parent directories (`dirsCreated` says whether any were missing). */
  writeFile(key: TaskKey, path: string, content: string | Uint8Array, signal?: AbortSignal): Promise<TaskWriteResult> {
    return this.#tasks.withTask(key, signal, 'the write', async (state) => {
      const absPath = pathIn(state, path);
      const bytes = typeof content === 'string' ? Buffer.from(content, 'utf8') : content;
      const parent = await state.env.stat(posix.dirname(absPath));
      await state.env.writeFile(absPath, bytes);
      return { absPath, bytesWritten: bytes.length, dirsCreated: !parent.exists };
    });
  }

  stat(key: TaskKey, path: string, signal?: AbortSignal): Promise<TaskStat> {
    return this.#tasks.withTask(key, signal, 'the stat', async (state) => {
      const absPath = pathIn(state, path);
      return { absPath, ...(await state.env.stat(absPath)) };
    });
  }

  /** Starts a background process with the task's snapshot and cwd (no state is saved). */
  startBackground(key: TaskKey, request: TaskBackgroundRequest, signal?: AbortSignal): Promise<{ sessionId: string; pid: number }> {
    return this.#tasks.withTask(key, signal, 'the background start', (state) => {
      const workdir = request.workdir !== undefined ? pathIn(state, request.workdir) : undefined;
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
    this.#tasks.assertOpen();
    if (!this.#tasks.has(key)) return this.#emptyRegistry.handle(request, signal);
    return this.#tasks.withTask(key, undefined, 'the process action', async (state) => {
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
    return this.#tasks.withTask(key, signal, 'the script', async (state) => {
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
          companion: (name, create) => taskCompanion(state, name, create),
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
    const state = this.#tasks.ready(key);
    if (!state) return 0;
    const controllers = [...state.foreground];
    for (const c of controllers) c.abort();
    return controllers.length;
  }

  /** {@link TaskTable.suspend}: suspends the task's environment (`suspended: false` when it has none). */
  suspend(key: TaskKey): Promise<SuspendOutcome> {
    return this.#tasks.suspend(key);
  }

  /** Resumes the task's suspended environment now; false when it has none or it is not suspended. */
  resume(key: TaskKey): Promise<boolean> {
    return this.#tasks.resume(key);
  }

  /** Whether the task's environment is suspended now. */
  isSuspended(key: TaskKey): boolean {
    return this.#tasks.isSuspended(key);
  }

  /** Kills the task's processes and removes its environment. False when it had none. */
  release(key: TaskKey, reason: ReleaseReason = 'end_task'): Promise<boolean> {
    return this.#tasks.release(key, reason);
  }

  /** {@link TaskTable.drain}: takes no new tasks from now on; tasks that have an environment carry on. */
  drain(): void {
    this.#tasks.drain();
  }

  /** Releases every task; later calls fail. */
  closeAll(): Promise<void> {
    return this.#tasks.closeAll();
  }
}

/** Where `path` lies in the task's environment (task-paths.ts). */
function pathIn(state: TaskState, path: string): string {
  return resolveTaskPath(path, state.env, state.runner);
}
