/**
 * The lifecycle cases of the conformance suite (snapshots, forks; suspend
 * and resume) on the kubernetes backend against the Kubernetes stand-in: a
 * snapshot is a copy of the task's workspace and home kept under the state
 * root; a fork is a new pod with that copy extracted in it; a suspended task
 * has no pod (kubectl says so) and resumes in a new one with its files.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import Dockerode from 'dockerode';
import { BerthError } from '../../services/common/errors.js';
import { silentLogger } from '../../services/common/logging.js';
import { KubernetesBackend } from '../../services/executor/backends/kubernetes/kubernetes-backend.js';
import { TaskEnvironments } from '../../services/executor/task-environment.js';
import { runLifecycleConformance } from '../../services/conformance/lifecycle-conformance.js';
import { runSuspendConformance } from '../../services/conformance/suspend-conformance.js';
import { SANDBOX_IMAGE, dockerUnavailableReason } from '../support/docker-fixtures.js';
import { kubernetesTestOptions } from '../support/kubernetes-backend-fixtures.js';
import { startKubernetesStandIn, type RunningKubernetesStandIn } from '../support/kubernetes-standin.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
let standIn: RunningKubernetesStandIn | undefined;
let stateRoot: string | undefined;

if (unavailable) {
  describe('backend conformance: kubernetes lifecycle', { skip: unavailable }, () => {});
} else {
  runLifecycleConformance(
    'kubernetes',
    async () => {
      standIn = await startKubernetesStandIn(['--namespace', 'berth-sandboxes', '--node-cpu', '64', '--node-memory', '64Gi']);
      process.env.KUBECONFIG = standIn.kubeconfig;
      stateRoot = await mkdtemp(path.join(os.tmpdir(), 'berth-kubelife-'));
      return KubernetesBackend.start(kubernetesTestOptions({ image: SANDBOX_IMAGE, stateRoot, logger: silentLogger() }));
    },
    { snapshots: true, tenant: `kubelife-${randomBytes(4).toString('hex')}`, timeScale: 2 },
  );

  // The lifecycle suite's backend started the stand-in; this one shares it and the state root.
  runSuspendConformance('kubernetes', () => KubernetesBackend.start(kubernetesTestOptions({ image: SANDBOX_IMAGE, stateRoot: stateRoot!, logger: silentLogger() })), {
    tenant: `kubesusp-${randomBytes(4).toString('hex')}`,
    timeScale: 2,
  });

  describe('kubernetes suspension: the pod is deleted', () => {
    it('a suspended task has no pod, as kubectl sees it, and its next call runs in a new pod with its files', { timeout: 120_000 }, async () => {
      const backend = await KubernetesBackend.start(kubernetesTestOptions({ image: SANDBOX_IMAGE, stateRoot: stateRoot!, logger: silentLogger() }));
      const envs = new TaskEnvironments({ backend, logger: silentLogger(), lifetimeSeconds: 0 });
      const key = { tenant: `kubesusp-pod-${randomBytes(4).toString('hex')}`, taskId: 'idle' };
      try {
        // A pod's hostname is its name, in Kubernetes as in the stand-in.
        const podName = async () => (await envs.exec(key, { command: 'hostname', timeoutMs: 60_000 })).output.trim();
        assert.equal((await envs.exec(key, { command: 'echo kept > /workspace/f', timeoutMs: 60_000 })).exitCode, 0);
        const first = await podName();
        assert.equal((await standIn!.kubectl(['-n', 'berth-sandboxes', 'get', 'pod', first, '-o', 'name'])).stdout.trim(), `pod/${first}`);
        assert.equal((await envs.suspend(key)).suspended, true);
        const got = await standIn!.kubectl(['-n', 'berth-sandboxes', 'get', 'pod', first, '-o', 'name']);
        assert.notEqual(got.code, 0, `the suspended task's pod is gone: ${got.stdout}`);
        assert.match(got.stderr, /NotFound|not found/);
        const r = await envs.exec(key, { command: 'cat /workspace/f', timeoutMs: 60_000 });
        assert.equal(r.output.trim(), 'kept');
        assert.notEqual(await podName(), first);
      } finally {
        await envs.closeAll();
        await backend.close();
      }
    });
  });

  describe('kubernetes snapshots: the size cap', () => {
    it('refuses a snapshot larger than the cap, clearly, and lists nothing of it', { timeout: 120_000 }, async () => {
      const root = await mkdtemp(path.join(os.tmpdir(), 'berth-kubelife-cap-'));
      const backend = await KubernetesBackend.start(kubernetesTestOptions({ image: SANDBOX_IMAGE, stateRoot: root, snapshotMaxBytes: 64 * 1024, logger: silentLogger() }));
      const envs = new TaskEnvironments({ backend, logger: silentLogger(), lifetimeSeconds: 0 });
      const tenant = `kubelife-cap-${randomBytes(4).toString('hex')}`;
      const key = { tenant, taskId: 'big' };
      try {
        const r = await envs.exec(key, { command: 'head -c 200000 /dev/urandom > /workspace/big', timeoutMs: 60_000 });
        assert.equal(r.exitCode, 0, r.output);
        await assert.rejects(envs.lifecycle.snapshot(key, 'too big'), (err: unknown) => {
          assert.ok(err instanceof BerthError);
          assert.equal(err.code, 'FAILED_PRECONDITION');
          assert.match(err.message, /larger than kubernetes snapshots allow \(65536 bytes\)/);
          return true;
        });
        assert.deepEqual(await envs.lifecycle.list(tenant), []);
        const stored = await readdir(path.join(root, 'kubernetes-snapshots'), { recursive: true }).catch(() => []);
        assert.deepEqual(stored.filter((f) => String(f).endsWith('.tar') || String(f).endsWith('.json')), []);
      } finally {
        await envs.closeAll();
        await backend.close();
        await rm(root, { recursive: true, force: true });
      }
    });
  });

  after(async () => {
    delete process.env.KUBECONFIG;
    await standIn?.stopAndCheck();
    if (stateRoot) await rm(stateRoot, { recursive: true, force: true });
  });
}
