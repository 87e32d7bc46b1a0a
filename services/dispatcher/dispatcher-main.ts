/** Starts a dispatcher: tool registry, executor clients, the public gRPC server. */
import { ConfigError, type BerthConfig, type BackendName } from '../common/config.js';
import { taskContainerLimits } from '../common/container-limits.js';
import { createBerthServer, listenOrExplain } from '../common/grpc-server.js';
import type { Logger } from '../common/logging.js';
import type { Registry } from '../common/metrics.js';
import type { Tracing } from '../common/tracing/tracing.js';
import { DispatcherDefinition } from '../gen/berth/v1/dispatcher.js';
import { clientTls, reloadCertificates, serverCredentialsFor, TlsMaterialError, type ClientTlsFiles } from '../common/tls.js';
import type { ExecutorClient } from '../gen/berth/v1/executor.js';
import { ApprovalService } from './approval/flow/approval-service.js';
import { executeCodeLimitsFromConfig, executeCodeSchemaPatcher } from './tools/code-execution/execute-code-tool.js';
import { Dispatcher } from './dispatcher.js';
import { DispatcherMetrics } from './dispatcher-metrics.js';
import { createDispatcherService } from './dispatcher-service.js';
import { connectExecutor, type ExecutorConnection } from './executors/executor-channel.js';
import { ExecutorHealthWatcher, type WatchedExecutor } from './executors/executor-health.js';
import { ExecutorDiscovery, type AddressResolver, type DiscoverySource } from './executors/executor-membership.js';
import { ExecutorRouter, type ExecutorEndpoint } from './executors/executor-router.js';
import { QuotaLedger, type QuotaKey } from './quotas/quota-ledger.js';
import { anyQuota, quotaResolver } from './quotas/tenant-quotas.js';
import { ToolRegistry } from './registry/registry.js';
import { McpServers } from './mcp/mcp-servers.js';
import { TenantDirectory } from './tenants.js';
import { ToolCallTracing } from './tool-call-tracing.js';
import { registerBuiltinTools } from './tools/builtin-tools.js';

/** An executor reached over gRPC (another process or host). */
export interface RemoteExecutorTarget {
  readonly address: string;
  readonly backend: BackendName;
  readonly sharedSecret: string;
  /** mTLS to this executor (`executors[].tls`); absent: plaintext. */
  readonly tls?: ClientTlsFiles;
}

/**
 * An executor in this process (`berth serve`): called directly, not through
 * loopback gRPC, and not health-checked (it lives and dies with us).
 */
export interface InProcessExecutorTarget {
  readonly id: string;
  readonly backend: BackendName;
  readonly client: ExecutorClient;
}

export type ExecutorTarget = RemoteExecutorTarget | InProcessExecutorTarget;

/** Executors found by DNS (`executor_discovery:`), re-resolved every `intervalMs`. */
export interface ExecutorDiscoveryOptions {
  readonly sources: readonly DiscoverySource<ClientTlsFiles>[];
  readonly intervalMs: number;
  readonly sharedSecret: string;
  /** The resolver; default the system's (tests inject one). */
  readonly resolve?: AddressResolver;
}

export interface DispatcherStartOptions {
  readonly config: BerthConfig;
  readonly discovery?: ExecutorDiscoveryOptions;
  readonly logger: Logger;
  readonly host: string;
  readonly port: number;
  readonly executors: readonly ExecutorTarget[];
  /** The config file the config came from; "always" approvals are written back to it (none: memory only). */
  readonly configPath?: string;
  /** Where to record metrics (served by whoever made it); absent: metrics are off. */
  readonly metricsRegistry?: Registry;
  /** Where to record spans (the process's tracer); absent: tracing is off. */
  readonly tracing?: Tracing;
}

