/**
 * The /metrics endpoint over real HTTP on loopback: what it answers, a port
 * in use, and that it goes away with what it served.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:net';
import { parseConfig } from '../../services/common/config-load.js';
import { silentLogger } from '../../services/common/logging.js';
import { createMetricsRegistry, counter } from '../../services/common/metrics.js';
import { listenMetrics, startWithMetrics, type MetricsEndpoint } from '../../services/common/metrics-server.js';
import { sample } from '../support/metrics-text.js';

function occupy(): Promise<Server> {
  return new Promise((resolve) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => resolve(server));
  });
}

const portOf = (server: Server) => (server.address() as { port: number }).port;

async function isListening(port: number): Promise<boolean> {
  return fetch(`http://127.0.0.1:${port}/metrics`).then(
    () => true,
    () => false,
  );
}

describe('metrics endpoint', () => {
  let endpoint: MetricsEndpoint;

  before(async () => {
    const registry = createMetricsRegistry();
    counter(registry, { name: 'berth_test_total', help: 'a test counter', labelNames: ['kind'] }).labels({ kind: 'a' }).inc(3);
    endpoint = await listenMetrics({ host: '127.0.0.1', port: 0, setting: 'metrics.port', registry, logger: silentLogger() });
  });

  after(() => endpoint.close());

  test('GET /metrics answers the text exposition format with our series and the process metrics', async () => {
    assert.match(endpoint.url, /^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
    const res = await fetch(endpoint.url);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
    const text = await res.text();
    assert.equal(sample(text, 'berth_test_total', { kind: 'a' }), 3);
    assert.ok((sample(text, 'process_cpu_user_seconds_total') ?? -1) >= 0);
    const withQuery = await fetch(`${endpoint.url}?debug=1`);
    assert.equal(withQuery.status, 200);
    await withQuery.arrayBuffer();
  });

  test('HEAD /metrics has the headers and no body', async () => {
    const res = await fetch(endpoint.url, { method: 'HEAD' });
    assert.equal(res.status, 200);
    assert.equal(await res.text(), '');
  });

  test('any other path is 404, another method on /metrics is 405', async () => {
    for (const path of ['/', '/metric', '/metrics/', '/healthz', '/metrics/../etc/passwd']) {
      const res = await fetch(`http://${endpoint.address}${path}`);
      assert.equal(res.status, 404, path);
      await res.arrayBuffer();
    }
    const post = await fetch(endpoint.url, { method: 'POST', body: 'x' });
    assert.equal(post.status, 405);
    assert.equal(post.headers.get('allow'), 'GET, HEAD');
    await post.arrayBuffer();
  });

  test('a port in use fails at start, naming the address and the setting to change', async () => {
    const taken = await occupy();
    try {
      await assert.rejects(
        listenMetrics({
          host: '127.0.0.1',
          port: portOf(taken),
          setting: 'metrics.port (BERTH_METRICS_PORT)',
          registry: createMetricsRegistry({ processMetrics: false }),
          logger: silentLogger(),
        }),
        new RegExp(`^Error: cannot serve metrics on 127\\.0\\.0\\.1:${portOf(taken)}: the port is in use .*metrics\\.port \\(BERTH_METRICS_PORT\\)$`),
      );
    } finally {
      taken.close();
    }
  });

  test('close stops listening even with a scraper keeping its connection open', async () => {
    const other = await listenMetrics({
      host: '127.0.0.1',
      port: 0,
      setting: 'metrics.port',
      registry: createMetricsRegistry({ processMetrics: false }),
      logger: silentLogger(),
    });
    const res = await fetch(other.url, { keepalive: true });
    await res.text();
    await other.close();
    assert.equal(await isListening(other.port), false);
  });
});

describe('startWithMetrics', () => {
  test('disabled: no registry for the server and no listener', async () => {
    const config = parseConfig({}).metrics;
    const { running, metrics } = await startWithMetrics(config, 'dispatcher', silentLogger(), async (registry) => registry);
    assert.equal(running, undefined);
    assert.equal(metrics, undefined);
  });

  test('enabled: the executor role uses executor_port, and a failed start closes the endpoint again', async () => {
    const probe = await occupy();
    const port = portOf(probe);
    await new Promise((resolve) => probe.close(resolve));
    const config = parseConfig({ metrics: { enabled: true, port: 1, executor_port: port } }).metrics;
    await assert.rejects(
      startWithMetrics(config, 'executor', silentLogger(), async (registry) => {
        assert.ok(registry);
        assert.equal(await isListening(port), true);
        throw new Error('backend failed');
      }),
      /backend failed/,
    );
    assert.equal(await isListening(port), false);
  });
});
