/** docker.memory_overcommit's arithmetic, the cgroup limit it also honours, and how its refusal reaches the caller. */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { BerthError, ResourceExhaustedError, isInfrastructureError } from '../../services/common/errors.js';
import { MemoryAdmission, ownCgroupMemoryMiB } from '../../services/executor/backends/docker/memory-admission.js';
import { PoolContainers, type PoolContainersOptions } from '../../services/executor/backends/docker/pool-containers.js';

describe('memory admission', () => {
  test('admits while the limits fit in host memory × factor, the smaller of host and cgroup counting', async () => {
    let held = 0;
    const admission = new MemoryAdmission({
      perContainerMiB: 1000,
      factor: 1.5,
      hostMiB: () => Promise.resolve(8000),
      cgroupMiB: () => Promise.resolve(2000),
      held: () => held,
    });
    assert.deepEqual(await admission.budget(), { hostMiB: 2000, factor: 1.5, limitMiB: 3000, heldMiB: 0, ownMiB: 0, engineWide: false });
    const releases = [await admission.admit(), await admission.admit(), await admission.admit()];
    await assert.rejects(admission.admit(), (err: unknown) => err instanceof ResourceExhaustedError && err.message.startsWith('docker.memory_overcommit: '));
    // Started containers count as held; the admissions are given back.
    held = 3;
    for (const release of releases) release();
    releases[0]!();
    await assert.rejects(admission.admit(), ResourceExhaustedError);
    held = 2;
    (await admission.admit())();
  });

  test("other executors' sandboxes on the engine count against the same budget, and the refusal says whose are whose", async () => {
    let others = 1500;
    const admission = new MemoryAdmission({
      perContainerMiB: 1000,
      factor: 1,
      hostMiB: () => Promise.resolve(3000),
      held: () => 0,
      others: () => Promise.resolve(others),
    });
    assert.deepEqual(await admission.budget(), { hostMiB: 3000, factor: 1, limitMiB: 3000, heldMiB: 1500, ownMiB: 0, engineWide: true });
    const release = await admission.admit();
    await assert.rejects(admission.admit(), (err: unknown) => {
      assert.ok(err instanceof ResourceExhaustedError);
      assert.equal(
        err.message,
        "docker.memory_overcommit: the sandboxes on this Docker engine hold 2500 MiB of memory limits (this executor's: 1000 MiB, " +
          "terminal.container_memory: 1000 MiB each); one more would pass 3000 MiB, the Docker host's 3000 MiB × 1. End idle tasks, " +
          'lower terminal.container_memory, add executors on other Docker hosts, or raise docker.memory_overcommit',
      );
      return true;
    });
    // The other executors let go: room again.
    others = 0;
    (await admission.admit())();
    release();
  });

  test('factor 0 admits without a bound', async () => {
    const admission = new MemoryAdmission({ perContainerMiB: 1000, factor: 0, hostMiB: () => Promise.resolve(1), held: () => 99 });
    assert.equal(await admission.budget(), undefined);
    (await admission.admit())();
  });

  test("the executor's cgroup limit: v2, v1, and none", async () => {
    const root = await mkdtemp(path.join(os.tmpdir(), 'berth-cgroup-'));
    try {
      assert.equal(await ownCgroupMemoryMiB(root), undefined);
      await writeFile(path.join(root, 'memory.max'), 'max\n');
      assert.equal(await ownCgroupMemoryMiB(root), undefined);
      await mkdir(path.join(root, 'memory'));
      await writeFile(path.join(root, 'memory', 'memory.limit_in_bytes'), '9223372036854771712\n');
      assert.equal(await ownCgroupMemoryMiB(root), undefined, 'v1 "no limit"');
      await writeFile(path.join(root, 'memory.max'), `${4 * 1024 * 1024 * 1024}\n`);
      assert.equal(await ownCgroupMemoryMiB(root), 4096);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });

  test('the adaptive warm pool grows within docker.warm_pool_memory_mb and leaves the admission room for one more task', async () => {
    let held = 0;
    const poolWith = (budgetMiB: number, hostMiB: number) => {
      const memory = new MemoryAdmission({ perContainerMiB: 1000, factor: 1, hostMiB: () => Promise.resolve(hostMiB), held: () => held });
      // Only the memory options matter to mayGrow.
      const options = { memory, memoryMiB: 1000, poolBudgetMiB: budgetMiB } as Partial<PoolContainersOptions> as PoolContainersOptions;
      return new PoolContainers(options);
    };
    const budgeted = poolWith(3000, 100_000);
    assert.equal(await budgeted.mayGrow(2), true, 'a third container fits in 3000 MiB');
    assert.equal(await budgeted.mayGrow(3), false, 'a fourth would pass the budget');
    // No budget of its own: the admission's room bounds it, one task's worth kept free.
    const unbudgeted = poolWith(0, 5000);
    held = 3;
    assert.equal(await unbudgeted.mayGrow(3), true, 'a fourth leaves room for one more task');
    held = 4;
    assert.equal(await unbudgeted.mayGrow(4), false, 'a fifth would leave no room for a task');
  });

  test('its refusal reaches the caller as RESOURCE_EXHAUSTED; a task\'s own limit stays a tool result', () => {
    assert.equal(isInfrastructureError(new BerthError('RESOURCE_EXHAUSTED', 'docker.memory_overcommit: this executor ...')), true);
    assert.equal(isInfrastructureError(new BerthError('RESOURCE_EXHAUSTED', 'This task already has 64 background processes running.')), false);
  });
});
