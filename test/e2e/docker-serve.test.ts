/**
 * End to end on the docker backend: `bin/berth serve --backend docker` as a
 * child process, driven through the CLI and a gRPC client the way the
 * README shows: list tools, run commands whose cwd and exports persist,
 * write and read files in the container, a background process, a timeout,
 * EndTask. Every container it creates is removed afterwards.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import Dockerode from 'dockerode';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import type { TaskNames } from '../../services/executor/backends/docker/task-names.js';
import { containerState, dockerUnavailableReason, removeLabelled, runTaskIds, taskNamesIn } from '../support/docker-fixtures.js';
import { sample } from '../support/metrics-text.js';
import { startServe, type ServeProcess } from '../support/serve-process.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
const { ids: tasks, task } = runTaskIds();

describe('berth serve --backend docker', { skip: unavailable }, () => {
  let serve: ServeProcess;
  let names: TaskNames;

  before(async () => {
    serve = await startServe(['--backend', 'docker', '--metrics-port', '0'], { env: { TERMINAL_CONTAINER_PERSISTENT: 'false' } });
    names = await taskNamesIn(serve.stateRoot);
  });

  after(async () => {
    await serve?.stop();
    for (const id of tasks) await removeLabelled(docker, LABEL.task, id);
  });

  /** `berth call`, which exits 1 when the command ran and failed (docs/ci.md). */
  const call = async (tool: string, args: object, taskId: string, exitStatus = 0) => {
    const r = await serve.cli(['call', tool, JSON.stringify(args), '--task', taskId], { timeoutMs: 60_000 });
    assert.equal(r.code, exitStatus, r.stderr);
    return JSON.parse(r.stdout) as Record<string, unknown>;
  };

  test('the README flow runs in a hardened container', async () => {
    const tools = JSON.parse((await serve.cli(['tools', '--toolsets', 'terminal,file'])).stdout) as unknown[];
    assert.ok(tools.length >= 2);

    const t1 = task('readme');
    const who = await call('terminal', { command: 'id -un; pwd; grep CapEff /proc/self/status' }, t1);
    assert.equal(who.exit_code, 0);
    assert.match(String(who.output), /^sandbox\n\/workspace\nCapEff:\s+0+$/);
    assert.equal(await containerState(docker, names.container({ tenant: 'default', taskId: t1 })), 'running');

    await call('terminal', { command: 'mkdir -p /workspace/proj && cd /workspace/proj && export GREETING=hello' }, t1);
    assert.deepEqual(await call('terminal', { command: 'pwd; echo $GREETING' }, t1), {
      output: '/workspace/proj\nhello',
      exit_code: 0,
      error: null,
    });

    const w = await call('write_file', { path: 'notes with space.txt', content: 'alpha\nbeta\n' }, t1);
    assert.equal(w.bytes_written, 11);
    const rd = await call('read_file', { path: '/workspace/proj/notes with space.txt' }, t1);
    assert.match(String(rd.content), /^1\|alpha\n2\|beta/);
    const cat = await call('terminal', { command: 'cat "notes with space.txt"' }, t1);
    assert.equal(cat.output, 'alpha\nbeta');

    const other = task('other');
    const isolated = await call('terminal', { command: 'echo "[$GREETING]"; ls /workspace' }, other);
    assert.equal(isolated.output, '[]');
  });

  test('background processes, timeouts and EndTask', async () => {
    const t2 = task('bg');
    const start = await call('terminal', { command: 'echo hello-bg; sleep 1000', background: true }, t2);
    assert.equal(start.output, 'Background process started');
    let logText = '';
    for (let i = 0; i < 100 && !logText.includes('hello-bg'); i++) {
      logText = String((await call('process', { action: 'log', session_id: start.session_id }, t2)).output);
      if (!logText.includes('hello-bg')) await sleep(100);
    }
    assert.match(logText, /hello-bg/);
    const kill = await call('process', { action: 'kill', session_id: start.session_id }, t2);
    assert.deepEqual([kill.status, kill.completion_reason, kill.termination_source], ['killed', 'killed', 'process.kill']);

    const timedOut = await call('terminal', { command: 'echo partial; sleep 30', timeout: 2 }, t2, 1);
    assert.equal(timedOut.exit_code, 124);
    assert.match(String(timedOut.output), /partial[\s\S]*Command timed out after 2s/);
    const ps = await call('terminal', { command: 'ps -eo args | grep -c "[s]leep 30" || true' }, t2);
    assert.equal(ps.output, '0');

    const name = names.container({ tenant: 'default', taskId: t2 });
    assert.equal(await containerState(docker, name), 'running');
    const ended = await serve.client.endTask({ taskId: t2 });
    assert.equal(ended.released, true);
    assert.equal(await containerState(docker, name), undefined);
  });

  test('/metrics counts container starts and live environments', async () => {
    const scrape = async () => {
      const response = await fetch(serve.metricsUrl!);
      assert.equal(response.status, 200);
      return response.text();
    };
    const cold = { backend: 'docker', role: 'task', kind: 'cold' };
    const live = { backend: 'docker' };
    const before = await scrape();
    const t3 = task('metrics');
    await call('terminal', { command: 'true' }, t3);
    await call('terminal', { command: 'true' }, t3);
    const during = await scrape();
    assert.equal((sample(during, 'berth_container_starts_total', cold) ?? 0) - (sample(before, 'berth_container_starts_total', cold) ?? 0), 1);
    assert.equal((sample(during, 'berth_task_environments', live) ?? 0) - (sample(before, 'berth_task_environments', live) ?? 0), 1);
    assert.ok(!during.includes(t3), 'task ids are not labels');
    await serve.client.endTask({ taskId: t3 });
    const after = await scrape();
    assert.equal(sample(after, 'berth_task_environments', live), sample(before, 'berth_task_environments', live) ?? 0);
  });
});
