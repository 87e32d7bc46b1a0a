/**
 * Per-tenant quotas, hit and released, with two tenants through a real gRPC
 * channel: a dispatcher and two executors, each its own gRPC server, so the
 * limits are shown to hold across executors (tasks are spread over both by
 * rendezvous hashing). Every key: the exact RESOURCE_EXHAUSTED message,
 * nothing created for the refused call (the executors' own TaskUsage, and
 * the engine's containers on docker), the next call succeeding once the
 * share is released, and the other tenant unaffected throughout.
 *
 * The local backend (allow_local_multi_tenant) carries the keys it can;
 * max_memory_mb and max_cpus count containers, so they run on the docker
 * backend against the real engine.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, describe, test } from 'node:test';
import Dockerode from 'dockerode';
import { ClientError, Metadata, Status, createChannel, createClient, createClientFactory, type Channel } from 'nice-grpc';
import { hashApiKey, type BackendName } from '../../services/common/config.js';
import { parseConfig } from '../../services/common/config-load.js';
import { EXECUTOR_SECRET_HEADER } from '../../services/common/grpc-server.js';
import { silentLogger } from '../../services/common/logging.js';
import { createMetricsRegistry, type Registry } from '../../services/common/metrics.js';
import { startDispatcher, type RunningDispatcher } from '../../services/dispatcher/dispatcher-main.js';
import { rendezvousPick } from '../../services/dispatcher/executors/executor-router.js';
import { startExecutor, type RunningExecutor } from '../../services/executor/executor-main.js';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import { DispatcherDefinition, type DispatcherClient } from '../../services/gen/berth/v1/dispatcher.js';
import { ExecutorDefinition, type ExecutorClient } from '../../services/gen/berth/v1/executor.js';
import { sample } from '../support/metrics-text.js';
import { dockerUnavailableReason, removeLabelled, runTaskIds } from '../support/docker-fixtures.js';

const SECRET = 'quota-test-secret';
const KEYS = { acme: 'acme-key', globex: 'globex-key' } as const;
type Tenant = keyof typeof KEYS;

interface Stack {
  readonly dir: string;
  readonly executors: RunningExecutor[];
  readonly dispatcher: RunningDispatcher;
  readonly metrics: Registry;
  /** The dispatcher's API as each tenant. */
  readonly as: Record<Tenant, DispatcherClient>;
  /** Each executor's API, straight (TaskUsage: what it holds). */
  readonly executorClients: ExecutorClient[];
  /** `tenant/task` of every task environment the executors hold. */
  live(): Promise<string[]>;
  close(): Promise<void>;
}

const stacks: Stack[] = [];
after(async () => {
  for (const s of stacks.splice(0)) await s.close();
});