export interface RunningDispatcher {
  readonly address: string;
  readonly port: number;
  readonly dispatcher: Dispatcher;
  /** The executors this dispatcher routes to now (static and discovered) and whether each is in rotation. */
  executors(): Array<{ readonly id: string; readonly healthy: boolean; readonly draining: boolean }>;
  /**
   * Re-reads server.tls's files and the executors' client certificates
   * (SIGHUP); false when some are bad and the previous ones stay in use.
   */
  reloadCertificates(): boolean;
  /** Cancels in-flight calls (their commands are killed) and stops serving. */
  close(graceMs?: number): Promise<void>;
}

/** How often the quota ledger takes every executor's TaskUsage report (idle reaping, restarts, metrics). */
const USAGE_REFRESH_MS = 10_000;
const USAGE_TIMEOUT_MS = 5000;

/**
 * The per-tenant quota ledger and its reconciliation with the executors:
 * once now, then every {@link USAGE_REFRESH_MS}, and before any task-side
 * refusal (see quota-ledger.ts).
 */
function startQuotas(config: BerthConfig, members: () => readonly ExecutorEndpoint[], logger: Logger) {
  const byId = { get: (id: string) => members().find((e) => e.id === id) };
  const state: { onRejected: ((quota: QuotaKey) => void) | undefined } = { onRejected: undefined };
  const ledger = new QuotaLedger({
    quotasFor: quotaResolver(config),
    logger,
    onRejected: (quota) => state.onRejected?.(quota),
    usage: {
      async fetch(executorId) {
        const endpoint = byId.get(executorId);
        if (!endpoint) throw new Error(`unknown executor ${executorId}`);
        const r = await endpoint.client.taskUsage({}, { signal: AbortSignal.timeout(USAGE_TIMEOUT_MS) });
        const limits = (l: typeof r.perTask) => ({ containers: l?.containers ?? 0, memoryMb: l?.memoryMb ?? 0, cpus: l?.cpus ?? 0 });
        return {
          tasks: r.tasks.map((t) => ({ tenant: t.task?.tenant ?? '', taskId: t.task?.taskId ?? '', held: limits(t.held) })),
          perTask: limits(r.perTask),
          perCodeContainer: limits(r.perCodeContainer),
        };
      },
      healthy: (executorId) => byId.get(executorId)?.healthy ?? false,
    },
    // An executor that has not answered: assume it runs with this config (the usual single config file).
    fallbackCosts: (executorId) => {
      const backend = byId.get(executorId)?.backend ?? config.terminal.backend;
      const code = (backend === 'ssh' || backend === 'singularity') && config.code_execution.code_container !== 'off';
      return taskContainerLimits(config, backend, code);
    },
  });
  const refreshAll = () => Promise.all(members().map((e) => ledger.refresh(e.id))).then(() => undefined);
  const timer = setInterval(() => void refreshAll().catch(() => undefined), USAGE_REFRESH_MS).unref();
  return {
    ledger,
    refreshAll,
    set onRejected(sink: (quota: QuotaKey) => void) {
      state.onRejected = sink;
    },
    stop: () => clearInterval(timer),
  };
}

