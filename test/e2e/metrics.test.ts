/**
 * End to end: `bin/berth serve` with metrics on, driven through the CLI and a
 * gRPC client as a user would, then scraped over HTTP like Prometheus does.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { ClientError, Status } from 'nice-grpc';
import { BERTH_BIN, REPO_ROOT, startServe, type ServeProcess } from '../support/serve-process.js';
import { labelValues, metricType, sample } from '../support/metrics-text.js';

/** A task id that must never show up in the metrics (task ids are not labels). */
const TASK = 'metrics-task-5e1f';

async function scrape(url: string): Promise<string> {
  const res = await fetch(url);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /^text\/plain/);
  return res.text();
}

function occupy(): Promise<Server> {
  return new Promise((resolve) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => resolve(server));
  });
}

const portOf = (server: Server) => (server.address() as { port: number }).port;

describe('berth serve --metrics-port 0', () => {
  let serve: ServeProcess;
  let url: string;

  before(async () => {
    serve = await startServe(['--metrics-port', '0']);
    assert.ok(serve.metricsUrl, `no metrics line on stdout; logs:\n${serve.logs()}`);
    url = serve.metricsUrl;
  });

  after(() => serve.stop());

  test('before any call: process metrics, and no tool series yet', async () => {
    const text = await scrape(url);
    assert.equal(metricType(text, 'process_cpu_user_seconds_total'), 'counter');
    assert.equal(metricType(text, 'nodejs_heap_size_used_bytes'), 'gauge');
    assert.equal(sample(text, 'berth_tool_calls_total', { tool: 'terminal', status: 'success' }), undefined);
  });

  test('tool calls, their latency, RPCs, environments and approvals move as the calls went', async () => {
    const ok = await serve.cli(['call', 'terminal', '{"command":"true"}', '--task', TASK]);
    assert.deepEqual(JSON.parse(ok.stdout), { output: '', exit_code: 0, error: null });
    const missing = await serve.cli(['call', 'read_file', '{"path":"/nonexistent/berth-metrics-test"}', '--task', TASK]);
    assert.match(JSON.parse(missing.stdout).error, /not found/i);
    const unknown = await serve.cli(['call', 'no_such_tool_ab12', '{}', '--task', TASK]);
    assert.deepEqual(JSON.parse(unknown.stdout), { error: 'Unknown tool: no_such_tool_ab12' });
    // Unary CallTool: a plain command, then one that needs approval (parked for Approve), then a bad task id.
    const unary = await serve.client.callTool({ name: 'terminal', argumentsJson: '{"command":"echo hi"}', taskId: TASK, sessionId: '' });
    assert.equal(JSON.parse(unary.resultJson).output, 'hi');
    const parked = JSON.parse(
      (await serve.client.callTool({ name: 'terminal', argumentsJson: `{"command":"bash -c 'echo hi'"}`, taskId: TASK, sessionId: '' }))
        .resultJson,
    );
    assert.equal(parked.status, 'pending_approval');
    const denied = await serve.client.approve({ approvalId: String(parked.approval_id), choice: 'deny', taskId: TASK, sessionId: '' });
    assert.equal(JSON.parse(denied.resultJson).status, 'blocked');
    await assert.rejects(
      serve.client.callTool({ name: 'terminal', argumentsJson: '{"command":"true"}', taskId: '../etc', sessionId: '' }),
      (err: unknown) => err instanceof ClientError && err.code === Status.INVALID_ARGUMENT,
    );

    const text = await scrape(url);
    const calls = (tool: string, status: string) => sample(text, 'berth_tool_calls_total', { tool, status });
    assert.equal(calls('terminal', 'success'), 3, 'true, echo hi, and the parked call (pending is no error)');
    assert.equal(calls('read_file', 'tool_error'), 1);
    assert.equal(calls('unknown', 'tool_error'), 1, 'unknown tool names share one label');
    assert.equal(calls('terminal', 'INVALID_ARGUMENT'), 1);
    assert.deepEqual(labelValues(text, 'berth_tool_calls_total', 'tool'), ['read_file', 'terminal', 'unknown']);

    assert.equal(metricType(text, 'berth_tool_call_duration_seconds'), 'histogram');
    const count = (tool: string) => sample(text, 'berth_tool_call_duration_seconds_count', { tool });
    assert.equal(count('terminal'), 4);
    assert.equal(count('read_file'), 1);
    assert.ok((sample(text, 'berth_tool_call_duration_seconds_sum', { tool: 'terminal' }) ?? 0) > 0);
    assert.equal(sample(text, 'berth_tool_call_duration_seconds_bucket', { tool: 'terminal', le: '600' }), 4);
    assert.equal(sample(text, 'berth_tool_call_duration_seconds_bucket', { tool: 'terminal', le: '+Inf' }), 4);
    assert.ok((sample(text, 'berth_tool_call_duration_seconds_bucket', { tool: 'terminal', le: '0.001' }) ?? -1) >= 0);

    const rpc = (method: string, code: string) => sample(text, 'berth_rpc_calls_total', { service: 'berth.v1.Dispatcher', method, code });
    assert.equal(rpc('Session', 'OK'), 3, 'each berth call is one Session stream');
    assert.equal(rpc('CallTool', 'OK'), 2);
    assert.equal(rpc('CallTool', 'INVALID_ARGUMENT'), 1);
    assert.equal(rpc('Approve', 'OK'), 1);

    assert.equal(sample(text, 'berth_approval_decisions_total', { decision: 'pending', reason: 'approve_rpc' }), 1);
    assert.equal(sample(text, 'berth_approval_decisions_total', { decision: 'blocked', reason: 'user_deny' }), 1);

    assert.equal(sample(text, 'berth_task_environments', { backend: 'local' }), 1);
    assert.equal(sample(text, 'berth_task_environments_created_total', { backend: 'local' }), 1);

    assert.ok(!text.includes(TASK), 'task ids are never labels');
  });

  test('EndTask releases the environment: the live gauge goes down, the release is counted', async () => {
    assert.equal((await serve.client.endTask({ taskId: TASK })).released, true);
    const text = await scrape(url);
    assert.equal(sample(text, 'berth_task_environments', { backend: 'local' }), 0);
    assert.equal(sample(text, 'berth_task_environments_released_total', { backend: 'local', reason: 'end_task' }), 1);
    assert.equal(sample(text, 'berth_rpc_calls_total', { service: 'berth.v1.Dispatcher', method: 'EndTask', code: 'OK' }), 1);
  });

  test('a call under an old tool name is counted under the current one', async () => {
    for (const name of ['process', 'process_manage']) {
      const r = await serve.client.callTool({ name, argumentsJson: '{"action":"list"}', taskId: 'metrics-names', sessionId: '' });
      assert.ok(Array.isArray(JSON.parse(r.resultJson).processes), r.resultJson);
    }
    const text = await scrape(url);
    assert.equal(sample(text, 'berth_tool_calls_total', { tool: 'process_manage', status: 'success' }), 2);
    assert.equal(sample(text, 'berth_tool_call_duration_seconds_count', { tool: 'process_manage' }), 2);
    assert.ok(!labelValues(text, 'berth_tool_calls_total', 'tool').includes('process'));
  });

  test('paths other than /metrics are 404', async () => {
    const base = new URL(url);
    for (const path of ['/', '/metricz', '/debug/vars']) {
      const res = await fetch(new URL(path, base));
      assert.equal(res.status, 404, path);
      await res.arrayBuffer();
    }
  });
});

