/**
 * The quota ledger and its token bucket, with an injected clock and a test
 * double for the executors' TaskUsage reports (each report is released by
 * the test, so the order of events is the test's, never a timer's).
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { type QuotasConfig } from '../../services/common/config.js';
import { parseConfig } from '../../services/common/config-load.js';
import { createMetricsRegistry } from '../../services/common/metrics.js';
import { DispatcherMetrics } from '../../services/dispatcher/dispatcher-metrics.js';
import {
  QuotaExceededError,
  QuotaLedger,
  type ContainerCost,
  type ExecutorUsageReport,
  type QuotaKey,
} from '../../services/dispatcher/quotas/quota-ledger.js';
import { anyQuota, quotaResolver } from '../../services/dispatcher/quotas/tenant-quotas.js';
import { TokenBucket } from '../../services/dispatcher/quotas/token-bucket.js';
import { sample } from '../support/metrics-text.js';

const NONE: ContainerCost = { containers: 0, memoryMb: 0, cpus: 0 };
const CONTAINER: ContainerCost = { containers: 1, memoryMb: 1024, cpus: 1 };

/** Test double of the executors: what each holds, answered when the test says so (or at once). */
class Executors {
  readonly tasks = new Map<string, Array<{ tenant: string; taskId: string; held: ContainerCost }>>();
  readonly healthy = new Map<string, boolean>();
  perTask: ContainerCost = NONE;
  perCodeContainer: ContainerCost = NONE;
  failing = false;
  hold = false;
  fetches = 0;
  readonly #pending: Array<() => void> = [];

