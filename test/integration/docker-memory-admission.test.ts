/**
 * docker.memory_overcommit against the real engine: an executor admits
 * containers while their memory limits fit in the Docker host's memory (or
 * its own cgroup limit) times the factor; the next task is refused with
 * RESOURCE_EXHAUSTED naming the key and starts nothing, a released task
 * makes room, and two tasks racing for the last room get it once. Two
 * executors on one engine share that budget: one counts the other's
 * sandboxes (test/unit/memory-admission.test.ts refuses on them).
 *
 * The admission arithmetic is checked with docker.memory_scope: executor,
 * so that other test files' sandboxes coming and going on the shared engine
 * cannot move it; the engine-wide count (the default) by what one executor
 * counts of another's sandbox.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import Dockerode from 'dockerode';
import { BerthError } from '../../services/common/errors.js';
import { silentLogger } from '../../services/common/logging.js';
import type { TaskKey } from '../../services/executor/backend.js';
import { DockerBackend } from '../../services/executor/backends/docker/docker-backend.js';
import { ownCgroupMemoryMiB } from '../../services/executor/backends/docker/memory-admission.js';
import { TaskEnvironments } from '../../services/executor/task-environment.js';
import { SANDBOX_IMAGE, cleanupDocker, containerOfTask, dockerUnavailableReason } from '../support/docker-fixtures.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
const RUN = randomBytes(4).toString('hex');
const TENANT = `docker-mem-${RUN}`;
const PER_MIB = 256;
let taskNo = 0;
const newKey = (): TaskKey => ({ tenant: TENANT, taskId: `mem-${RUN}-${++taskNo}` });
const exhausted = (err: unknown) =>
  err instanceof BerthError &&
  err.code === 'RESOURCE_EXHAUSTED' &&
  /^docker\.memory_overcommit: this executor's sandboxes hold 512 MiB of memory limits \(docker\.memory_scope: executor, terminal\.container_memory: 256 MiB each\); one more would pass \d+ MiB/.test(
    err.message,
  ) &&
  /raise docker\.memory_overcommit$/.test(err.message);

/** The memory admission measures against, MiB. */
async function hostMemoryMiB(): Promise<number> {
  const info = (await docker.info()) as { MemTotal: number };
  const host = Math.floor(info.MemTotal / (1024 * 1024));
  const cgroup = await ownCgroupMemoryMiB();
  return cgroup === undefined ? host : Math.min(host, cgroup);
}

describe('docker.memory_overcommit (real engine)', { skip: unavailable, timeout: 300_000 }, () => {
  let stateRoot: string;
  let backend: DockerBackend;
  let envs: TaskEnvironments;
  const run = (key: TaskKey) => envs.exec(key, { command: 'true', timeoutMs: 60_000, maxOutputChars: 1000 });

  before(async () => {
    stateRoot = await mkdtemp(path.join(os.tmpdir(), 'berth-docker-mem-'));
    // A factor that leaves room for two containers of 256 MiB and a half, on whatever host this runs.
    const hostMiB = await hostMemoryMiB();
    backend = await DockerBackend.start({
      image: SANDBOX_IMAGE,
      stateRoot,
      persistent: false,
      memoryMiB: PER_MIB,
      memoryOvercommit: (2.5 * PER_MIB) / hostMiB,
      memoryScope: 'executor',
      sweepIntervalMs: 0,
      logger: silentLogger(),
    });
    envs = new TaskEnvironments({ backend, logger: silentLogger(), lifetimeSeconds: 0 });
  });
  after(async () => {
    await envs?.closeAll();
    await backend?.close();
    await cleanupDocker(docker, TENANT, [stateRoot]);
    await rm(stateRoot, { recursive: true, force: true });
  });

  it('admits two tasks, refuses the third with the key named and nothing started, and admits it once one is released', async () => {
    const [a, b, c] = [newKey(), newKey(), newKey()];
    assert.equal((await run(a)).exitCode, 0);
    assert.equal((await run(b)).exitCode, 0);
    await assert.rejects(run(c), exhausted);
    assert.equal(await containerOfTask(docker, c.taskId), undefined, 'a refused task starts no container');
    const budget = await backend.memoryBudget();
    assert.equal(budget?.ownMiB, 2 * PER_MIB);
    assert.ok(budget!.limitMiB - (budget!.heldMiB - budget!.ownMiB) < 3 * PER_MIB, JSON.stringify(budget));
    assert.equal(await envs.release(a), true);
    assert.equal((await run(c)).exitCode, 0);
    assert.equal(await envs.release(b), true);
    assert.equal(await envs.release(c), true);
  });

  it('two new tasks racing for the last room: one is admitted, the other refused', async () => {
    const first = newKey();
    assert.equal((await run(first)).exitCode, 0);
    const racers = [newKey(), newKey()];
    const results = await Promise.allSettled(racers.map((k) => run(k)));
    assert.deepEqual(results.map((r) => r.status).sort(), ['fulfilled', 'rejected']);
    const refused = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    assert.ok(refused && exhausted(refused.reason), String(refused?.reason));
    for (const k of [first, ...racers]) await envs.release(k);
  });

  it("a second executor's sandbox on the same engine counts in the first's budget, and is let go with it", async () => {
    const roots = [await mkdtemp(path.join(os.tmpdir(), 'berth-docker-mem-')), await mkdtemp(path.join(os.tmpdir(), 'berth-docker-mem-'))];
    const start = (root: string) =>
      DockerBackend.start({ image: SANDBOX_IMAGE, stateRoot: root, persistent: false, memoryMiB: PER_MIB, memoryScope: 'engine', sweepIntervalMs: 0, logger: silentLogger() });
    const first = await start(roots[0]!);
    const second = await start(roots[1]!);
    const firstEnvs = new TaskEnvironments({ backend: first, logger: silentLogger(), lifetimeSeconds: 0 });
    const secondEnvs = new TaskEnvironments({ backend: second, logger: silentLogger(), lifetimeSeconds: 0 });
    const exec = (on: TaskEnvironments, key: TaskKey) => on.exec(key, { command: 'true', timeoutMs: 60_000, maxOutputChars: 1000 });
    try {
      assert.equal((await exec(firstEnvs, newKey())).exitCode, 0);
      // Other tests' sandboxes on this engine come and go: what the first executor counts with the second's
      // sandbox and without it must differ by exactly that sandbox at least once in three tries.
      const differences: number[] = [];
      for (let attempt = 0; attempt < 3 && differences.at(-1) !== PER_MIB; attempt++) {
        const b = newKey();
        assert.equal((await exec(secondEnvs, b)).exitCode, 0);
        const withB = await first.memoryBudget();
        assert.equal(withB?.ownMiB, PER_MIB);
        assert.equal(await secondEnvs.release(b), true);
        const withoutB = await first.memoryBudget();
        assert.equal(withoutB?.ownMiB, PER_MIB);
        differences.push(withB!.heldMiB - withoutB!.heldMiB);
      }
      assert.equal(differences.at(-1), PER_MIB, `held with and without the second executor's sandbox differed by ${differences.join(', ')} MiB`);
    } finally {
      await firstEnvs.closeAll();
      await secondEnvs.closeAll();
      await first.close();
      await second.close();
      await cleanupDocker(docker, TENANT, roots);
      await Promise.all(roots.map((root) => rm(root, { recursive: true, force: true })));
    }
  });
});