async function startStack(options: {
  backend: BackendName;
  quotas?: Record<string, unknown>;
  tenantQuotas?: Partial<Record<Tenant, Record<string, unknown>>>;
  config?: Record<string, unknown>;
}): Promise<Stack> {
  const dir = mkdtempSync(join(tmpdir(), 'berth-quotas-'));
  const base = {
    terminal: { backend: options.backend },
    allow_local_multi_tenant: true,
    approvals: { mode: 'manual' },
    quotas: options.quotas ?? {},
    tenants: (Object.keys(KEYS) as Tenant[]).map((id) => ({
      id,
      api_key_sha256: hashApiKey(KEYS[id]),
      ...(options.tenantQuotas?.[id] ? { quotas: options.tenantQuotas[id] } : {}),
    })),
    ...options.config,
  };
  const logger = silentLogger();
  const executors: RunningExecutor[] = [];
  for (const name of ['a', 'b']) {
    const config = parseConfig({ ...base, executor: { state_root: join(dir, name) } });
    executors.push(await startExecutor({ config, logger, listen: { host: '127.0.0.1', port: 0, sharedSecret: SECRET } }));
  }
  const metrics = createMetricsRegistry({ processMetrics: false });
  const dispatcher = await startDispatcher({
    config: parseConfig(base),
    logger,
    host: '127.0.0.1',
    port: 0,
    executors: executors.map((e) => ({ address: e.address!, backend: options.backend, sharedSecret: SECRET })),
    metricsRegistry: metrics,
  });
  const channels: Channel[] = [];
  const channel = (address: string) => {
    const c = createChannel(address);
    channels.push(c);
    return c;
  };
  const dispatcherChannel = channel(dispatcher.address);
  const as = Object.fromEntries(
    (Object.keys(KEYS) as Tenant[]).map((t) => [
      t,
      createClient(DispatcherDefinition, dispatcherChannel, {
        '*': { metadata: Metadata({ authorization: `Bearer ${KEYS[t]}` }) },
      }),
    ]),
  ) as Record<Tenant, DispatcherClient>;
  const executorClients = executors.map((e) =>
    createClientFactory()
      .use(async function* secret(call, callOptions) {
        const metadata = Metadata(callOptions.metadata).set(EXECUTOR_SECRET_HEADER, SECRET);
        return yield* call.next(call.request, { ...callOptions, metadata });
      })
      .create(ExecutorDefinition, channel(e.address!)),
  );
  const stack: Stack = {
    dir,
    executors,
    dispatcher,
    metrics,
    as,
    executorClients,
    async live() {
      const reports = await Promise.all(executorClients.map((c) => c.taskUsage({})));
      return reports.flatMap((r) => r.tasks.map((t) => `${t.task?.tenant}/${t.task?.taskId}`)).sort();
    },
    async close() {
      for (const c of channels) c.close();
      await dispatcher.close(0);
      await Promise.all(executors.map((e) => e.close()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
  stacks.push(stack);
  return stack;
}

function terminal(client: DispatcherClient, taskId: string, command: string): Promise<Record<string, unknown>> {
  return client
    .callTool({ name: 'terminal', argumentsJson: JSON.stringify({ command }), taskId, sessionId: '' })
    .then((r) => JSON.parse(r.resultJson) as Record<string, unknown>);
}

async function refused(call: Promise<unknown>, message: string | RegExp): Promise<void> {
  await assert.rejects(call, (err: unknown) => {
    assert.ok(err instanceof ClientError, `expected a gRPC error, got ${String(err)}`);
    assert.equal(Status[err.code], 'RESOURCE_EXHAUSTED');
    if (typeof message === 'string') assert.equal(err.details, message);
    else assert.match(err.details, message);
    return true;
  });
}

/** Task ids of `tenant` that rendezvous hashing places on executor `index` of the stack. */
function tasksOn(stack: Stack, tenant: Tenant, index: number, count: number, prefix: string): string[] {
  const ids = stack.executors.map((e) => ({ id: e.address! }));
  const out: string[] = [];
  for (let i = 0; out.length < count; i++) {
    const id = `${prefix}-${i}`;
    if (rendezvousPick(ids, `${tenant}/${id}`)?.id === stack.executors[index]!.address) out.push(id);
  }
  return out;
}

/** Polls until `fn` stops throwing (for things that happen on their own: idle reaping). */
async function eventually<T>(what: string, fn: () => Promise<T>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      if (Date.now() > deadline) throw new Error(`${what}: still failing after ${timeoutMs} ms`, { cause: err });
      await sleep(100);
    }
  }
}

/** A command that says it started (a file) and runs until the test creates `release`. */
function blocking(dir: string, name: string): { command: string; started: string; release: string } {
  const started = join(dir, `${name}.started`);
  const release = join(dir, `${name}.release`);
  return {
    command: `touch ${started}; while [ ! -e ${release} ]; do sleep 0.02; done; echo released`,
    started,
    release,
  };
}

async function waitForFile(path: string): Promise<void> {
  await eventually(`waiting for ${path}`, async () => assert.ok(existsSync(path)));
}

describe('quotas on the local backend, two executors', () => {
  test('max_tasks: refused before anything is made, across both executors, freed by EndTask', async () => {
    const s = await startStack({ backend: 'local', quotas: { max_tasks: 5 }, tenantQuotas: { acme: { max_tasks: 2 } } });
    const [onA] = tasksOn(s, 'acme', 0, 1, 'a');
    const [onB, spareB] = tasksOn(s, 'acme', 1, 2, 'b');
    assert.equal((await terminal(s.as.acme, onA!, 'echo one')).output, 'one');
    assert.equal((await terminal(s.as.acme, onB!, 'echo two')).output, 'two');
    // A live task goes on.
    assert.equal((await terminal(s.as.acme, onA!, 'echo again')).output, 'again');

    const message = 'tenant acme is at quotas.max_tasks (2 of 2 live tasks); end a task or raise the quota';
    await refused(terminal(s.as.acme, spareB!, 'echo three'), message);
    // A command that needs approval parks nothing for a task over quota: the refusal comes first.
    const marker = join(s.dir, 'approved-marker');
    await refused(terminal(s.as.acme, 'needs-approval', `bash -c 'touch ${marker}'`), message);
    await refused(
      s.as.acme.callTool({ name: 'write_file', argumentsJson: JSON.stringify({ path: 'f.txt', content: 'x' }), taskId: 'w', sessionId: '' }),
      message,
    );
    assert.equal(existsSync(marker), false);
    assert.deepEqual(await s.live(), [`acme/${onA}`, `acme/${onB}`].sort());

    // The other tenant is not affected by acme's quota (and has its own, the default 5).
    for (const t of ['g1', 'g2', 'g3']) assert.equal((await terminal(s.as.globex, t, 'echo g')).output, 'g');

    assert.equal((await s.as.acme.endTask({ taskId: onA! })).released, true);
    assert.equal((await terminal(s.as.acme, spareB!, 'echo three')).output, 'three');
    assert.equal((await s.live()).filter((t) => t.startsWith('acme/')).length, 2);

    const text = await s.metrics.metrics();
    assert.equal(sample(text, 'berth_quota_rejections_total', { quota: 'max_tasks' }), 3);
    assert.equal(sample(text, 'berth_quota_usage', { quota: 'max_tasks' }), 5);
    assert.doesNotMatch(text, /tenant="/, 'no tenant ids in labels without metrics.tenant_labels');
  });

  test('max_tasks: concurrent first calls of new tasks never both pass', async () => {
    const s = await startStack({ backend: 'local', tenantQuotas: { acme: { max_tasks: 3 } } });
    const outcomes = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        terminal(s.as.acme, `burst-${i}`, 'echo ok').then(
          () => 'ok',
          (err: ClientError) => Status[err.code],
        ),
      ),
    );
    assert.deepEqual(outcomes.filter((o) => o === 'ok').length, 3, outcomes.join(' '));
    assert.ok(outcomes.every((o) => o === 'ok' || o === 'RESOURCE_EXHAUSTED'), outcomes.join(' '));
    assert.equal((await s.live()).length, 3);
  });

  test('max_tasks: a task released by idle reaping frees its share for the next call', async () => {
    const s = await startStack({
      backend: 'local',
      tenantQuotas: { acme: { max_tasks: 1 } },
      config: { terminal: { backend: 'local', lifetime_seconds: 1 } },
    });
    await terminal(s.as.acme, 'first', 'true');
    await refused(terminal(s.as.acme, 'second', 'true'), /^tenant acme is at quotas\.max_tasks \(1 of 1 live tasks\)/);
    // The executor reaps `first` after a second idle; the dispatcher learns it when it would refuse.
    const r = await eventually('the reaped task frees its share', () => terminal(s.as.acme, 'second', 'echo in'));
    assert.equal(r.output, 'in');
    assert.deepEqual(await s.live(), ['acme/second']);
  });

  test('max_tasks: an executor restart frees the tasks it lost', async () => {
    const s = await startStack({ backend: 'local', tenantQuotas: { acme: { max_tasks: 1 } } });
    const [onA] = tasksOn(s, 'acme', 0, 1, 'r');
    const [other] = tasksOn(s, 'acme', 1, 1, 'r2');
    await terminal(s.as.acme, onA!, 'true');
    await refused(terminal(s.as.acme, other!, 'true'), /quotas\.max_tasks \(1 of 1 live tasks\)/);
    // Executor a restarts on its address: its environments are gone, and its report says so.
    const old = s.executors[0]!;
    const port = old.port!;
    await old.close();
    const config = parseConfig({
      terminal: { backend: 'local' },
      allow_local_multi_tenant: true,
      executor: { state_root: join(s.dir, 'a2') },
    });
    s.executors[0] = await startExecutor({
      config,
      logger: silentLogger(),
      listen: { host: '127.0.0.1', port, sharedSecret: SECRET },
    });
    const r = await eventually('the restarted executor frees acme', () => terminal(s.as.acme, other!, 'echo moved'));
    assert.equal(r.output, 'moved');
  });

  test('max_concurrent_calls: the next call waits for one to finish', async () => {
    const s = await startStack({ backend: 'local', tenantQuotas: { acme: { max_concurrent_calls: 2 } } });
    const first = blocking(s.dir, 'c1');
    const second = blocking(s.dir, 'c2');
    const running = [terminal(s.as.acme, 't', first.command), terminal(s.as.acme, 't2', second.command)];
    await waitForFile(first.started);
    await waitForFile(second.started);
    await refused(
      terminal(s.as.acme, 't', 'echo three'),
      'tenant acme is at quotas.max_concurrent_calls (2 of 2 calls running); wait for a call to finish or raise the quota',
    );
    assert.equal((await terminal(s.as.globex, 't', 'echo other')).output, 'other');
    writeFileSync(first.release, '');
    assert.equal((await running[0]!).output, 'released');
    assert.equal((await terminal(s.as.acme, 't', 'echo three')).output, 'three');
    writeFileSync(second.release, '');
    await running[1];
  });

  test('calls_per_minute: a minute\'s burst, then one call per refill', async () => {
    const s = await startStack({ backend: 'local', tenantQuotas: { acme: { calls_per_minute: 120 } } });
    const list = (tenant: Tenant) =>
      s.as[tenant].callTool({ name: 'process', argumentsJson: '{"action":"list"}', taskId: 'rate', sessionId: '' });
    // The bucket refills while the burst runs (one token per half second), so a slow machine gets a few
    // calls more than 120 before the first refusal: call until refused, within a bound.
    let accepted = 0;
    let refusal: Promise<unknown> | undefined;
    while (refusal === undefined && accepted < 240) {
      const call = list('acme');
      const failed = await call.then(() => false, () => true);
      if (failed) refusal = call;
      else accepted += 1;
    }
    assert.ok(accepted >= 120, `a minute's burst is 120 calls, got ${accepted}`);
    assert.ok(refusal, 'calls past the bucket are refused');
    await refused(
      refusal,
      /^tenant acme is at quotas\.calls_per_minute \(120 of 120 calls in the last minute\); retry in 1s or raise the quota$/,
    );
    assert.deepEqual(await s.live(), [], 'a refused call creates nothing (and process list never did)');
    await list('globex');
    // A token comes back every half second.
    await eventually('a token refills', () => list('acme'));
  });

  test('max_execute_code: a second script waits for the first', async () => {
    const s = await startStack({ backend: 'local', tenantQuotas: { acme: { max_execute_code: 1 } } });
    const gate = blocking(s.dir, 'script');
    const code = (marker: string) =>
      [
        'import os, time',
        `open(${JSON.stringify(gate.started)}, "w").close()`,
        `while not os.path.exists(${JSON.stringify(gate.release)}): time.sleep(0.02)`,
        `print(${JSON.stringify(marker)})`,
      ].join('\n');
    const execute = (tenant: Tenant, taskId: string, source: string) =>
      s.as[tenant]
        .callTool({ name: 'execute_code', argumentsJson: JSON.stringify({ code: source }), taskId, sessionId: '' })
        .then((r) => JSON.parse(r.resultJson) as Record<string, unknown>);
    const first = execute('acme', 'code', code('first'));
    await waitForFile(gate.started);
    await refused(
      execute('acme', 'code2', 'print(1)'),
      'tenant acme is at quotas.max_execute_code (1 of 1 scripts running); wait for a script to finish or raise the quota',
    );
    assert.deepEqual(await s.live(), ['acme/code'], 'the refused script made no environment');
    assert.match(String((await execute('globex', 'code', 'print("other")')).output), /other/);
    writeFileSync(gate.release, '');
    assert.match(String((await first).output), /first/);
    assert.match(String((await execute('acme', 'code2', 'print("second")')).output), /second/);
  });
});

const docker = new Dockerode();
const dockerMissing = await dockerUnavailableReason(docker);

describe('container quotas on the docker backend', { skip: dockerMissing }, () => {
  const { ids, task } = runTaskIds();
  const containersOf = async (tenant: Tenant, taskIds: readonly string[]) => {
    const all = await docker.listContainers({ all: true, filters: { label: [`${LABEL.tenant}=${tenant}`] } });
    return all.filter((c) => taskIds.includes(c.Labels[LABEL.task] ?? '')).length;
  };

  after(async () => {
    for (const id of ids) await removeLabelled(docker, LABEL.task, id);
  });

  test('max_memory_mb and max_cpus: sums of live containers\' limits, per tenant', async () => {
    const s = await startStack({
      backend: 'docker',
      tenantQuotas: { acme: { max_memory_mb: 512 }, globex: { max_cpus: 1 } },
      config: { terminal: { backend: 'docker', container_memory: 256, container_cpu: 0.5, container_persistent: false } },
    });
    const acme = [task('mem1'), task('mem2'), task('mem3')];
    const globex = [task('cpu1'), task('cpu2'), task('cpu3')];
    for (const t of acme.slice(0, 2)) assert.equal((await terminal(s.as.acme, t, 'echo up')).output, 'up');
    await refused(
      terminal(s.as.acme, acme[2]!, 'echo up'),
      'tenant acme is at quotas.max_memory_mb (512 of 512 MB in live containers, a new container needs 256); end a task or raise the quota',
    );
    assert.equal(await containersOf('acme', acme), 2, 'no container for the refused task');

    for (const t of globex.slice(0, 2)) assert.equal((await terminal(s.as.globex, t, 'echo up')).output, 'up');
    await refused(
      terminal(s.as.globex, globex[2]!, 'echo up'),
      'tenant globex is at quotas.max_cpus (1 of 1 CPUs in live containers, a new container needs 0.5); end a task or raise the quota',
    );
    assert.equal(await containersOf('globex', globex), 2);

    assert.equal((await s.as.acme.endTask({ taskId: acme[0]! })).released, true);
    assert.equal((await terminal(s.as.acme, acme[2]!, 'echo up')).output, 'up');
    assert.equal(await containersOf('acme', acme), 2);
    assert.equal((await s.as.globex.endTask({ taskId: globex[1]! })).released, true);
    assert.equal((await terminal(s.as.globex, globex[2]!, 'echo up')).output, 'up');

    const text = await s.metrics.metrics();
    assert.equal(sample(text, 'berth_quota_usage', { quota: 'max_memory_mb' }), 1024);
    assert.equal(sample(text, 'berth_quota_usage', { quota: 'max_cpus' }), 2);
    assert.equal(sample(text, 'berth_quota_rejections_total', { quota: 'max_memory_mb' }), 1);
    assert.equal(sample(text, 'berth_quota_rejections_total', { quota: 'max_cpus' }), 1);
    assert.equal(sample(text, 'berth_quota_tenants_at_limit', { quota: 'max_memory_mb' }), 1);
  });
});
