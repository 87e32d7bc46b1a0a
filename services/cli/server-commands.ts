/**
 * `berth serve`, `berth dispatcher` and `berth executor`: start a server and
 * run it until a signal. The servers, the config schema and the gRPC stack
 * load once the flags are parsed, so `--help` loads none of them.
 */
import { BACKEND_CHOICES, BACKEND_NAMES, isBackendPackageSpecifier } from '../common/backend-names.js';
import type { BerthConfig, BackendName } from '../common/config.js';
import type { Logger } from '../common/logging.js';
import type { MetricsEndpoint, MetricsRole } from '../common/metrics-server.js';
import { printCommandHelp } from './command-help.js';
import { newTaskDirectory, startsInBerthCheckout } from './task-directory.js';
import { noPositionals, parse, portOf, UsageError } from './usage.js';

/**
 * What running any server takes, loaded when one starts. grpc-js's own line
 * about a failed bind is quieted here: Berth says what it means in one line.
 */
async function loadServerKit() {
  const [logging, metricsServer, tracing, grpcServer] = await Promise.all([
    import('../common/logging.js'),
    import('../common/metrics-server.js'),
    import('../common/tracing/start-tracing.js'),
    import('../common/grpc-server.js'),
  ]);
  grpcServer.quietGrpcBindErrors();
  return { createLogger: logging.createLogger, startWithMetrics: metricsServer.startWithMetrics, startTracing: tracing.startTracing };
}

export interface ServerFlags {
  config?: string | undefined;
  backend?: string | undefined;
  'log-level'?: string | undefined;
  'metrics-port'?: string | undefined;
}

/** `role`: whose metrics port --metrics-port sets (the executor has its own). */
export async function loadServerConfig(values: ServerFlags, role: MetricsRole = 'dispatcher'): Promise<BerthConfig> {
  const env = { ...process.env };
  if (values.backend !== undefined) {
    if (!(BACKEND_NAMES as readonly string[]).includes(values.backend) && !isBackendPackageSpecifier(values.backend)) {
      throw new UsageError(`--backend must be ${BACKEND_CHOICES}; got '${values.backend}'`);
    }
    env.TERMINAL_ENV = values.backend;
  }
  if (values['log-level'] !== undefined) env.BERTH_LOG_LEVEL = values['log-level'];
  if (values['metrics-port'] !== undefined) {
    env.BERTH_METRICS_ENABLED = 'true';
    env[role === 'executor' ? 'BERTH_METRICS_EXECUTOR_PORT' : 'BERTH_METRICS_PORT'] = String(portOf(values['metrics-port'], 0, '--metrics-port'));
  }
  const { loadConfig } = await import('../common/config-load.js');
  return loadConfig(values.config, env);
}

/**
 * Resolves when SIGINT/SIGTERM arrives. With `onHangup` (a server with TLS),
 * SIGHUP calls it to re-read certificates instead of ending the process.
 */
function untilSignal(logger: Logger, onHangup?: () => void): Promise<void> {
  return new Promise((resolve) => {
    const hangup = () => {
      logger.info({ signal: 'SIGHUP' }, 'reloading TLS certificates');
      onHangup?.();
    };
    if (onHangup) process.on('SIGHUP', hangup);
    const stop = (sig: string) => {
      process.off('SIGHUP', hangup);
      logger.info({ signal: sig }, 'shutting down');
      resolve();
    };
    process.once('SIGINT', () => stop('SIGINT'));
    process.once('SIGTERM', () => stop('SIGTERM'));
  });
}

const serverOptions = {
  port: { type: 'string' },
  host: { type: 'string' },
  config: { type: 'string' },
  backend: { type: 'string' },
  'log-level': { type: 'string' },
  'metrics-port': { type: 'string' },
} as const;

export async function cmdServe(argv: string[]): Promise<number> {
  const { values, positionals } = parse('serve', argv, serverOptions);
  if (values.help) return printCommandHelp('serve');
  noPositionals('serve', positionals);
  const config = await loadServerConfig(values);
  const [{ createLogger }, { startServe }] = await Promise.all([loadServerKit(), import('./serve.js')]);
  const logger = createLogger(config.log_level);
  const configPath = values.config ?? process.env.BERTH_CONFIG;
  const { dispatcher, metrics, close } = await startServe({
    config,
    logger,
    host: values.host ?? config.server.host,
    port: portOf(values.port, config.server.port),
    ...(configPath ? { configPath } : {}),
  });
  // Tests and scripts read these lines to find ephemeral ports (the metrics line first).
  printMetricsUrl(metrics);
  const startDir = newTaskDirectory(config.terminal, process.cwd());
  process.stdout.write(`berth serving on ${dispatcher.address} (backend ${config.terminal.backend}; new tasks start in ${startDir})\n`);
  if (startsInBerthCheckout(config.terminal, process.cwd())) {
    logger.warn(
      { cwd: startDir },
      "new local tasks start in Berth's own source checkout, where agents' commands would change it: " +
        'set terminal.cwd (TERMINAL_CWD), or start berth serve from the directory agents should work in (make run uses ~/berth-workspace)',
    );
  }
  await untilSignal(logger, config.server.tls ? () => dispatcher.reloadCertificates() : undefined);
  await close();
  return 0;
}

