/**
 * Suspend and resume end to end: `bin/berth serve --backend docker` with two
 * tenants and terminal.idle_suspend_after_s, driven through `berth suspend`,
 * `berth resume`, `berth call` and the `berth/client` Task methods; the
 * suspended-tasks gauge read from /metrics. Every container it creates is
 * removed afterwards.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import Dockerode from 'dockerode';
import { BerthClient } from '../../services/client/berth-client.js';
import { hashApiKey } from '../../services/common/config.js';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import type { TaskNames } from '../../services/executor/backends/docker/task-names.js';
import { containerState, dockerUnavailableReason, removeLabelled, runTaskIds, taskNamesIn } from '../support/docker-fixtures.js';
import { sample } from '../support/metrics-text.js';
import { startServe, type ServeProcess } from '../support/serve-process.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
const { ids: tasks, task } = runTaskIds();
const KEY_A = 'suspend-key-a';
const KEY_B = 'suspend-key-b';
const SUSPENDED = { backend: 'docker' };

describe('berth suspend / resume on docker', { skip: unavailable }, () => {
  let serve: ServeProcess;
  let names: TaskNames;
  let scratch: string;

  /** A server whose tenants a and b may use; `idle`: terminal.idle_suspend_after_s (0: never). */
  const startWith = (idle: number) => {
    const config = join(scratch, `config-${idle}.yaml`);
    writeFileSync(
      config,
      [
        `terminal: { container_persistent: false, idle_suspend_after_s: ${idle} }`,
        'tenants:',
        `  - { id: a, api_key_sha256: ${hashApiKey(KEY_A)} }`,
        `  - { id: b, api_key_sha256: ${hashApiKey(KEY_B)} }`,
        '',
      ].join('\n'),
    );
    return startServe(['--backend', 'docker', '--config', config, '--metrics-port', '0']);
  };

  before(async () => {
    scratch = mkdtempSync(join(tmpdir(), 'berth-e2e-suspend-'));
    // No idle suspension here: the explicit cases must never meet one, however slow the machine.
    serve = await startWith(0);
    names = await taskNamesIn(serve.stateRoot);
  });

  after(async () => {
    await serve?.stop();
    for (const id of tasks) await removeLabelled(docker, LABEL.task, id);
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  const cli = async (args: string[], key = KEY_A) => {
    const r = await serve.cli([...args, '--api-key', key], { timeoutMs: 90_000 });
    assert.equal(r.code, 0, `berth ${args.join(' ')}: ${r.stderr}`);
    return JSON.parse(r.stdout) as Record<string, unknown>;
  };
  const terminal = (command: string, taskId: string) => cli(['call', 'terminal', JSON.stringify({ command }), '--task', taskId]);
  const suspendedNow = async () => sample(await (await fetch(serve.metricsUrl!)).text(), 'berth_task_environments_suspended', SUSPENDED) ?? 0;

  test('berth suspend stops the container; the next call resumes it with its files, cwd and variables', async () => {
    const t = task('cli');
    await terminal('mkdir -p /workspace/p && cd /workspace/p && export MARK=kept && echo tmp-kept > /tmp/f', t);
    assert.deepEqual(await cli(['suspend', t]), { suspended: true, processes_kept: false });
    assert.equal(await containerState(docker, names.container({ tenant: 'a', taskId: t })), 'exited');
    assert.ok((await suspendedNow()) >= 1);
    const r = await terminal('pwd; echo $MARK; cat /tmp/f', t);
    assert.equal(r.output, '/workspace/p\nkept\ntmp-kept');
    assert.equal(await containerState(docker, names.container({ tenant: 'a', taskId: t })), 'running');
    assert.deepEqual(await cli(['resume', t]), { resumed: false });
    assert.deepEqual(await cli(['suspend', t]), { suspended: true, processes_kept: false });
    assert.deepEqual(await cli(['resume', t]), { resumed: true });
    assert.equal(await containerState(docker, names.container({ tenant: 'a', taskId: t })), 'running');
  });

  test("an unknown task and another tenant's task answer alike: nothing suspended", async () => {
    const t = task('tenant');
    await terminal('true', t);
    const explicit = async () =>
      sample(await (await fetch(serve.metricsUrl!)).text(), 'berth_task_suspensions_total', { backend: 'docker', reason: 'explicit' }) ?? 0;
    const before = await explicit();
    const unknown = await cli(['suspend', task('never-made')], KEY_B);
    assert.deepEqual(await cli(['suspend', t], KEY_B), unknown);
    assert.deepEqual(unknown, { suspended: false, processes_kept: false });
    assert.deepEqual(await cli(['resume', t], KEY_B), { resumed: false });
    assert.equal(await explicit(), before, "tenant b suspended nothing of tenant a's");
  });

  test('berth/client Task.suspend and Task.resume; an idle task suspends by itself', async () => {
    await using idleServe = await startWith(2);
    const idleNames = await taskNamesIn(idleServe.stateRoot);
    const client = new BerthClient(idleServe.address, { apiKey: KEY_A });
    try {
      const t = client.task(task('client'));
      await t.terminal({ command: 'cd /tmp && export IDLE=1' });
      // The idle suspension may come first on a slow machine: then Suspend answers false, and Resume brings it back.
      const { suspended, processesKept } = await t.suspend();
      assert.equal(processesKept, false);
      assert.equal(await t.resume(), true, `suspended by this call: ${suspended}`);
      const container = idleNames.container({ tenant: 'a', taskId: t.taskId });
      let state = await containerState(docker, container);
      for (let i = 0; i < 600 && state !== 'exited'; i++) {
        await sleep(300);
        state = await containerState(docker, container);
      }
      assert.equal(state, 'exited', 'the idle task was never suspended');
      const r = await t.terminal({ command: 'pwd; echo $IDLE' });
      assert.equal(r.output, '/tmp\n1');
    } finally {
      client.close();
    }
  });
});
