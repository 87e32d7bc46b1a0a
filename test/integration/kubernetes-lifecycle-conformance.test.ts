/**
 * The lifecycle cases of the conformance suite (snapshots, forks) on the
 * kubernetes backend against the Kubernetes stand-in: a snapshot is a copy
 * of the task's workspace and home kept under the state root; a fork is a
 * new pod with that copy extracted in it.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe } from 'node:test';
import Dockerode from 'dockerode';
import { silentLogger } from '../../services/common/logging.js';
import { KubernetesBackend } from '../../services/executor/backends/kubernetes/kubernetes-backend.js';
import { runLifecycleConformance } from '../../services/conformance/lifecycle-conformance.js';
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

  after(async () => {
    delete process.env.KUBECONFIG;
    await standIn?.stopAndCheck();
    if (stateRoot) await rm(stateRoot, { recursive: true, force: true });
  });
}
