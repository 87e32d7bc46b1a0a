/**
 * An executor killed (SIGKILL) in the middle of a snapshot on the kubernetes
 * backend, against the Kubernetes stand-in: killed while the archive's bytes
 * are being written under the state root (its `.part-*` temporary file has
 * appeared, and neither `<id>.tar` nor `<id>.json` exists). A restarted
 * executor on the same state root lists nothing; the temporary file is left
 * while young (it could be another executor's write under way on a shared
 * state root) and removed by the store's sweep once old.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { watch } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import Dockerode from 'dockerode';
import { silentLogger } from '../../services/common/logging.js';
import type { KubeApi } from '../../services/executor/backends/kubernetes/kube-api.js';
import { KubeSnapshots, LEFTOVER_MAX_AGE_MS } from '../../services/executor/backends/kubernetes/kube-snapshots.js';
import { KubernetesBackend } from '../../services/executor/backends/kubernetes/kubernetes-backend.js';
import { taskLabelValues } from '../../services/executor/backends/kubernetes/pod-spec.js';
import { SANDBOX_IMAGE, dockerUnavailableReason } from '../support/docker-fixtures.js';
import { distModule, startDoomedExecutor } from '../support/doomed-executor.js';
import { kubernetesTestOptions } from '../support/kubernetes-backend-fixtures.js';
import { startKubernetesStandIn, type RunningKubernetesStandIn } from '../support/kubernetes-standin.js';

const unavailable = await dockerUnavailableReason(new Dockerode());
const TENANT = `snap-crash-kube-${randomBytes(4).toString('hex')}`;
/** The label secret of kubernetesTestOptions: the tenant's directory is its keyed hash. */
const LABEL_SECRET = kubernetesTestOptions({ image: SANDBOX_IMAGE }).labelSecret;

describe('kubernetes snapshots: an executor killed during a snapshot', { skip: unavailable }, () => {
  let standIn: RunningKubernetesStandIn | undefined;
  const stateRoots: string[] = [];

  after(async () => {
    delete process.env.KUBECONFIG;
    await standIn?.stopAndCheck();
    for (const root of stateRoots) await rm(root, { recursive: true, force: true });
  });

  it('leaves no half snapshot listed, and the sweep removes its temporary file once old', { timeout: 600_000 }, async () => {
    standIn = await startKubernetesStandIn(['--namespace', 'berth-sandboxes', '--node-cpu', '64', '--node-memory', '64Gi']);
    process.env.KUBECONFIG = standIn.kubeconfig;
    const stateRoot = await mkdtemp(path.join(os.tmpdir(), 'berth-snap-crash-kube-'));
    stateRoots.push(stateRoot);
    const root = path.join(stateRoot, 'kubernetes-snapshots');
    const ownerOf = (tenant: string) => taskLabelValues(LABEL_SECRET, { tenant, taskId: '' }).tenant;
    const tenantDir = path.join(root, ownerOf(TENANT));
    await mkdir(tenantDir, { recursive: true, mode: 0o700 });

    const doomed = await startDoomedExecutor(
      stateRoot,
      [
        `import { KubernetesBackend } from ${distModule('services/executor/backends/kubernetes/kubernetes-backend.js')};`,
        `import { TaskEnvironments } from ${distModule('services/executor/task-environment.js')};`,
        `import { silentLogger } from ${distModule('services/common/logging.js')};`,
        `import { kubernetesTestOptions } from ${distModule('test/support/kubernetes-backend-fixtures.js')};`,
        `const b = await KubernetesBackend.start(kubernetesTestOptions({ image: ${JSON.stringify(SANDBOX_IMAGE)}, stateRoot: ${JSON.stringify(stateRoot)}, logger: silentLogger() }));`,
        'const envs = new TaskEnvironments({ backend: b, logger: silentLogger(), lifetimeSeconds: 0 });',
        `const key = { tenant: ${JSON.stringify(TENANT)}, taskId: 'doomed' };`,
        // 96 MiB of random bytes: writing the archive takes long enough to be cut off.
        "const r = await envs.exec(key, { command: 'for i in $(seq 1 96); do head -c 1048576 /dev/urandom > /workspace/f$i || exit 1; done', timeoutMs: 120000 });",
        "if (r.exitCode !== 0) { console.log('WRITE FAILED ' + r.output); process.exit(1); }",
        "console.log('SNAPSHOTTING');",
        "await envs.lifecycle.snapshot(key, 'never finished');",
        "console.log('FINISHED');",
      ],
      { KUBECONFIG: standIn.kubeconfig },
    );
    // Killed as soon as the archive's temporary file appears: the snapshot is being written, not yet complete.
    let part: string | undefined;
    const watcher = watch(tenantDir, (_event, name) => {
      if (part === undefined && name?.includes('.part-')) {
        part = name;
        doomed.child.kill('SIGKILL');
      }
    });
    try {
      for (let i = 0; i < 6000 && part === undefined; i++) {
        assert.ok(!doomed.output().includes('FINISHED'), 'the snapshot finished before it could be interrupted');
        if (doomed.exited()) assert.fail(`the executor exited early: ${doomed.output()}`);
        await sleep(50);
      }
    } finally {
      watcher.close();
    }
    assert.ok(part, `the snapshot's temporary file never appeared: ${doomed.output()}`);
    await doomed.kill();
    assert.match(doomed.output(), /SNAPSHOTTING/);
    assert.ok(!doomed.output().includes('FINISHED'));
    const left = await readdir(tenantDir);
    assert.ok(left.length > 0 && left.every((f) => f.includes('.part-')), `killed mid-write, only temporary files are there: ${left.join(', ')}`);

    // A restarted executor on the same state root: nothing listed; the young temporary file waits for the sweep.
    const restarted = await KubernetesBackend.start(kubernetesTestOptions({ image: SANDBOX_IMAGE, stateRoot, logger: silentLogger() }));
    try {
      assert.deepEqual(await restarted.listSnapshots(TENANT), []);
      assert.deepEqual((await readdir(tenantDir)).sort(), left.sort());
      const store = new KubeSnapshots({ api: {} as KubeApi, root, ownerOf, maxBytes: 1 });
      assert.deepEqual(await store.sweep(), []);
      const removed = await store.sweep(Date.now() + LEFTOVER_MAX_AGE_MS + 60_000);
      assert.deepEqual(removed, left.map((f) => path.join(ownerOf(TENANT), f)).sort());
      assert.deepEqual(await readdir(tenantDir), []);
      assert.deepEqual(await restarted.listSnapshots(TENANT), []);
    } finally {
      await restarted.close();
    }
  });
});
