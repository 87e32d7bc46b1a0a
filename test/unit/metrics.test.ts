import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { Status, ServerError } from 'nice-grpc';
import { BerthError } from '../../services/common/errors.js';
import { silentLogger } from '../../services/common/logging.js';
import { createMetricsRegistry, Series } from '../../services/common/metrics.js';
import { DispatcherMetrics, resultHasError } from '../../services/dispatcher/dispatcher-metrics.js';
import type { Backend, BackendEnvironment, TaskKey } from '../../services/executor/backend.js';
import { codeRunOutcome } from '../../services/executor/code-execution/code-runner.js';
import { ExecutorMetrics } from '../../services/executor/executor-metrics.js';
import { TaskEnvironments } from '../../services/executor/task-environment.js';
import type { TaskCodeRunResult } from '../../services/common/task-client.js';
import { labelValues, metricType, sample } from '../support/metrics-text.js';

describe('resultHasError', () => {
  const cases: Array<[string, boolean]> = [
    ['{"output":"","exit_code":0,"error":null}', false],
    ['{"error":"Unknown tool: nope"}', true],
    ['{"output":"","exit_code":-1,"error":"Invalid command: expected string, got int","status":"error"}', true],
    // The pending-approval result: an empty error is no error.
    ['{"output":"","exit_code":-1,"error":"","status":"pending_approval","approval_pending":true}', false],
    // "error": inside a string value is escaped, so it is not the key.
    ['{"output":"{\\"error\\":\\"x\\"}","exit_code":0,"error":null}', false],
    ['{"content":"say \\"error\\": 1"}', false],
    // A string ending in a backslash, then the real key.
    ['{"output":"C:\\\\","error":"boom"}', true],
    ['{"path":"/tmp/x","content":"     1|hi","total_lines":1}', false],
    ['plain text', false],
  ];
  for (const [result, expected] of cases) {
    test(`${result} → ${expected}`, () => assert.equal(resultHasError(result), expected));
  }

  test('agrees with JSON.parse on the top-level error', () => {
    for (const [result] of cases) {
      let parsed: unknown;
      try {
        parsed = JSON.parse(result);
      } catch {
        continue;
      }
      const error = (parsed as { error?: unknown }).error;
      assert.equal(resultHasError(result), error !== undefined && error !== null && error !== '', result);
    }
  });
});

describe('DispatcherMetrics', () => {
  test('counts calls by tool and status, times them, and folds unknown tool names into one label', async () => {
    const registry = createMetricsRegistry({ processMetrics: false });
    const metrics = new DispatcherMetrics(registry, (name) => ['terminal', 'read_file'].includes(name));
    metrics.toolCallDone('terminal', 0.004, '{"output":"","exit_code":0,"error":null}');
    metrics.toolCallDone('terminal', 0.02, '{"output":"","exit_code":0,"error":null}');
    metrics.toolCallDone('read_file', 0.002, '{"error":"File not found: /x"}');
    metrics.toolCallFailed('terminal', 0.5, new BerthError('UNAVAILABLE', 'executor down'));
    metrics.toolCallFailed('terminal', 0.1, new ServerError(Status.INVALID_ARGUMENT, 'bad task id'));
    metrics.toolCallFailed('terminal', 0.1, new Error('a bug'));
    for (let i = 0; i < 50; i++) metrics.toolCallDone(`made_up_${i}`, 0.001, '{"error":"Unknown tool"}');
    metrics.approvalDecided('approved', 'user_once');
    metrics.approvalDecided('approved', 'user_once');
    metrics.approvalDecided('blocked', 'hardline');

    const text = await registry.metrics();
    const calls = (labels: Record<string, string>) => sample(text, 'berth_tool_calls_total', labels);
    assert.equal(calls({ tool: 'terminal', status: 'success' }), 2);
    assert.equal(calls({ tool: 'read_file', status: 'tool_error' }), 1);
    assert.equal(calls({ tool: 'terminal', status: 'UNAVAILABLE' }), 1);
    assert.equal(calls({ tool: 'terminal', status: 'INVALID_ARGUMENT' }), 1);
    assert.equal(calls({ tool: 'terminal', status: 'INTERNAL' }), 1);
    assert.equal(calls({ tool: 'unknown', status: 'tool_error' }), 50);
    assert.deepEqual(labelValues(text, 'berth_tool_calls_total', 'tool'), ['read_file', 'terminal', 'unknown']);

    assert.equal(metricType(text, 'berth_tool_call_duration_seconds'), 'histogram');
    const bucket = (le: string) => sample(text, 'berth_tool_call_duration_seconds_bucket', { tool: 'terminal', le });
    assert.equal(bucket('0.001'), 0);
    assert.equal(bucket('0.005'), 1);
    assert.equal(bucket('0.025'), 2);
    assert.equal(bucket('0.5'), 5);
    assert.equal(bucket('600'), 5);
    assert.equal(sample(text, 'berth_tool_call_duration_seconds_count', { tool: 'terminal' }), 5);

    assert.equal(sample(text, 'berth_approval_decisions_total', { decision: 'approved', reason: 'user_once' }), 2);
    assert.equal(sample(text, 'berth_approval_decisions_total', { decision: 'blocked', reason: 'hardline' }), 1);
  });

  test('two servers on one registry share the metric instead of failing to register it twice', async () => {
    const registry = createMetricsRegistry({ processMetrics: false });
    new DispatcherMetrics(registry, () => true).toolCallDone('terminal', 0.01, '{}');
    new DispatcherMetrics(registry, () => true).toolCallDone('terminal', 0.01, '{}');
    assert.equal(sample(await registry.metrics(), 'berth_tool_calls_total', { tool: 'terminal', status: 'success' }), 2);
  });

  test('the default registry has process metrics; ours are never on prom-client\'s global registry', async () => {
    const text = await createMetricsRegistry().metrics();
    assert.equal(metricType(text, 'process_cpu_seconds_total'), 'counter');
    assert.equal(metricType(text, 'nodejs_eventloop_lag_seconds'), 'gauge');
    const { register } = await import('prom-client');
    assert.equal(register.getSingleMetric('berth_tool_calls_total'), undefined);
  });
});

