/** Starts an executor: one backend, its task environments, the gRPC server (or an in-process client). */
import { randomUUID } from 'node:crypto';
import { composeServerMiddleware, type Server, type ServerMiddleware } from 'nice-grpc';
import type { BerthConfig } from '../common/config.js';
import { taskContainerLimits } from '../common/container-limits.js';
import { errorBoundary } from '../common/grpc-errors.js';
import { createBerthServer, listenOrExplain, sharedSecretMiddleware, type BerthServer } from '../common/grpc-server.js';
import { createInProcessClient } from '../common/in-process-client.js';
import { reloadCertificates, serverCredentialsFor } from '../common/tls.js';
import type { Logger } from '../common/logging.js';
import type { Registry } from '../common/metrics.js';
import { SPAN_ATTRIBUTES, type Tracing } from '../common/tracing/tracing.js';
import { ExecutorDefinition, type ExecutorClient } from '../gen/berth/v1/executor.js';
import type { CodeRunnerEnvironments } from './backend.js';
import { createBackend, createCodeRunners } from './backends/create-backend.js';
import { CodeRunner } from './code-execution/code-runner.js';
import { createExecutorService } from './executor-service.js';
import { egressPolicies } from './mcp/mcp-requests.js';
import { ExecutorMetrics, type CodeRunOutcome } from './executor-metrics.js';
import { TaskEnvironments } from './task-environment.js';
import { TaskEventLog } from './task-event-log.js';
import type { TaskRunnerOptions } from './task-state.js';
import { traceBackend } from './traced-backend.js';

export interface RunningExecutor {
  readonly executorId: string;
  /** Where the gRPC server listens; absent for an in-process-only executor. */
  readonly address?: string;
  readonly port?: number;
  /** Calls this executor directly, without gRPC (for a dispatcher in the same process). */
  readonly client: ExecutorClient;
  /** Re-reads executor.tls's files (SIGHUP); false when they are bad and the previous certificate stays. */
  reloadCertificates(): boolean;
  /**
   * Drains, then stops: health says NOT_SERVING at once, tasks without an
   * environment here are refused (UNAVAILABLE, the dispatcher places them
   * elsewhere), calls in flight get up to `graceMs` to finish; then every
   * task's processes are killed and its environment released (docker's
   * persistent volumes stay, so the task resumes elsewhere with its files).
   */
  close(graceMs?: number): Promise<void>;
}

export interface ExecutorStartOptions {
  readonly config: BerthConfig;
  readonly logger: Logger;
  /**
   * Serve the Executor API over gRPC (with executor.tls, mTLS); absent: only
   * {@link RunningExecutor.client} reaches it (`berth serve`).
   */
  readonly listen?: { readonly host: string; readonly port: number; readonly sharedSecret: string };
  /** Where to record metrics (served by whoever made it); absent: metrics are off. */
  readonly metricsRegistry?: Registry;
  /** Where to record spans (the process's tracer); absent: tracing is off. */
  readonly tracing?: Tracing;
  /** The shell-state runner's settings for every task (the benchmarks' timing log); absent: the defaults. */
  readonly runner?: TaskRunnerOptions;
}

