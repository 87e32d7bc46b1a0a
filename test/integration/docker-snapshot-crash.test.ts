/**
 * An executor killed (SIGKILL) in the middle of a snapshot on the docker
 * backend: no half snapshot is ever listed, by a restarted executor or any
 * other, and what the snapshot left (its helper container, its untagged
 * intermediate image) is removed by the orphan sweep.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import Dockerode from 'dockerode';
import { silentLogger } from '../../services/common/logging.js';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import { DockerBackend } from '../../services/executor/backends/docker/docker-backend.js';
import { SNAPSHOT_LABEL, sweepSnapshotLeftovers } from '../../services/executor/backends/docker/docker-snapshots.js';
import { SANDBOX_IMAGE, cleanupDocker, dockerUnavailableReason } from '../support/docker-fixtures.js';
import { removeSnapshotImages } from '../support/snapshot-fixtures.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
const TENANT = `snap-crash-${randomBytes(4).toString('hex')}`;

describe('docker snapshots: an executor killed during a snapshot', { skip: unavailable }, () => {
  const stateRoots: string[] = [];

  after(async () => {
    await cleanupDocker(docker, TENANT, stateRoots);
    await removeSnapshotImages(docker, stateRoots);
    for (const root of stateRoots) await rm(root, { recursive: true, force: true });
  });

  it('leaves no half snapshot listed, and the sweep removes what it left', { timeout: 600_000 }, async () => {
    const stateRoot = await mkdtemp(path.join(os.tmpdir(), 'berth-snap-crash-'));
    stateRoots.push(stateRoot);
    const script = path.join(stateRoot, 'doomed-executor.mjs');
    const modules = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../services');
    const url = (p: string) => JSON.stringify(pathToFileURL(path.join(modules, p)).href);
    await writeFile(
      script,
      [
        `import { DockerBackend } from ${url('executor/backends/docker/docker-backend.js')};`,
        `import { TaskEnvironments } from ${url('executor/task-environment.js')};`,
        `import { silentLogger } from ${url('common/logging.js')};`,
        `const b = await DockerBackend.start({ image: ${JSON.stringify(SANDBOX_IMAGE)}, stateRoot: ${JSON.stringify(stateRoot)}, sweepIntervalMs: 0, logger: silentLogger() });`,
        'const envs = new TaskEnvironments({ backend: b, logger: silentLogger(), lifetimeSeconds: 0 });',
        `const key = { tenant: ${JSON.stringify(TENANT)}, taskId: 'doomed' };`,
        "await envs.exec(key, { command: 'for i in $(seq 1 64); do head -c 1048576 /dev/urandom > /workspace/f$i; done', timeoutMs: 120000 });",
        "console.log('SNAPSHOTTING');",
        "await envs.lifecycle.snapshot(key, 'never finished');",
        "console.log('FINISHED');",
        'setInterval(() => {}, 1000);',
      ].join('\n'),
    );
    const child = spawn(process.execPath, [script], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const exited = new Promise((resolve) => child.once('exit', resolve));
    const ours = { label: [`${LABEL.stateRoot}=${stateRoot}`, SNAPSHOT_LABEL.part] };
    // Killed once the helper that copies the volumes exists: the intermediate image is made, the snapshot is not.
    let helpers: Dockerode.ContainerInfo[] = [];
    for (let i = 0; i < 6000 && helpers.length === 0; i++) {
      assert.ok(!out.includes('FINISHED'), 'the snapshot finished before it could be interrupted');
      if (child.exitCode !== null) assert.fail(`the executor exited early: ${out}`);
      helpers = (await docker.listContainers({ all: true, filters: ours })).filter((c) => (c.Labels[SNAPSHOT_LABEL.part] ?? '') !== '');
      if (helpers.length === 0) await sleep(50);
    }
    assert.equal(helpers.length, 1, 'the snapshot helper container never appeared');
    child.kill('SIGKILL');
    await exited;
    assert.ok(!out.includes('FINISHED'));

    // A restarted executor on the same state root (same name key): nothing listed; its start-up sweep removes the helper.
    const restarted = await DockerBackend.start({ image: SANDBOX_IMAGE, stateRoot, sweepIntervalMs: 0, logger: silentLogger() });
    try {
      assert.deepEqual(await restarted.listSnapshots(TENANT), []);
      assert.deepEqual((await docker.listContainers({ all: true, filters: ours })).map((c) => c.Names), []);
      const parts = await docker.listImages({ all: true, filters: ours });
      assert.equal(parts.length, 1, 'the intermediate image waits for the sweep');
      // Young parts may belong to a snapshot still under way; once old enough the sweep removes them.
      assert.deepEqual(await sweepSnapshotLeftovers(docker, silentLogger(), Date.now()), []);
      const removed = await sweepSnapshotLeftovers(docker, silentLogger(), Date.now() + 31 * 60_000);
      assert.ok(removed.includes(parts[0]!.Id), JSON.stringify(removed));
      assert.deepEqual(await docker.listImages({ all: true, filters: ours }), []);
    } finally {
      await restarted.close();
    }
  });
});