describe('Series', () => {
  test('makes each child once per pair of keys', () => {
    const made: string[] = [];
    const series = new Series((a: string, b: number) => {
      made.push(`${a}/${b}`);
      return { a, b };
    });
    assert.equal(series.get('x', 1), series.get('x', 1));
    assert.notEqual(series.get('x', 1), series.get('x', 2));
    series.get('y', 1);
    assert.deepEqual(made, ['x/1', 'x/2', 'y/1']);
  });
});

/** A backend whose environments run nothing: enough for TaskEnvironments' bookkeeping. */
function inertBackend(): Backend {
  const environment = (key: TaskKey): BackendEnvironment =>
    ({
      description: `inert ${key.taskId}`,
      homeDir: '/home/x',
      initialCwd: '/work',
      stateDir: '/state',
      exec: () => Promise.reject(new Error('inert')),
      startBackground: () => Promise.reject(new Error('inert')),
      readFile: () => Promise.reject(new Error('inert')),
      writeFile: () => Promise.reject(new Error('inert')),
      stat: () => Promise.reject(new Error('inert')),
      dispose: () => Promise.resolve(),
    }) satisfies BackendEnvironment;
  return {
    capabilities: { name: 'local', pty: false, hostFilesystem: true, sharesRpcDir: true },
    createEnvironment: async (key) => environment(key),
    close: async () => undefined,
  };
}

describe('ExecutorMetrics with TaskEnvironments', () => {
  test('live environments go up on creation and down on release, with the reason counted', async () => {
    const registry = createMetricsRegistry({ processMetrics: false });
    const metrics = new ExecutorMetrics(registry, 'local');
    const environments = new TaskEnvironments({ backend: inertBackend(), logger: silentLogger(), lifetimeSeconds: 1, metrics });
    const use = (taskId: string) => environments.withForeground({ tenant: 't', taskId }, async () => undefined);
    await use('a');
    await use('a');
    await use('b');
    await use('idle');
    const at = async () => {
      const text = await registry.metrics();
      return {
        live: sample(text, 'berth_task_environments', { backend: 'local' }),
        created: sample(text, 'berth_task_environments_created_total', { backend: 'local' }),
        released: (reason: string) => sample(text, 'berth_task_environments_released_total', { backend: 'local', reason }),
      };
    };
    let now = await at();
    assert.equal(now.live, 3);
    assert.equal(now.created, 3);
    assert.equal(await environments.release({ tenant: 't', taskId: 'a' }), true);
    assert.equal(await environments.release({ tenant: 't', taskId: 'a' }), false, 'a second release is no release');
    now = await at();
    assert.equal(now.live, 2);
    assert.equal(now.released('end_task'), 1);
    // 'b' and 'idle' are reaped after a second without calls.
    await sleep(1300);
    now = await at();
    assert.equal(now.released('idle'), 2);
    assert.equal(now.live, 0);
    await use('c');
    await environments.closeAll();
    now = await at();
    assert.equal(now.released('shutdown'), 1);
    assert.equal(now.live, 0);
    assert.equal(now.created, 4);
  });

  test('container starts and execute_code outcomes are counted by their labels', async () => {
    const registry = createMetricsRegistry({ processMetrics: false });
    const metrics = new ExecutorMetrics(registry, 'docker');
    metrics.containerStarted('task', 'cold');
    metrics.containerStarted('task', 'warm');
    metrics.containerStarted('task', 'warm');
    metrics.containerStarted('code', 'replacement');
    const result = (r: Partial<TaskCodeRunResult>): TaskCodeRunResult => ({
      stdout: '',
      stderr: '',
      exitCode: 0,
      timedOut: false,
      interrupted: false,
      ranIn: '',
      interpreter: '',
      notices: [],
      ...r,
    });
    metrics.codeRun(codeRunOutcome(result({})));
    metrics.codeRun(codeRunOutcome(result({ exitCode: 1 })));
    metrics.codeRun(codeRunOutcome(result({ exitCode: 124, timedOut: true })));
    metrics.codeRun(codeRunOutcome(result({ exitCode: 130, interrupted: true })));
    metrics.codeRun('failed');
    const text = await registry.metrics();
    const starts = (role: string, kind: string) => sample(text, 'berth_container_starts_total', { backend: 'docker', role, kind });
    assert.equal(starts('task', 'cold'), 1);
    assert.equal(starts('task', 'warm'), 2);
    assert.equal(starts('code', 'replacement'), 1);
    for (const outcome of ['success', 'error', 'timeout', 'interrupted', 'failed']) {
      assert.equal(sample(text, 'berth_execute_code_runs_total', { backend: 'docker', outcome }), 1, outcome);
    }
  });

  test('the warm pool gauges read the pool at each scrape', async () => {
    const registry = createMetricsRegistry({ processMetrics: false });
    let pool = { ready: 1, target: 2 };
    ExecutorMetrics.observeWarmPool(registry, 'docker', () => pool);
    const read = async () => {
      const text = await registry.metrics();
      return [sample(text, 'berth_warm_pool_ready', { backend: 'docker' }), sample(text, 'berth_warm_pool_target', { backend: 'docker' })];
    };
    assert.deepEqual(await read(), [1, 2]);
    pool = { ready: 5, target: 8 };
    assert.deepEqual(await read(), [5, 8]);
  });
});