describe('berth serve metrics settings', () => {
  let dir: string;

  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'berth-e2e-metrics-'));
  });

  after(() => rmSync(dir, { recursive: true, force: true }));

  test('metrics off (the default) means no listener, even with a port configured', async () => {
    const free = await occupy();
    const port = portOf(free);
    await new Promise((resolve) => free.close(resolve));
    const configFile = join(dir, 'off.yaml');
    writeFileSync(configFile, `metrics:\n  enabled: false\n  port: ${port}\n`);
    const serve = await startServe(['--config', configFile]);
    try {
      assert.equal(serve.metricsUrl, undefined);
      const r = await serve.cli(['call', 'terminal', '{"command":"true"}']);
      assert.equal(r.code, 0, r.stderr);
      await assert.rejects(fetch(`http://127.0.0.1:${port}/metrics`), 'nothing listens on the metrics port');
    } finally {
      await serve.stop();
    }
  });

  test('enabled in the config file with BERTH_METRICS_PORT from the environment', async () => {
    const free = await occupy();
    const port = portOf(free);
    await new Promise((resolve) => free.close(resolve));
    const configFile = join(dir, 'on.yaml');
    writeFileSync(configFile, 'metrics:\n  enabled: true\n  port: 1\n');
    const serve = await startServe(['--config', configFile], { env: { BERTH_METRICS_PORT: String(port) } });
    try {
      assert.equal(serve.metricsUrl, `http://127.0.0.1:${port}/metrics`);
      assert.equal(metricType(await scrape(serve.metricsUrl), 'process_cpu_user_seconds_total'), 'counter');
    } finally {
      await serve.stop();
    }
  });

  test('a metrics port in use fails at start with a clear message, and nothing keeps running', async () => {
    const taken = await occupy();
    try {
      const port = portOf(taken);
      const run = promisify(execFile)(process.execPath, [BERTH_BIN, 'serve', '--port', '0', '--metrics-port', String(port)], {
        cwd: REPO_ROOT,
        env: { ...process.env, BERTH_LOG_LEVEL: 'warn' },
        timeout: 30_000,
      });
      await assert.rejects(run, (err: { code?: number; stderr?: string; killed?: boolean }) => {
        assert.equal(err.killed, false, 'it exited by itself');
        assert.equal(err.code, 1);
        assert.equal(
          err.stderr?.trim(),
          `berth: cannot serve metrics on 127.0.0.1:${port}: the port is in use by another process; ` +
            'choose another port with metrics.port (BERTH_METRICS_PORT, --metrics-port)',
        );
        return true;
      });
    } finally {
      taken.close();
    }
  });
});
