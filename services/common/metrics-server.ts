/**
 * The `/metrics` endpoint: a plain node:http server that answers GET (and
 * HEAD) /metrics with the registry in the Prometheus text format, and 404 to
 * everything else. It serves one registry; `berth serve` puts both halves on it.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { MetricsConfig } from './config.js';
import type { Logger } from './logging.js';
import { createMetricsRegistry, type Registry } from './metrics.js';

export interface MetricsEndpoint {
  readonly registry: Registry;
  /** host:port it listens on (the real port when 0 was asked for). */
  readonly address: string;
  readonly port: number;
  /** http://host:port/metrics */
  readonly url: string;
  close(): Promise<void>;
}

export interface MetricsListen {
  readonly host: string;
  readonly port: number;
  /** Named in the error when the port is taken, e.g. `metrics.port`. */
  readonly setting: string;
  readonly registry: Registry;
  readonly logger: Logger;
}

function httpHost(host: string): string {
  return host.includes(':') ? `[${host}]` : host;
}

/** Serves `registry` on http://host:port/metrics; rejects with a clear message when the port cannot be had. */
export async function listenMetrics(options: MetricsListen): Promise<MetricsEndpoint> {
  const { registry, logger } = options;
  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?', 1)[0];
    if (path !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end('Not found: metrics are at /metrics\n');
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain; charset=utf-8' }).end('Method not allowed\n');
      return;
    }
    registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': registry.contentType }).end(req.method === 'HEAD' ? undefined : text),
      (err: unknown) => {
        logger.warn({ err }, 'collecting metrics failed');
        res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' }).end('Collecting metrics failed; the server log has the details\n');
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => {
      const where = `${httpHost(options.host)}:${options.port}`;
      const why =
        err.code === 'EADDRINUSE'
          ? 'the port is in use by another process'
          : err.code === 'EACCES'
            ? 'permission denied'
            : err.message;
      reject(new Error(`cannot serve metrics on ${where}: ${why}; choose another port with ${options.setting}`, { cause: err }));
    });
    server.listen(options.port, options.host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const address = `${httpHost(options.host)}:${port}`;
  logger.info({ address }, 'metrics listening');
  return {
    registry,
    address,
    port,
    url: `http://${address}/metrics`,
    close: () => closeServer(server),
  };
}

function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve());
    // A scraper's keep-alive connection must not hold the shutdown up.
    server.closeAllConnections();
  });
}

/** Which port a server process serves metrics on: `berth executor` has its own, so both fit on one host. */
export type MetricsRole = 'dispatcher' | 'executor';

const PORT_SETTING: Readonly<Record<MetricsRole, { key: 'port' | 'executor_port'; names: string }>> = {
  dispatcher: { key: 'port', names: 'metrics.port (BERTH_METRICS_PORT, --metrics-port)' },
  executor: { key: 'executor_port', names: 'metrics.executor_port (BERTH_METRICS_EXECUTOR_PORT, --metrics-port)' },
};

/**
 * Starts a server process with its metrics: when `config.enabled`, the
 * endpoint listens first (a port in use fails before anything else starts)
 * and `start` gets the registry to record on; disabled, `start` gets none
 * and records nothing. The endpoint is closed again when `start` fails.
 * `berth serve` and `berth dispatcher` are the `dispatcher` role.
 */
export async function startWithMetrics<T>(
  config: MetricsConfig,
  role: MetricsRole,
  logger: Logger,
  start: (registry: Registry | undefined) => Promise<T>,
): Promise<{ readonly running: T; readonly metrics: MetricsEndpoint | undefined }> {
  if (!config.enabled) return { running: await start(undefined), metrics: undefined };
  const { key, names } = PORT_SETTING[role];
  const metrics = await listenMetrics({
    host: config.host,
    port: config[key],
    setting: names,
    registry: createMetricsRegistry(),
    logger,
  });
  try {
    return { running: await start(metrics.registry), metrics };
  } catch (err) {
    await metrics.close();
    throw err;
  }
}