export async function cmdDispatcher(argv: string[]): Promise<number> {
  const { values, positionals } = parse('dispatcher', argv, serverOptions);
  if (values.help) return printCommandHelp('dispatcher');
  noPositionals('dispatcher', positionals);
  const config = await loadServerConfig(values);
  const configPath = values.config ?? process.env.BERTH_CONFIG;
  if (config.executors.length === 0 && config.executor_discovery.length === 0) {
    throw new UsageError("no executors configured: list them under 'executors:' (or a DNS name under 'executor_discovery:') in the config file, or use 'berth serve'");
  }
  const [{ createLogger, startTracing, startWithMetrics }, { startDispatcher }, { executorClientTlsFiles }] = await Promise.all([
    loadServerKit(),
    import('../dispatcher/dispatcher-main.js'),
    import('../common/tls.js'),
  ]);
  const logger = createLogger(config.log_level);
  const tracing = await startTracing(config.tracing, 'dispatcher', logger);
  const { running: dispatcher, metrics } = await startWithMetrics(config.metrics, 'dispatcher', logger, (registry) =>
    startDispatcher({
      config,
      logger,
      host: values.host ?? config.server.host,
      port: portOf(values.port, config.server.port),
      executors: config.executors.map((e) => ({
        address: e.address,
        backend: e.backend as BackendName,
        sharedSecret: config.executor.shared_secret,
        ...(e.tls ? { tls: executorClientTlsFiles(e.tls) } : {}),
      })),
      ...(config.executor_discovery.length > 0
        ? {
            discovery: {
              sources: config.executor_discovery.map((d) => ({
                dns: d.dns,
                port: d.port,
                backend: d.backend as BackendName,
                ...(d.tls ? { tls: executorClientTlsFiles(d.tls) } : {}),
              })),
              intervalMs: config.executor_discovery_interval_ms,
              sharedSecret: config.executor.shared_secret,
            },
          }
        : {}),
      ...(configPath ? { configPath } : {}),
      ...(registry ? { metricsRegistry: registry } : {}),
      ...(tracing ? { tracing } : {}),
    }),
  );
  printMetricsUrl(metrics);
  process.stdout.write(`berth dispatcher serving on ${dispatcher.address}\n`);
  const anyTls =
    config.server.tls !== undefined || [...config.executors, ...config.executor_discovery].some((e) => e.tls !== undefined);
  await untilSignal(logger, anyTls ? () => dispatcher.reloadCertificates() : undefined);
  await dispatcher.close();
  await metrics?.close();
  await tracing?.shutdown();
  return 0;
}

export async function cmdExecutor(argv: string[]): Promise<number> {
  const { values, positionals } = parse('executor', argv, serverOptions);
  if (values.help) return printCommandHelp('executor');
  noPositionals('executor', positionals);
  if (values.backend === undefined) throw new UsageError(`executor needs --backend NAME (${BACKEND_CHOICES}), e.g. berth executor --backend docker`);
  const config = await loadServerConfig(values, 'executor');
  const [{ createLogger, startTracing, startWithMetrics }, { startExecutor }] = await Promise.all([loadServerKit(), import('../executor/executor-main.js')]);
  const logger = createLogger(config.log_level);
  const host = values.host ?? config.executor.host;
  if (!['127.0.0.1', 'localhost', '::1'].includes(host)) {
    if (!config.executor.shared_secret && !config.executor.tls) {
      logger.warn({ host }, 'executor listens beyond loopback with neither executor.tls nor executor.shared_secret: anyone who can reach it can run commands');
    } else if (!config.executor.tls) {
      logger.warn({ host }, 'executor listens beyond loopback without executor.tls: the shared secret and every command cross the network in the clear');
    }
  }
  const tracing = await startTracing(config.tracing, 'executor', logger);
  const { running: executor, metrics } = await startWithMetrics(config.metrics, 'executor', logger, (registry) =>
    startExecutor({
      config,
      logger,
      listen: { host, port: portOf(values.port, config.executor.port), sharedSecret: config.executor.shared_secret },
      ...(registry ? { metricsRegistry: registry } : {}),
      ...(tracing ? { tracing } : {}),
    }),
  );
  printMetricsUrl(metrics);
  process.stdout.write(`berth executor (${config.terminal.backend}) serving on ${executor.address ?? ''}\n`);
  await untilSignal(logger, config.executor.tls ? () => executor.reloadCertificates() : undefined);
  await executor.close(config.executor.drain_grace_ms);
  await metrics?.close();
  await tracing?.shutdown();
  return 0;
}

function printMetricsUrl(metrics: MetricsEndpoint | undefined): void {
  if (metrics) process.stdout.write(`berth metrics on ${metrics.url}\n`);
}
