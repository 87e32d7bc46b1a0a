/**
 * One task's environment on this executor and what goes with it: the backend
 * environment, its shell-state runner and background processes, and what the
 * task table keeps of the task's calls, idle time, suspension and companions.
 */
import type { Logger } from '../common/logging.js';
import type { BackendEnvironment, BackendSnapshot, TaskKey } from './backend.js';
import { ProcessRegistry, type ProcessEvent, type ProcessRegistryOptions } from './process-registry.js';
import { ShellStateRunner, type ShellStateRunnerOptions } from './shell-state/shell-state-runner.js';
import type { TaskCompanion } from './task-companions.js';
import { activeSuspension, type SuspensionState } from './task-suspension.js';
import type { WatchBreaker } from './watch-breaker.js';

/** Limits for each task's background processes (what the task table does not set itself). */
export type TaskProcessOptions = Omit<ProcessRegistryOptions, 'launch' | 'onEvent' | 'logger' | 'ownerTaskId' | 'watchBreaker'>;

/** Options of each task's shell-state runner (the task's logger is set by the task table). */
export type TaskRunnerOptions = Omit<ShellStateRunnerOptions, 'logger'>;

export interface TaskState {
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
  /** The task's companions (task-companions.ts). */
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

export interface NewTaskState {
  readonly key: TaskKey;
  readonly env: BackendEnvironment;
  /** The task's own logger. */
  readonly logger: Logger;
  readonly runner: TaskRunnerOptions;
  readonly processes: TaskProcessOptions;
  /** The tenant's watch-match breaker. */
  readonly watchBreaker: WatchBreaker;
  readonly onProcessEvent: (event: ProcessEvent) => void;
  /** A fork's snapshot: the runner starts from its shell state. */
  readonly fromSnapshot?: BackendSnapshot | undefined;
  /** Set when the environment replaces one released while idle: the notice the first call gets. */
  readonly recreatedNotice?: string | undefined;
}

/** A task's state around its new environment: a runner on it, an empty process registry, no call yet. */
export function newTaskState(o: NewTaskState): TaskState {
  const runner = new ShellStateRunner(o.env, { ...o.runner, logger: o.logger, ...(o.fromSnapshot ? { seed: o.fromSnapshot.shell } : {}) });
  const registry = new ProcessRegistry({
    ...o.processes,
    ownerTaskId: o.key.taskId,
    launch: (options) => runner.startBackground(options),
    watchBreaker: o.watchBreaker,
    onEvent: o.onProcessEvent,
    logger: o.logger,
  });
  return {
    key: o.key,
    env: o.env,
    runner,
    registry,
    foreground: new Set(),
    inFlight: 0,
    idleTimer: undefined,
    pendingNotices: o.recreatedNotice === undefined ? [] : [o.recreatedNotice],
    pendingRecreated: o.recreatedNotice !== undefined,
    companions: new Map(),
    released: false,
    suspension: activeSuspension(),
    idleSinceMs: Date.now(),
    blocked: undefined,
    drained: [],
  };
}
