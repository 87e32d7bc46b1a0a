/**
 * The `berth` command. Servers: serve, dispatcher, executor. Clients: tools,
 * call. Usage errors and transport failures exit non-zero with one line on
 * stderr; a completed tool call exits 0 even when its result holds an error.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import { ClientError, Metadata, Status } from 'nice-grpc';
import { ConfigError, loadConfig, BACKEND_NAMES, type BerthConfig, type BackendName } from '../common/config.js';
import { createLogger, type Logger } from '../common/logging.js';
import { executorClientTlsFiles } from '../common/tls.js';
import { startWithMetrics, type MetricsEndpoint, type MetricsRole } from '../common/metrics-server.js';
import { startTracing } from '../common/tracing/tracing.js';
import { startDispatcher } from '../dispatcher/dispatcher-main.js';
import { startExecutor } from '../executor/executor-main.js';
import { INTERACTIVE_HEADER } from '../dispatcher/approval/approval-service.js';
import { promptApproval } from './approval-prompt.js';
import { CHECK_COMMAND_HELP, readAllStdin, runCheckCommand } from './check-command.js';
import { CLIENT_HELP, CLIENT_OPTIONS, ClientTlsError, clientTarget, explainClientError, openClient, type ClientFlags, type ClientTarget } from './client-connection.js';
import { SessionConnection } from './session-connection.js';
import { BerthError } from '../client/errors.js';
import { startServe } from './serve.js';
import { SHELL_HELP, runShell } from './shell.js';
import { MCP_HELP, parseListen, runMcpStdio, startMcpHttp, type McpCommandOptions } from './mcp-command.js';
import { BENCH_HELP, BenchUsageError, cmdBench } from './bench-command.js';
import { DOCTOR_HELP, formatFinding, runDoctor } from './doctor.js';

const HELP = `berth — runs AI agents' tool calls in sandboxes, as a gRPC service

Usage:
  berth serve [--port N] [--host H] [--config FILE] [--backend NAME] [--log-level L] [--metrics-port N]
      Dispatcher plus one in-process executor (backend local by default) on
      127.0.0.1:7700; the dispatcher calls the executor directly.
  berth dispatcher [--config FILE] [--port N] [--host H] [--log-level L] [--metrics-port N]
      Dispatcher only; executors come from 'executors:' in the config file
      and from DNS names under 'executor_discovery:'.
  berth executor --backend NAME [--config FILE] [--port N] [--host H] [--log-level L] [--metrics-port N]
      One executor for one terminal backend (default port 7701). SIGTERM drains
      it: no new tasks, calls in flight get executor.drain_grace_ms to finish.
  --metrics-port N turns metrics on and serves them on http://HOST:N/metrics
      (HOST: metrics.host, 127.0.0.1 by default). Without it, metrics.enabled
      uses port 9464 for serve and dispatcher, 9465 for executor.
  berth tools [--toolsets a,b] [--disable a,b] [--explain]
      Print the OpenAI tool schemas the server offers, as a JSON array.
      --explain prints instead which toolsets are available and, for the
      others, the variables they need and why they are missing:
      {"available": [...], "unavailable": [{"name", "env_vars", "tools",
      "reason"}], "unavailable_tools": [...]}.
  berth call TOOL [ARGS_JSON] [--task ID] [--session ID]
      Run one tool call and print its result JSON. ARGS_JSON defaults to {}.
      Exit 0 when the call completed (even if the result holds an error).
      Commands that need approval are asked about on the terminal (o/s/a/d);
      with no terminal they are denied. --non-interactive tells the server
      nobody will answer (approvals.non_interactive then decides).
${SHELL_HELP}
${MCP_HELP}
${CHECK_COMMAND_HELP}
${DOCTOR_HELP}
${BENCH_HELP}

${CLIENT_HELP}

TLS: server.tls in the config serves the Dispatcher API over TLS (mTLS with
client_ca_file), executor.tls the Executor API (mTLS); SIGHUP makes serve,
dispatcher and executor re-read their certificate files (open streams stay).

Config: one YAML file (--config or BERTH_CONFIG); TERMINAL_* and BERTH_* env
variables override it. Backends: ${BACKEND_NAMES.join(', ')}.

Examples:
  berth serve
  berth tools --toolsets terminal,file
  berth call terminal '{"command":"cd /tmp && export FOO=bar"}' --task t1
  berth call terminal '{"command":"pwd; echo $FOO"}' --task t1
`;

class UsageError extends Error {}

function version(): string {
  const require = createRequire(import.meta.url);
  return (require('../../../package.json') as { version: string }).version;
}

function list(value: string | undefined): string[] {
  return (value ?? '').split(',').map((s) => s.trim()).filter(Boolean);
}

function parse<T extends NonNullable<ParseArgsConfig['options']>>(argv: string[], options: T) {
  try {
    return parseArgs({ args: argv, options: { ...options, help: { type: 'boolean', short: 'h' } }, allowPositionals: true, strict: true });
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

function portOf(value: string | undefined, fallback: number, flag = '--port'): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (value.trim() === '' || !Number.isInteger(n) || n < 0 || n > 65535) throw new UsageError(`${flag} must be 0-65535, got '${value}'`);
  return n;
}

interface ServerFlags {
  config?: string | undefined;
  backend?: string | undefined;
  'log-level'?: string | undefined;
  'metrics-port'?: string | undefined;
}

/** `role`: whose metrics port --metrics-port sets (the executor has its own). */
function loadServerConfig(values: ServerFlags, role: MetricsRole = 'dispatcher'): BerthConfig {
  const env = { ...process.env };
  if (values.backend !== undefined) {
    if (!(BACKEND_NAMES as readonly string[]).includes(values.backend)) {
      throw new UsageError(`--backend must be one of ${BACKEND_NAMES.join(', ')}; got '${values.backend}'`);
    }
    env.TERMINAL_ENV = values.backend;
  }
  if (values['log-level'] !== undefined) env.BERTH_LOG_LEVEL = values['log-level'];
  if (values['metrics-port'] !== undefined) {
    env.BERTH_METRICS_ENABLED = 'true';
    env[role === 'executor' ? 'BERTH_METRICS_EXECUTOR_PORT' : 'BERTH_METRICS_PORT'] = String(portOf(values['metrics-port'], 0, '--metrics-port'));
  }
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

async function cmdServe(argv: string[]): Promise<number> {
  const { values } = parse(argv, serverOptions);
  if (values.help) return printHelp();
  const config = loadServerConfig(values);
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
  process.stdout.write(`berth serving on ${dispatcher.address} (backend ${config.terminal.backend})\n`);
  await untilSignal(logger, config.server.tls ? () => dispatcher.reloadCertificates() : undefined);
  await close();
  return 0;
}

async function cmdDispatcher(argv: string[]): Promise<number> {
  const { values } = parse(argv, serverOptions);
  if (values.help) return printHelp();
  const config = loadServerConfig(values);
  const configPath = values.config ?? process.env.BERTH_CONFIG;
  if (config.executors.length === 0 && config.executor_discovery.length === 0) {
    throw new UsageError("no executors configured: list them under 'executors:' (or a DNS name under 'executor_discovery:') in the config file, or use 'berth serve'");
  }
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

async function cmdExecutor(argv: string[]): Promise<number> {
  const { values } = parse(argv, serverOptions);
  if (values.help) return printHelp();
  if (values.backend === undefined) throw new UsageError('executor needs --backend NAME');
  const config = loadServerConfig(values, 'executor');
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

/**
 * Runs a client command against the server the flags name; a transport
 * failure comes out as one line saying what to do (TLS flags, address).
 */
async function withClient<T>(values: ClientFlags, run: (connection: ReturnType<typeof openClient>, target: ClientTarget) => Promise<T>): Promise<T> {
  const target = clientTarget(values, process.env);
  const connection = openClient(target);
  try {
    return await run(connection, target);
  } catch (err) {
    const explained = await explainClientError(err, target);
    throw explained === undefined ? err : new TransportError(explained);
  } finally {
    connection.channel.close();
  }
}

/** The server could not be reached, or not over the transport the flags chose. */
class TransportError extends Error {}

function metadataFor(apiKey: string | undefined): Metadata {
  const metadata = new Metadata();
  const key = apiKey ?? process.env.BERTH_API_KEY;
  if (key) metadata.set('authorization', `Bearer ${key}`);
  return metadata;
}

async function cmdTools(argv: string[]): Promise<number> {
  const { values } = parse(argv, {
    ...CLIENT_OPTIONS,
    toolsets: { type: 'string' },
    disable: { type: 'string' },
    explain: { type: 'boolean' },
  });
  if (values.help) return printHelp();
  const explain = values.explain === true;
  return withClient(values, async ({ client }) => {
    const r = await client.listTools(
      { enabledToolsets: list(values.toolsets), disabledToolsets: list(values.disable), explain },
      { metadata: metadataFor(values['api-key']) },
    );
    if (r.unknownToolsets.length > 0) {
      process.stderr.write(`berth: unknown toolsets ignored: ${r.unknownToolsets.join(', ')}\n`);
    }
    if (!explain) {
      process.stdout.write(`${JSON.stringify(JSON.parse(r.toolsJson), null, 2)}\n`);
      return 0;
    }
    if (r.availabilityJson === '') throw new TransportError('the server does not support --explain (it predates it); upgrade it');
    process.stdout.write(`${JSON.stringify(JSON.parse(r.availabilityJson), null, 2)}\n`);
    return 0;
  });
}

async function cmdCall(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, {
    ...CLIENT_OPTIONS,
    task: { type: 'string' },
    session: { type: 'string' },
    'non-interactive': { type: 'boolean' },
  });
  if (values.help) return printHelp();
  const [tool, args = '{}', ...rest] = positionals;
  if (!tool) throw new UsageError("call needs a tool name, e.g. berth call terminal '{\"command\":\"ls\"}'");
  if (rest.length > 0) throw new UsageError(`unexpected arguments: ${rest.join(' ')} (quote ARGS_JSON as one argument)`);
  return withClient(values, async ({ client }) => {
    const abort = new AbortController();
    const onSigint = () => abort.abort();
    process.once('SIGINT', onSigint);
    const metadata = metadataFor(values['api-key']);
    if (values['non-interactive']) metadata.set(INTERACTIVE_HEADER, 'false');
    // Over the Session stream the server can ask about commands that need approval, here on the terminal.
    const session = new SessionConnection(
      client,
      { onApproval: (request, signal) => promptApproval(request, { input: process.stdin, output: process.stderr }, signal) },
      { metadata, signal: abort.signal },
    );
    try {
      const resultJson = await session.call({
        name: tool,
        argumentsJson: args,
        taskId: values.task ?? 'default',
        sessionId: values.session ?? '',
      });
      process.stdout.write(`${resultJson}\n`);
      return 0;
    } finally {
      process.off('SIGINT', onSigint);
      await session.close().catch(() => undefined);
    }
  });
}

async function cmdShell(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, {
    ...CLIENT_OPTIONS,
    task: { type: 'string' },
    session: { type: 'string' },
    yolo: { type: 'boolean' },
  });
  if (values.help) return printHelp();
  if (positionals.length > 0) throw new UsageError(`unexpected arguments: ${positionals.join(' ')}`);
  const id = randomBytes(4).toString('hex');
  return withClient(values, ({ client }, target) =>
    runShell({
      client,
      metadata: metadataFor(values['api-key']),
      taskId: values.task ?? `shell-${id}`,
      sessionId: values.session ?? `shell-${id}`,
      yolo: values.yolo === true,
      input: process.stdin,
      output: process.stdout,
      describeError: async (err) => (await explainClientError(err, target)) ?? (err as Error).message ?? String(err),
    }),
  );
}

async function cmdMcp(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, {
    ...CLIENT_OPTIONS,
    task: { type: 'string' },
    session: { type: 'string' },
    toolsets: { type: 'string' },
    disable: { type: 'string' },
    listen: { type: 'string' },
  });
  if (values.help) {
    process.stdout.write(`Usage:\n${MCP_HELP}\n\n${CLIENT_HELP}\n`);
    return 0;
  }
  if (positionals.length > 0) throw new UsageError(`unexpected arguments: ${positionals.join(' ')}`);
  const target = clientTarget(values, process.env);
  const options: McpCommandOptions = {
    server: target.address,
    ...(target.tls === undefined
      ? {}
      : {
          tls: {
            ...(target.tls.caFile === undefined ? {} : { ca: target.tls.caFile }),
            ...(target.tls.certFile === undefined ? {} : { cert: target.tls.certFile }),
            ...(target.tls.keyFile === undefined ? {} : { key: target.tls.keyFile }),
          },
        }),
    apiKey: values['api-key'] ?? process.env.BERTH_API_KEY,
    taskId: values.task,
    sessionId: values.session,
    toolsets: list(values.toolsets),
    disable: list(values.disable),
    version: version(),
    stderr: process.stderr,
  };
  if (values.listen === undefined) return runMcpStdio(options);
  if (values.task !== undefined) throw new UsageError('--task is for stdio; over HTTP each MCP session gets its own task');
  let listen: { host: string; port: number };
  try {
    listen = parseListen(values.listen);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  const http = await startMcpHttp(options, listen);
  process.stdout.write(`berth mcp serving on ${http.url} (server ${options.server})\n`);
  await new Promise<void>((resolve) => {
    process.once('SIGINT', () => resolve());
    process.once('SIGTERM', () => resolve());
  });
  await http.close();
  return 0;
}

async function cmdCheckCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, { home: { type: 'string' } });
  if (values.help) return printHelp();
  const [command, ...rest] = positionals;
  if (command === undefined) throw new UsageError("check-command needs a command, e.g. berth check-command 'rm -rf build'");
  if (rest.length > 0) throw new UsageError(`unexpected arguments: ${rest.join(' ')} (quote the command as one argument)`);
  return runCheckCommand(command, values.home, { stdout: process.stdout, readStdin: readAllStdin });
}