  source() {
    return {
      fetch: async (id: string): Promise<ExecutorUsageReport> => {
        this.fetches += 1;
        // The report is what the executor holds when it is asked.
        const report = {
          tasks: [...(this.tasks.get(id) ?? [])],
          perTask: this.perTask,
          perCodeContainer: this.perCodeContainer,
        };
        const failing = this.failing;
        if (this.hold) await new Promise<void>((resolve) => this.#pending.push(resolve));
        if (failing) throw new Error('executor not answering');
        return report;
      },
      healthy: (id: string) => this.healthy.get(id) ?? true,
    };
  }

  /** Lets every held report arrive. */
  async deliver(): Promise<void> {
    for (const resolve of this.#pending.splice(0)) resolve();
    await new Promise((resolve) => setImmediate(resolve));
  }

  set(id: string, tasks: Array<[string, string, ContainerCost?]>): void {
    this.tasks.set(id, tasks.map(([tenant, taskId, held]) => ({ tenant, taskId, held: held ?? this.perTask })));
  }
}

function ledgerWith(quotas: Record<string, QuotasConfig>, executors = new Executors(), clock = { ms: 0 }) {
  const rejected: QuotaKey[] = [];
  const ledger = new QuotaLedger({
    quotasFor: (tenant) => quotas[tenant] ?? {},
    usage: executors.source(),
    fallbackCosts: () => ({ perTask: executors.perTask, perCodeContainer: executors.perCodeContainer }),
    nowMs: () => clock.ms,
    onRejected: (quota) => rejected.push(quota),
  });
  return { ledger, executors, clock, rejected };
}

function refusal(quota: QuotaKey, message: string) {
  return (err: unknown) => {
    assert.ok(err instanceof QuotaExceededError, `expected a QuotaExceededError, got ${String(err)}`);
    assert.equal(err.code, 'RESOURCE_EXHAUSTED');
    assert.equal(err.quota, quota);
    assert.equal(err.message, message);
    return true;
  };
}

describe('TokenBucket', () => {
  test('a full minute bursts at once, then refills at the rate', () => {
    const bucket = new TokenBucket(60, 0);
    for (let i = 0; i < 60; i++) assert.equal(bucket.tryTake(0), true, `token ${i}`);
    assert.equal(bucket.tryTake(0), false);
    assert.equal(bucket.used(0), 60);
    assert.equal(bucket.retryAfterMs(0), 1000);
    assert.equal(bucket.tryTake(999), false);
    assert.equal(bucket.tryTake(1000), true);
    assert.equal(bucket.tryTake(1000), false);
    // A quiet minute refills it, never beyond its capacity.
    assert.equal(bucket.used(120_000), 0);
    for (let i = 0; i < 60; i++) assert.equal(bucket.tryTake(120_000), true);
    assert.equal(bucket.tryTake(120_000), false);
  });

  test('a slow rate: one a minute', () => {
    const bucket = new TokenBucket(1, 5000);
    assert.equal(bucket.tryTake(5000), true);
    assert.equal(bucket.retryAfterMs(5000), 60_000);
    assert.equal(bucket.tryTake(64_999), false);
    assert.equal(bucket.tryTake(65_000), true);
  });
});

describe('QuotaLedger: calls and scripts', () => {
  test('max_concurrent_calls refuses the next call until one ends; other tenants are unaffected', () => {
    const { ledger, rejected } = ledgerWith({ acme: { max_concurrent_calls: 2 } });
    const a = ledger.beginCall('acme');
    ledger.beginCall('acme');
    assert.throws(
      () => ledger.beginCall('acme'),
      refusal(
        'max_concurrent_calls',
        'tenant acme is at quotas.max_concurrent_calls (2 of 2 calls running); wait for a call to finish or raise the quota',
      ),
    );
    for (let i = 0; i < 5; i++) ledger.beginCall('globex');
    a.release();
    a.release(); // a second release frees nothing more
    ledger.beginCall('acme');
    assert.throws(() => ledger.beginCall('acme'), QuotaExceededError);
    assert.deepEqual(rejected, ['max_concurrent_calls', 'max_concurrent_calls']);
    assert.equal(ledger.use('acme').max_concurrent_calls, 2);
  });

  test('calls_per_minute is a token bucket on the injected clock', () => {
    const { ledger, clock } = ledgerWith({ acme: { calls_per_minute: 3 } });
    for (let i = 0; i < 3; i++) ledger.beginCall('acme').release();
    assert.throws(
      () => ledger.beginCall('acme'),
      refusal(
        'calls_per_minute',
        'tenant acme is at quotas.calls_per_minute (3 of 3 calls in the last minute); retry in 20s or raise the quota',
      ),
    );
    clock.ms = 20_000;
    ledger.beginCall('acme').release();
    assert.throws(() => ledger.beginCall('acme'), QuotaExceededError);
    ledger.beginCall('globex').release();
  });

  test('a call refused by the rate takes no concurrency slot', () => {
    const { ledger } = ledgerWith({ acme: { calls_per_minute: 1, max_concurrent_calls: 1 } });
    ledger.beginCall('acme').release();
    assert.throws(() => ledger.beginCall('acme'), QuotaExceededError);
    assert.equal(ledger.use('acme').max_concurrent_calls, 0);
  });

  test('max_execute_code counts running scripts', () => {
    const { ledger } = ledgerWith({ acme: { max_execute_code: 1 } });
    const script = ledger.beginScript('acme');
    assert.throws(
      () => ledger.beginScript('acme'),
      refusal(
        'max_execute_code',
        'tenant acme is at quotas.max_execute_code (1 of 1 scripts running); wait for a script to finish or raise the quota',
      ),
    );
    script.release();
    ledger.beginScript('acme');
  });
});

describe('QuotaLedger: live tasks', () => {
  test('max_tasks: a live task goes on, a new one is refused, EndTask frees its share at once', async () => {
    const { ledger, executors } = ledgerWith({ acme: { max_tasks: 2 } });
    (await ledger.admitTask('acme', 't1', 'e1')).release();
    (await ledger.admitTask('acme', 't2', 'e1')).release();
    executors.set('e1', [['acme', 't1'], ['acme', 't2']]);
    (await ledger.admitTask('acme', 't1', 'e1')).release();
    await assert.rejects(
      ledger.admitTask('acme', 't3', 'e1'),
      refusal('max_tasks', 'tenant acme is at quotas.max_tasks (2 of 2 live tasks); end a task or raise the quota'),
    );
    (await ledger.admitTask('globex', 't3', 'e1')).release();
    const done = ledger.releaseTask('acme', 't1');
    (await ledger.admitTask('acme', 't3', 'e1')).release();
    done();
  });

  test('concurrent first calls of new tasks never both pass the limit', async () => {
    const { ledger } = ledgerWith({ acme: { max_tasks: 3 } });
    const results = await Promise.allSettled(
      Array.from({ length: 8 }, (_, i) => ledger.admitTask('acme', `t${i}`, i % 2 === 0 ? 'e1' : 'e2')),
    );
    assert.equal(results.filter((r) => r.status === 'fulfilled').length, 3);
    assert.equal(ledger.use('acme').max_tasks, 3);
  });

  test('a task the executor reaped is not held against its tenant: the refusal asks the executors first', async () => {
    const { ledger, executors } = ledgerWith({ acme: { max_tasks: 1 } });
    (await ledger.admitTask('acme', 'old', 'e1')).release();
    executors.set('e1', [['acme', 'old']]);
    await assert.rejects(ledger.admitTask('acme', 'new', 'e1'), QuotaExceededError);
    executors.set('e1', []); // idle reaping released it on the executor
    (await ledger.admitTask('acme', 'new', 'e1')).release();
    assert.equal(ledger.use('acme').max_tasks, 1);
  });

  test('a report asked before a call started never drops the task that call is creating', async () => {
    const { ledger, executors } = ledgerWith({ acme: { max_tasks: 1 } });
    await ledger.refresh('e1'); // costs known
    executors.hold = true;
    const report = ledger.refresh('e1'); // asked now: the executor holds nothing yet
    const lease = await ledger.admitTask('acme', 't1', 'e1');
    await executors.deliver();
    await report;
    assert.equal(ledger.use('acme').max_tasks, 1, 'the reservation survived the stale report');
    lease.release();
    // The call ended before this report was asked, and the executor holds nothing: gone (its creation failed).
    executors.hold = false;
    await ledger.refresh('e1');
    assert.equal(ledger.use('acme').max_tasks, 0);
  });

  test('a report asked before EndTask finished does not bring the task back', async () => {
    const { ledger, executors } = ledgerWith({ acme: { max_tasks: 1 } });
    (await ledger.admitTask('acme', 't1', 'e1')).release();
    executors.set('e1', [['acme', 't1']]);
    executors.hold = true;
    const stale = ledger.refresh('e1');
    const done = ledger.releaseTask('acme', 't1');
    executors.set('e1', []);
    done();
    await executors.deliver();
    await stale;
    assert.equal(ledger.use('acme').max_tasks, 0);
    executors.hold = false;
    (await ledger.admitTask('acme', 't2', 'e1')).release();
  });

  test('a new ledger (dispatcher restart) counts what the executors still hold', async () => {
    const executors = new Executors();
    executors.set('e1', [['acme', 'a'], ['acme', 'b']]);
    executors.set('e2', [['acme', 'c'], ['globex', 'x']]);
    const { ledger } = ledgerWith({ acme: { max_tasks: 3 } }, executors);
    await Promise.all([ledger.refresh('e1'), ledger.refresh('e2')]);
    assert.equal(ledger.use('acme').max_tasks, 3);
    await assert.rejects(ledger.admitTask('acme', 'd', 'e1'), QuotaExceededError);
  });

  test('an executor out of rotation loses its tasks; one that only failed a report keeps them', async () => {
    const { ledger, executors } = ledgerWith({ acme: { max_tasks: 1 } });
    (await ledger.admitTask('acme', 't1', 'e1')).release();
    executors.set('e1', [['acme', 't1']]);
    executors.failing = true;
    await assert.rejects(ledger.admitTask('acme', 't2', 'e2'), QuotaExceededError);
    executors.healthy.set('e1', false);
    (await ledger.admitTask('acme', 't2', 'e2')).release();
  });

  test('refusals by many callers at once share reports: at most two per executor at a time', async () => {
    const { ledger, executors } = ledgerWith({ acme: { max_tasks: 1 } });
    (await ledger.admitTask('acme', 't0', 'e1')).release();
    executors.set('e1', [['acme', 't0']]);
    executors.hold = true;
    const before = executors.fetches;
    const attempts = Array.from({ length: 20 }, (_, i) =>
      ledger.admitTask('acme', `n${i}`, 'e1').then(
        () => 'admitted',
        () => 'refused',
      ),
    );
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(executors.fetches - before, 1);
    await executors.deliver();
    await executors.deliver();
    assert.deepEqual(new Set(await Promise.all(attempts)), new Set(['refused']));
    assert.ok(executors.fetches - before <= 2, `${executors.fetches - before} reports`);
  });
});

describe('QuotaLedger: memory and CPUs of live containers', () => {
  test('max_memory_mb and max_cpus sum the containers; code containers count too', async () => {
    const executors = new Executors();
    executors.perTask = CONTAINER;
    executors.perCodeContainer = { containers: 1, memoryMb: 512, cpus: 0.5 };
    const { ledger } = ledgerWith({ acme: { max_memory_mb: 2560, max_cpus: 2.5 } }, executors);
    (await ledger.admitTask('acme', 't1', 'e1')).release();
    (await ledger.admitTask('acme', 't2', 'e1')).release();
    await ledger.admitCodeContainer('acme', 't1', 'e1');
    await ledger.admitCodeContainer('acme', 't1', 'e1'); // it has one: nothing more
    executors.set('e1', [['acme', 't1', { containers: 2, memoryMb: 1536, cpus: 1.5 }], ['acme', 't2']]);
    assert.deepEqual({ mb: ledger.use('acme').max_memory_mb, cpus: ledger.use('acme').max_cpus }, { mb: 2560, cpus: 2.5 });
    await assert.rejects(
      ledger.admitCodeContainer('acme', 't2', 'e1'),
      refusal(
        'max_memory_mb',
        'tenant acme is at quotas.max_memory_mb (2560 of 2560 MB in live containers, a new container needs 512); end a task or raise the quota',
      ),
    );
    ledger.releaseTask('acme', 't1')();
    (await ledger.admitTask('acme', 't3', 'e1')).release();
  });

  test('max_cpus names CPUs', async () => {
    const executors = new Executors();
    executors.perTask = { containers: 1, memoryMb: 256, cpus: 1.5 };
    const { ledger } = ledgerWith({ acme: { max_cpus: 2 } }, executors);
    (await ledger.admitTask('acme', 't1', 'e1')).release();
    executors.set('e1', [['acme', 't1']]);
    await assert.rejects(
      ledger.admitTask('acme', 't2', 'e1'),
      refusal(
        'max_cpus',
        'tenant acme is at quotas.max_cpus (1.5 of 2 CPUs in live containers, a new container needs 1.5); end a task or raise the quota',
      ),
    );
  });

  test('tasks without containers (local, ssh) never touch memory or CPU quotas', async () => {
    const { ledger } = ledgerWith({ acme: { max_memory_mb: 1, max_cpus: 0.1 } });
    for (let i = 0; i < 5; i++) (await ledger.admitTask('acme', `t${i}`, 'e1')).release();
    assert.equal(ledger.use('acme').max_memory_mb, 0);
  });
});

describe('quota metrics', () => {
  const metricsOf = async (tenantLabels: boolean) => {
    const { ledger } = ledgerWith({ acme: { max_tasks: 1 }, globex: { max_tasks: 5 } });
    const registry = createMetricsRegistry({ processMetrics: false });
    const rejected = new DispatcherMetrics(registry, () => true).observeQuotas(registry, ledger, tenantLabels);
    (await ledger.admitTask('acme', 't1', 'e1')).release();
    (await ledger.admitTask('globex', 't1', 'e1')).release();
    (await ledger.admitTask('globex', 't2', 'e1')).release();
    rejected('max_tasks');
    return registry.metrics();
  };

  test('use per quota summed over tenants, and no tenant ids in labels by default', async () => {
    const text = await metricsOf(false);
    assert.equal(sample(text, 'berth_quota_usage', { quota: 'max_tasks' }), 3);
    assert.equal(sample(text, 'berth_quota_tenants_at_limit', { quota: 'max_tasks' }), 1);
    assert.equal(sample(text, 'berth_quota_rejections_total', { quota: 'max_tasks' }), 1);
    assert.equal(sample(text, 'berth_quota_rejections_total', { quota: 'max_cpus' }), 0);
    assert.doesNotMatch(text, /tenant=/);
  });

  test('metrics.tenant_labels: use per tenant', async () => {
    const text = await metricsOf(true);
    assert.equal(sample(text, 'berth_quota_usage', { quota: 'max_tasks', tenant: 'acme' }), 1);
    assert.equal(sample(text, 'berth_quota_usage', { quota: 'max_tasks', tenant: 'globex' }), 2);
  });
});

describe('quota config', () => {
  test('tenant keys override the defaults one by one; without tenants, default gets the defaults', () => {
    const config = parseConfig({
      terminal: { backend: 'docker' },
      quotas: { max_tasks: 5, calls_per_minute: 100 },
      tenants: [
        { id: 'acme', api_key_sha256: 'a'.repeat(64), quotas: { max_tasks: 2 } },
        { id: 'globex', api_key_sha256: 'b'.repeat(64) },
      ],
    });
    const quotasFor = quotaResolver(config);
    assert.deepEqual(quotasFor('acme'), { max_tasks: 2, calls_per_minute: 100 });
    assert.deepEqual(quotasFor('globex'), { max_tasks: 5, calls_per_minute: 100 });
    assert.equal(anyQuota(config), true);
    assert.equal(anyQuota(parseConfig({})), false);
    assert.deepEqual(quotaResolver(parseConfig({ quotas: { max_tasks: 1 } }))('default'), { max_tasks: 1 });
  });

  test('bad quotas fail at start with every problem named', () => {
    assert.throws(
      () =>
        parseConfig({
          terminal: { backend: 'docker', container_memory: 1024 },
          quotas: { max_memory_mb: 512 },
          tenants: [{ id: 'acme', api_key_sha256: 'a'.repeat(64), quotas: { max_cpus: 0.5 } }],
        }),
      (err: Error) =>
        err.message.includes("quotas.max_memory_mb: 512 is below one container's terminal.container_memory (1024)") &&
        err.message.includes("tenants[acme].quotas.max_cpus: 0.5 is below one container's terminal.container_cpu (1)"),
    );
    assert.throws(() => parseConfig({ quotas: { max_tasks: 0 } }), /max_tasks/);
    assert.throws(() => parseConfig({ quotas: { max_task: 3 } }), /max_task/);
  });
});
