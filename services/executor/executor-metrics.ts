/**
 * The executor's metrics: live task environments, environments created and
 * released, docker container starts, execute_code runs. Every series carries
 * the executor's backend.
 */
import { counter, gauge, histogram, Series, type Registry } from '../common/metrics.js';
import type { ContainerStartKind, ContainerStartSink } from './backend.js';

/** Why a task's environment went: EndTask, the idle reaper, or the executor shutting down. */
export type ReleaseReason = 'end_task' | 'idle' | 'shutdown';

/** How an execute_code script ended; `failed`: it could not be run (setup error). */
export type CodeRunOutcome = 'success' | 'error' | 'timeout' | 'interrupted' | 'failed';

/** Why a task's environment was suspended: a Suspend call, or idle time past idle_suspend_after_s. */
export type SuspendMetricReason = 'explicit' | 'idle';

/** What TaskEnvironments reports. */
export interface EnvironmentMetrics {
  environmentCreated(): void;
  environmentReleased(reason: ReleaseReason): void;
}

/** What task suspension reports (task-suspension.ts). */
export interface SuspensionMetrics {
  taskSuspended(reason: SuspendMetricReason): void;
  /** A suspended task was resumed; it took `seconds`. */
  taskResumed(seconds: number): void;
  /** A suspended task was released without being resumed (EndTask, idle release, shutdown). */
  suspendedTaskReleased(): void;
}

/** Resume latency buckets, seconds: the target is 0.3. */
const RESUME_BUCKETS = [0.05, 0.1, 0.2, 0.3, 0.5, 1, 2, 5, 10];

export class ExecutorMetrics implements EnvironmentMetrics, SuspensionMetrics {
  readonly #live: { inc(): void; dec(): void };
  readonly #created: { inc(): void };
  readonly #released: Series<{ inc(): void }, ReleaseReason>;
  readonly #containerStarts: Series<{ inc(): void }, string, ContainerStartKind>;
  readonly #codeRuns: Series<{ inc(): void }, CodeRunOutcome>;
  readonly #suspended: { inc(): void; dec(): void };
  readonly #suspensions: Series<{ inc(): void }, SuspendMetricReason>;
  readonly #resumes: { inc(): void };
  readonly #resumeSeconds: { observe(seconds: number): void };

  constructor(registry: Registry, backend: string) {
    this.#live = gauge(registry, {
      name: 'berth_task_environments',
      help: 'Task environments alive now, by backend',
      labelNames: ['backend'],
    }).labels({ backend });
    this.#created = counter(registry, {
      name: 'berth_task_environments_created_total',
      help: 'Task environments created, by backend',
      labelNames: ['backend'],
    }).labels({ backend });
    const released = counter(registry, {
      name: 'berth_task_environments_released_total',
      help: 'Task environments released, by backend and reason (end_task, idle, shutdown)',
      labelNames: ['backend', 'reason'],
    });
    const starts = counter(registry, {
      name: 'berth_container_starts_total',
      help: 'Docker containers made ready for a task, by role (task, code) and kind (cold, warm: from the warm pool, replacement)',
      labelNames: ['backend', 'role', 'kind'],
    });
    const codeRuns = counter(registry, {
      name: 'berth_execute_code_runs_total',
      help: 'execute_code scripts, by backend and outcome (success, error: non-zero exit, timeout, interrupted, failed: not run)',
      labelNames: ['backend', 'outcome'],
    });
    this.#released = new Series((reason: ReleaseReason) => released.labels({ backend, reason }));
    this.#containerStarts = new Series((role: string, kind: ContainerStartKind) => starts.labels({ backend, role, kind }));
    this.#codeRuns = new Series((outcome: CodeRunOutcome) => codeRuns.labels({ backend, outcome }));
    this.#suspended = gauge(registry, {
      name: 'berth_task_environments_suspended',
      help: 'Task environments suspended now (no CPU, memory freed as far as the backend can), by backend',
      labelNames: ['backend'],
    }).labels({ backend });
    const suspensions = counter(registry, {
      name: 'berth_task_suspensions_total',
      help: 'Task environments suspended, by backend and reason (explicit: a Suspend call, idle: idle_suspend_after_s)',
      labelNames: ['backend', 'reason'],
    });
    this.#suspensions = new Series((reason: SuspendMetricReason) => suspensions.labels({ backend, reason }));
    this.#resumes = counter(registry, {
      name: 'berth_task_resumes_total',
      help: 'Suspended task environments resumed (by a Resume call or by their next call), by backend',
      labelNames: ['backend'],
    }).labels({ backend });
    this.#resumeSeconds = histogram(registry, {
      name: 'berth_task_resume_seconds',
      help: 'Time to resume a suspended task environment until it takes commands again, by backend',
      labelNames: ['backend'],
      buckets: RESUME_BUCKETS,
    }).labels({ backend });
  }

  taskSuspended(reason: SuspendMetricReason): void {
    this.#suspensions.get(reason, '').inc();
    this.#suspended.inc();
  }

  taskResumed(seconds: number): void {
    this.#suspended.dec();
    this.#resumes.inc();
    this.#resumeSeconds.observe(seconds);
  }

  suspendedTaskReleased(): void {
    this.#suspended.dec();
  }

  environmentCreated(): void {
    this.#created.inc();
    this.#live.inc();
  }

  environmentReleased(reason: ReleaseReason): void {
    this.#released.get(reason, '').inc();
    this.#live.dec();
  }

  readonly containerStarted: ContainerStartSink = (role, kind) => {
    this.#containerStarts.get(role, kind).inc();
  };

  /** Gauges of the backend's warm pool (ready sandboxes, the size it aims at), read at each scrape. */
  static observeWarmPool(registry: Registry, backend: string, status: () => { ready: number; target: number }): void {
    gauge(registry, {
      name: 'berth_warm_pool_ready',
      help: 'Sandboxes of the warm pool ready to be claimed, by backend',
      labelNames: ['backend'],
      collect() {
        this.labels({ backend }).set(status().ready);
      },
    });
    gauge(registry, {
      name: 'berth_warm_pool_target',
      help: 'Ready sandboxes the warm pool aims at now (adaptive: from recent arrivals), by backend',
      labelNames: ['backend'],
      collect() {
        this.labels({ backend }).set(status().target);
      },
    });
  }

  codeRun(outcome: CodeRunOutcome): void {
    this.#codeRuns.get(outcome, '').inc();
  }
}
