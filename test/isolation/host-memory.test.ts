/**
 * Tenant B, with no quota configured, holds as many docker tasks as it can,
 * to take the host's memory (docker backend, through `berth serve`). The
 * executor admits sandbox memory limits up to the host's memory times
 * `docker.memory_overcommit` (here set so that two containers of 256 MiB
 * fit, with `docker.memory_scope: executor` so that other test files'
 * sandboxes on the shared engine do not move the line): B's third task is
 * refused with RESOURCE_EXHAUSTED naming the key and starts no container;
 * once B ends a task, A gets a task of its own.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import Dockerode from 'dockerode';
import { ClientError, Status } from 'nice-grpc';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import { ownCgroupMemoryMiB } from '../../services/executor/backends/docker/memory-admission.js';
import { containerOfTask, dockerUnavailableReason, removeLabelled, runTaskIds } from '../support/docker-fixtures.js';
import { startTwoTenants, type TwoTenants } from '../support/two-tenants.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);

describe("tenant B cannot hold more sandbox memory than the host has (docker backend)", { skip: unavailable, timeout: 300_000 }, () => {
  let t: TwoTenants;
  const ids = runTaskIds();
  const bTasks = [ids.task('mem-b1'), ids.task('mem-b2'), ids.task('mem-b3')];
  const aTask = ids.task('mem-a');
  const terminal = async (client: TwoTenants['a'], taskId: string) => JSON.parse(await t.call(client, 'terminal', { command: 'true' }, taskId)) as Record<string, unknown>;

  before(async () => {
    const info = (await docker.info()) as { MemTotal: number };
    const cgroup = await ownCgroupMemoryMiB();
    const hostMiB = Math.min(Math.floor(info.MemTotal / (1024 * 1024)), cgroup ?? Infinity);
    t = await startTwoTenants({
      backend: 'docker',
      configLines: [`docker: { memory_overcommit: ${(2.5 * 256) / hostMiB}, memory_scope: executor }`, 'terminal: { container_memory: 256 }'],
    });
  });
  after(async () => {
    await t?.stop();
    for (const id of ids.ids) await removeLabelled(docker, LABEL.task, id);
  });

  test("B's task past the host's memory is refused with the key named, and A is served once B lets go", async () => {
    assert.equal((await terminal(t.b, bTasks[0]!)).exit_code, 0);
    assert.equal((await terminal(t.b, bTasks[1]!)).exit_code, 0);
    await assert.rejects(terminal(t.b, bTasks[2]!), (err: unknown) => {
      assert.ok(err instanceof ClientError, String(err));
      assert.equal(Status[err.code], 'RESOURCE_EXHAUSTED');
      assert.match(err.details, /^docker\.memory_overcommit: this executor's sandboxes hold 512 MiB of memory limits \(docker\.memory_scope: executor,/);
      return true;
    });
    assert.equal(await containerOfTask(docker, bTasks[2]!), undefined);
    assert.equal((await t.b.endTask({ taskId: bTasks[0]! })).released, true);
    assert.equal((await terminal(t.a, aTask)).exit_code, 0);
  });
});