export async function startExecutor(options: ExecutorStartOptions): Promise<RunningExecutor> {
  const { config } = options;
  const executorId = `exec-${randomUUID().slice(0, 8)}`;
  const logger = options.logger.child({ component: 'executor', executorId, backend: config.terminal.backend });
  // Bad certificate files stop the start before any backend work.
  const credentials = options.listen ? serverCredentialsFor('executor.tls', config.executor.tls) : undefined;
  const metrics = options.metricsRegistry && new ExecutorMetrics(options.metricsRegistry, config.terminal.backend);
  const { tracing } = options;
  const created = await createBackend(config, logger, metrics?.containerStarted);
  if (options.metricsRegistry && created.warmPoolStatus) {
    ExecutorMetrics.observeWarmPool(options.metricsRegistry, config.terminal.backend, () => created.warmPoolStatus!());
  }
  const backend = tracing ? traceBackend(created, tracing) : created;
  let codeContainers: CodeRunnerEnvironments | undefined;
  try {
    codeContainers = await createCodeRunners(config, backend.capabilities, logger, metrics?.containerStarted);
  } catch (err) {
    await backend.close().catch(() => undefined);
    throw err;
  }
  if (config.terminal.idle_suspend_after_s > 0 && !backend.capabilities.lifecycle?.suspend) {
    logger.warn(
      { idleSuspendAfterS: config.terminal.idle_suspend_after_s },
      `terminal.idle_suspend_after_s is set, but the ${backend.capabilities.name} backend cannot suspend: idle tasks are only released after terminal.lifetime_seconds`,
    );
  }
  const events = new TaskEventLog();
  const environments = new TaskEnvironments({
    backend,
    logger,
    onProcessEvent: (key, event) => events.append(key, event),
    lifetimeSeconds: config.terminal.lifetime_seconds,
    idleSuspendSeconds: config.terminal.idle_suspend_after_s,
    ...(metrics ? { metrics } : {}),
    ...(options.runner ? { runner: options.runner } : {}),
  });
  const codeRunner = new CodeRunner(environments, {
    logger,
    ...(codeContainers ? { codeContainers } : {}),
    ...(metrics ? { onRun: (outcome: CodeRunOutcome) => metrics.codeRun(outcome) } : {}),
  });
  const shutdown = new AbortController();
  const service = createExecutorService(
    environments,
    { executorId },
    shutdown.signal,
    codeRunner,
    taskContainerLimits(config, config.terminal.backend, codeContainers !== undefined),
    { egressFor: egressPolicies(config), logger: logger.child({ component: 'mcp' }) },
    events,
  );
  // The same error boundary as the gRPC server's, so callers see the same statuses either way.
  const boundary = errorBoundary(logger, shutdown.signal);
  const rpcSpans = (inProcess: boolean) =>
    tracing?.rpcServerSpans({ inProcess, attributes: { [SPAN_ATTRIBUTES.backend]: config.terminal.backend } });
  const inProcessSpans = rpcSpans(true);
  const client = createInProcessClient(ExecutorDefinition, service, {
    middleware: inProcessSpans ? composeServerMiddleware(boundary, inProcessSpans) : boundary,
  });

  let server: Server | undefined;
  let health: BerthServer['health'] | undefined;
  // Executor API calls in flight (health checks not counted), for the drain.
  let active = 0;
  let idle: (() => void) | undefined;
  const countCalls: ServerMiddleware = async function* countInFlight(call, context) {
    active += 1;
    try {
      return yield* call.next(call.request, context);
    } finally {
      active -= 1;
      if (active === 0) idle?.();
    }
  };
  let address: string | undefined;
  let port: number | undefined;
  if (options.listen) {
    ({ server, health } = createBerthServer(logger, shutdown.signal, [ExecutorDefinition.fullName], options.metricsRegistry));
    const checked = server.with(countCalls).with(sharedSecretMiddleware(options.listen.sharedSecret));
    const spans = rpcSpans(false);
    (spans ? checked.with(spans) : checked).add(ExecutorDefinition, service);
    port = await listenOrExplain(server, `${options.listen.host}:${options.listen.port}`, credentials, {
      name: 'the Executor API',
      portSetting: '--port N (executor.port)',
    });
    address = `${options.listen.host}:${port}`;
    logger.info({ address, tls: credentials ? { serial: credentials.certificate.serial, mutual: true } : false }, 'executor listening');
  }

  let closing: Promise<void> | undefined;
  return {
    executorId,
    ...(address !== undefined ? { address } : {}),
    ...(port !== undefined ? { port } : {}),
    client,
    reloadCertificates: () => (credentials ? reloadCertificates('executor.tls', credentials, logger) : true),
    close(graceMs = 0) {
      closing ??= (async () => {
        health?.setStatus('unhealthy');
        environments.drain();
        if (graceMs > 0 && active > 0) {
          logger.info({ inFlight: active, graceMs }, 'draining: no new tasks; waiting for calls in flight');
          await new Promise<void>((resolve) => {
            idle = resolve;
            setTimeout(resolve, graceMs).unref();
          });
          if (active > 0) logger.warn({ inFlight: active }, 'drain grace over; cancelling the calls still running');
        }
        shutdown.abort();
        events.close();
        await environments.closeAll();
        await codeContainers?.close();
        await backend.close();
        server?.forceShutdown();
      })();
      return closing;
    },
  };
}