async function cmdDoctor(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, { config: { type: 'string' }, backend: { type: 'string' } });
  if (values.help) return printHelp();
  if (positionals.length > 0) throw new UsageError(`unexpected arguments: ${positionals.join(' ')}`);
  const config = loadServerConfig(values);
  process.stdout.write(`berth doctor: backend ${config.terminal.backend}\n`);
  const findings = await runDoctor(config, (f) => process.stdout.write(formatFinding(f)));
  const count = (v: string) => findings.filter((f) => f.verdict === v).length;
  process.stdout.write(`${count('ok')} ok, ${count('warn')} warnings, ${count('fail')} failed\n`);
  return count('fail') > 0 ? 1 : 0;
}

function printHelp(): number {
  process.stdout.write(HELP);
  return 0;
}

const COMMANDS: Record<string, (argv: string[]) => Promise<number>> = {
  serve: cmdServe,
  dispatcher: cmdDispatcher,
  executor: cmdExecutor,
  tools: cmdTools,
  call: cmdCall,
  shell: cmdShell,
  mcp: cmdMcp,
  'check-command': cmdCheckCommand,
  doctor: cmdDoctor,
  bench: cmdBench,
};

export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === undefined || command === 'help' || command === '--help' || command === '-h') return printHelp();
  if (command === '--version' || command === 'version') {
    process.stdout.write(`berth ${version()}\n`);
    return 0;
  }
  const run = COMMANDS[command];
  try {
    if (!run) throw new UsageError(`unknown command '${command}'; try 'berth --help'`);
    return await run(rest);
  } catch (err) {
    process.stderr.write(`berth: ${describeError(err)}\n`);
    return err instanceof UsageError || err instanceof BenchUsageError || err instanceof ConfigError || err instanceof ClientTlsError ? 2 : 1;
  }
}

function describeError(err: unknown): string {
  if (err instanceof ClientError || err instanceof BerthError) {
    if (err.code === Status.UNAVAILABLE) {
      return `cannot reach the Berth server (${err.details}); is 'berth serve' running? Set --server or BERTH_SERVER`;
    }
    return `${Status[err.code]}: ${err.details}`;
  }
  if (err instanceof Error) return err.message;
  return String(err);
}
