/**
 * Tenant B runs CPU burners (four busy loops, more than its share) to take
 * the machine's processors (docker backend, through `berth serve`, with
 * `terminal.container_cpu: 0.5`). The engine's own count of B's container's
 * CPU time, read on the Docker host by this test, shows B held to half a
 * processor however many loops it runs (unlimited, four loops would take
 * every processor of the machine), and tenant A's commands are answered
 * while the burners run. Fork bombs and memory hogs are held to their
 * container's pids and memory limits in test/integration/docker-backend.test.ts.
 */
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import Dockerode from 'dockerode';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import { containerOfTask, dockerUnavailableReason, removeLabelled, runTaskIds } from '../support/docker-fixtures.js';
import { startTwoTenants, type TwoTenants } from '../support/two-tenants.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
const CPUS = 0.5;
/** The CFS quota lets a period's usage run a little over; anything near a whole processor is not a limit. */
const SLACK = 1.2;

describe('tenant B running CPU burners gets its container_cpu and no more; tenant A is served (docker backend)', { skip: unavailable, timeout: 300_000 }, () => {
  let t: TwoTenants;
  const ids = runTaskIds();
  const aTask = ids.task('cpu-a');
  const bTask = ids.task('cpu-b');
  const json = (text: string) => JSON.parse(text) as Record<string, unknown>;

  before(async () => {
    t = await startTwoTenants({ backend: 'docker', configLines: [`terminal: { container_cpu: ${CPUS}, container_memory: 256 }`] });
  });
  after(async () => {
    await t?.stop();
    for (const id of ids.ids) await removeLabelled(docker, LABEL.task, id);
  });

  test('four busy loops of B use at most its half processor; A\'s commands answer meanwhile', async () => {
    assert.equal(json(await t.call(t.a, 'terminal', { command: 'echo a-ready' }, aTask)).output, 'a-ready');
    const burn = json(await t.call(t.b, 'terminal', { command: 'for i in 1 2 3 4; do (while :; do :; done) & done; wait', background: true }, bTask));
    assert.match(String(burn.session_id), /^proc_/, JSON.stringify(burn));
    const name = await containerOfTask(docker, bTask);
    assert.ok(name, 'B has a container');
    const container = docker.getContainer(name);
    assert.equal((await container.inspect()).HostConfig.NanoCpus, CPUS * 1e9);
    const usageNs = async () => ((await container.stats({ stream: false })) as { cpu_stats: { cpu_usage: { total_usage: number } } }).cpu_stats.cpu_usage.total_usage;

    await sleep(1000);
    const [u0, t0] = [await usageNs(), performance.now()];
    for (let i = 0; i < 5; i++) {
      assert.equal(json(await t.call(t.a, 'terminal', { command: `echo a-${i}` }, aTask)).output, `a-${i}`);
      await sleep(400);
    }
    const [u1, t1] = [await usageNs(), performance.now()];
    const share = (u1 - u0) / 1e6 / (t1 - t0);
    assert.ok(share > 0.2, `B's loops ran (${share.toFixed(2)} of a processor)`);
    assert.ok(share <= CPUS * SLACK, `B used ${share.toFixed(2)} of a processor; its limit is ${CPUS}`);

    assert.equal((await t.b.endTask({ taskId: bTask })).released, true);
  });
});