export async function startDispatcher(options: DispatcherStartOptions): Promise<RunningDispatcher> {
  const { config } = options;
  const logger = options.logger.child({ component: 'dispatcher' });
  // key: the config key of the entry's TLS, for reload logs (undefined: plaintext).
  const connections: Array<{ key: string | undefined; connection: ExecutorConnection }> = [];
  const watched: WatchedExecutor[] = [];
  // Bad TLS files of an executor entry stop the start here, before anything listens.
  const credentials = serverCredentialsFor('server.tls', config.server.tls);
  // MCP servers' toolsets first: tenants[].toolsets may name them. Clashing server names stop the start.
  const mcp = new McpServers(config, logger);
  // Unknown names in tenants[].toolsets stop the start here too.
  const tenants = new TenantDirectory(config);
  // Likewise those of a discovery entry, rather than at the first executor that appears.
  options.discovery?.sources.forEach((source, i) => {
    try {
      if (source.tls) clientTls(source.tls);
    } catch (err) {
      throw err instanceof TlsMaterialError ? new ConfigError(`executor_discovery[${i}].tls (${source.dns}): ${err.message}`) : err;
    }
  });
  // Connects one remote executor; `key` names its config entry in errors and reload logs.
  const connect = (address: string, backend: BackendName, tls: ClientTlsFiles | undefined, secret: string, key: string, healthy: boolean) => {
    let connection: ExecutorConnection;
    try {
      connection = connectExecutor(address, secret, tls, options.tracing?.rpcClientSpans);
    } catch (err) {
      throw err instanceof TlsMaterialError ? new ConfigError(`${key}.tls (${address}): ${err.message}`) : err;
    }
    connections.push({ key: tls ? `${key}.tls (${address})` : undefined, connection });
    const endpoint: ExecutorEndpoint = {
      id: address,
      backend,
      healthy,
      get client() {
        return connection.client;
      },
    };
    const watch: WatchedExecutor = {
      endpoint,
      get channel() {
        return connection.channel;
      },
      explain: connection.explain,
    };
    return { endpoint, watch, connection };
  };
  let endpoints: ExecutorEndpoint[] = options.executors.map((t, i) => {
    if ('client' in t) return { id: t.id, backend: t.backend, healthy: true, client: t.client };
    const { endpoint, watch } = connect(t.address, t.backend, t.tls, t.sharedSecret, `executors[${i}]`, true);
    watched.push(watch);
    return endpoint;
  });
  const health = new ExecutorHealthWatcher(watched, {
    intervalMs: options.config.executor_health_interval_ms,
    timeoutMs: options.config.executor_health_timeout_ms,
    failuresBeforeDown: options.config.executor_health_failures,
    logger,
  });
  await health.checkAll();
  health.start();
  const members = () => endpoints;
  const router = new ExecutorRouter(members, (tenant) => tenants.policyFor(tenant), (id) => health.confirmDown(id));
  const discovery = options.discovery && startDiscovery(options.discovery);
  await discovery?.refresh();

  /** Membership from DNS: new addresses join once healthy, vanished ones leave (their tasks are reported lost). */
  function startDiscovery(d: ExecutorDiscoveryOptions) {
    const found = new ExecutorDiscovery(d.sources, { logger, ...(d.resolve ? { resolve: d.resolve } : {}) });
    const joined = new Map<string, ExecutorConnection>();
    let running: Promise<void> | undefined;
    const refresh = () =>
      (running ??= (async () => {
        const { added, removed } = await found.refresh();
        for (const address of removed) {
          // Only what discovery added leaves with it: a static entry of the same address stays.
          if (!joined.has(address)) continue;
          endpoints = endpoints.filter((e) => e.id !== address);
          health.remove(address);
          router.forgetHolders(address);
          // Calls still on it finish or fail by themselves; the channel goes once they had time to.
          const connection = joined.get(address);
          joined.delete(address);
          if (connection) {
            connections.splice(connections.findIndex((c) => c.connection === connection), 1);
            setTimeout(() => connection.close(), 60_000).unref();
          }
        }
        await Promise.all(
          // An address also listed under executors: is that entry already.
          added.filter((m) => !endpoints.some((e) => e.id === m.address)).map(async (m) => {
            const i = d.sources.findIndex((s) => s.backend === m.backend && s.tls === m.tls);
            const { endpoint, watch, connection } = connect(m.address, m.backend, m.tls, d.sharedSecret, `executor_discovery[${i}]`, false);
            joined.set(m.address, connection);
            endpoints = [...endpoints, endpoint];
            await health.add(watch);
          }),
        );
        if (added.length > 0) router.forgetHolders();
      })().finally(() => {
        running = undefined;
      }));
    const timer = setInterval(() => void refresh().catch((err: unknown) => logger.error({ err }, 'executor discovery failed')), d.intervalMs).unref();
    return { refresh, stop: () => clearInterval(timer) };
  }
  const registry = new ToolRegistry({ logger });
  // Web providers read their credentials here, in the dispatcher; they never reach executors or sandboxes.
  registerBuiltinTools(registry, config, { env: process.env });
  const metrics = options.metricsRegistry && new DispatcherMetrics(options.metricsRegistry, (name) => registry.has(name));
  const approvals = new ApprovalService({
    config,
    logger,
    ...(options.configPath === undefined ? {} : { configPath: options.configPath }),
    // The key stays in the environment; config names only the variable.
    smartApiKey: process.env[config.approvals.smart.api_key_env] ?? '',
    ...(metrics ? { onDecision: metrics.approvalDecided } : {}),
  });
  const quotas = anyQuota(config) ? startQuotas(config, members, logger) : undefined;
  if (quotas && metrics && options.metricsRegistry) {
    quotas.onRejected = metrics.observeQuotas(options.metricsRegistry, quotas.ledger, config.metrics.tenant_labels);
  }
  // Tasks still alive on the executors (a dispatcher restart) count from the first call.
  await quotas?.refreshAll();
  const dispatcher = new Dispatcher({
    ...(quotas ? { quotas: quotas.ledger } : {}),
    registry,
    router,
    terminal: config.terminal,
    logger,
    approvals,
    executeCodeSchema: executeCodeSchemaPatcher(executeCodeLimitsFromConfig(config)),
    ...(metrics ? { metrics } : {}),
    ...(options.tracing ? { tracing: new ToolCallTracing(options.tracing, (name) => registry.has(name)) } : {}),
    tenantTools: (tenant) => tenants.toolsFor(tenant),
    mcp,
  });

  const shutdown = new AbortController();
  const draining = new AbortController();
  const { server, health: serving } = createBerthServer(logger, shutdown.signal, [DispatcherDefinition.fullName], options.metricsRegistry);
  (options.tracing ? server.with(options.tracing.continueTrace) : server)
    .with(tenants.middleware())
    .add(DispatcherDefinition, createDispatcherService(dispatcher, logger, shutdown.signal, draining.signal));
  const port = await listenOrExplain(server, `${options.host}:${options.port}`, credentials, {
    name: 'the Dispatcher API',
    portSetting: '--port N (server.port, BERTH_PORT)',
  });
  const address = `${options.host}:${port}`;
  logger.info(
    { address, executors: members().map((e) => e.id), tls: credentials ? { serial: credentials.certificate.serial, mutual: config.server.tls?.client_ca_file !== undefined } : false },
    'dispatcher listening',
  );

  let closing: Promise<void> | undefined;
  return {
    address,
    port,
    dispatcher,
    executors: () => members().map((e) => ({ id: e.id, healthy: e.healthy, draining: e.draining ?? false })),
    reloadCertificates() {
      let ok = credentials ? reloadCertificates('server.tls', credentials, logger) : true;
      for (const { key, connection } of connections) {
        if (key === undefined) continue;
        try {
          connection.reload();
          logger.info({ key }, `${key}: client certificate reloaded; new connections to the executor use it`);
        } catch (err) {
          ok = false;
          logger.error({ key, error: (err as Error).message }, `${key}: client certificate not reloaded, the previous one stays in use: ${(err as Error).message}`);
        }
      }
      return ok;
    },
    close(graceMs = config.server.shutdown_grace_ms) {
      closing ??= (async () => {
        // Out of the load balancer's rotation, stop taking calls, give in-flight ones (and Session streams) the grace, then cancel them.
        serving.setStatus('unhealthy');
        draining.abort();
        const graceful = server.shutdown();
        const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref());
        await Promise.race([graceful, sleep(graceMs)]);
        shutdown.abort();
        health.stop();
        discovery?.stop();
        quotas?.stop();
        // Let cancelled handlers send their UNAVAILABLE before the transport goes.
        await Promise.race([graceful, sleep(500)]);
        server.forceShutdown();
        for (const { connection } of connections) connection.close();
      })();
      return closing;
    },
  };
}
