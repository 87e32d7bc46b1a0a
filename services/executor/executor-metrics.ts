/**
 * The executor's metrics: live task environments, environments created and
 * released, docker container starts, execute_code runs. Every series carries
 * the executor's backend.
 */
import { counter, gauge, Series, type Registry } from '../common/metrics.js';

/** Why a task's environment went: EndTask, the idle reaper, or the executor shutting down. */
export type ReleaseReason = 'end_task' | 'idle' | 'shutdown';

/**
 * How a docker container came to serve a task: `cold` started for it,
 * `warm` claimed from the warm pool, `replacement` started because the
 * task's container was lost.
 */
export type ContainerStartKind = 'cold' | 'warm' | 'replacement';

/** How an execute_code script ended; `failed`: it could not be run (setup error). */
export type CodeRunOutcome = 'success' | 'error' | 'timeout' | 'interrupted' | 'failed';

/** What TaskEnvironments reports. */
export interface EnvironmentMetrics {
  environmentCreated(): void;
  environmentReleased(reason: ReleaseReason): void;
}

/** What the docker backend reports: `role` is `task` or `code` (execute_code's code containers). */
export type ContainerStartSink = (role: string, kind: ContainerStartKind) => void;

export class ExecutorMetrics implements EnvironmentMetrics {
  readonly #live: { inc(): void; dec(): void };
  readonly #created: { inc(): void };
  readonly #released: Series<{ inc(): void }, ReleaseReason>;
  readonly #containerStarts: Series<{ inc(): void }, string, ContainerStartKind>;
  readonly #codeRuns: Series<{ inc(): void }, CodeRunOutcome>;

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

  codeRun(outcome: CodeRunOutcome): void {
    this.#codeRuns.get(outcome, '').inc();
  }
}
