/**
 * `berth serve`: a dispatcher and one executor in one process. The
 * dispatcher calls the executor directly (an in-process client), not over
 * loopback gRPC: the split deployment (`berth dispatcher` + `berth executor`)
 * is the one that needs the network, and serialising a call to ourselves cost
 * more CPU than the rest of a `terminal` call on a warm container. With
 * metrics on, both halves record on one registry behind one `/metrics`.
 */
import type { BerthConfig } from '../common/config.js';
import type { Logger } from '../common/logging.js';
import { startWithMetrics, type MetricsEndpoint } from '../common/metrics-server.js';
import { startTracing } from '../common/tracing/start-tracing.js';
import { startDispatcher, type RunningDispatcher } from '../dispatcher/dispatcher-main.js';
import { startExecutor, type RunningExecutor } from '../executor/executor-main.js';
import type { TaskRunnerOptions } from '../executor/task-state.js';

export interface ServeOptions {
  readonly config: BerthConfig;
  readonly logger: Logger;
  readonly host: string;
  readonly port: number;
  /** The config file, for "always" approvals written back. */
  readonly configPath?: string;
  /** The executor's shell-state runner settings (the benchmarks' timing log); absent: the defaults. */
  readonly runner?: TaskRunnerOptions;
}

export interface RunningServe {
  readonly dispatcher: RunningDispatcher;
  readonly executor: RunningExecutor;
  /** The `/metrics` endpoint, when `metrics.enabled`. */
  readonly metrics: MetricsEndpoint | undefined;
  /** Stops taking calls, lets in-flight ones finish for `graceMs`, then kills every task's processes. */
  close(graceMs?: number): Promise<void>;
}

export async function startServe(options: ServeOptions): Promise<RunningServe> {
  const { config, logger } = options;
  // One tracer for both halves: the executor's spans find the dispatcher's tool-call span as their parent.
  const tracing = await startTracing(config.tracing, 'serve', logger);
  const started = startWithMetrics(config.metrics, 'dispatcher', logger, async (metricsRegistry) => {
    const shared = { ...(metricsRegistry ? { metricsRegistry } : {}), ...(tracing ? { tracing } : {}) };
    const executor = await startExecutor({ config, logger, ...shared, ...(options.runner ? { runner: options.runner } : {}) });
    try {
      const dispatcher = await startDispatcher({
        config,
        logger,
        host: options.host,
        port: options.port,
        executors: [{ id: `in-process:${executor.executorId}`, backend: config.terminal.backend, client: executor.client }],
        ...(options.configPath !== undefined ? { configPath: options.configPath } : {}),
        ...shared,
      });
      return { dispatcher, executor };
    } catch (err) {
      await executor.close();
      throw err;
    }
  });
  const { running, metrics } = await started.catch(async (err: unknown) => {
    await tracing?.shutdown();
    throw err;
  });
  const { dispatcher, executor } = running;
  return {
    dispatcher,
    executor,
    metrics,
    async close(graceMs) {
      await dispatcher.close(graceMs);
      await executor.close();
      await metrics?.close();
      await tracing?.shutdown();
    },
  };
}
