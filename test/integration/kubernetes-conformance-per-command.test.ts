/**
 * The shared backend conformance suite on the kubernetes backend with an
 * image without python3: the exec agent cannot start, so every command and
 * file operation is a `pods/exec` of its own (pod-exec-channel.ts). Against
 * the Kubernetes stand-in (a test double of a Kubernetes API server whose
 * pods are containers of the local Docker engine), reached only through the
 * kubeconfig it writes, as a cluster would be. The image is built once for
 * this file FROM the local berth-sandbox image and removed afterwards.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import Dockerode from 'dockerode';
import { BerthError } from '../../services/common/errors.js';
import { silentLogger } from '../../services/common/logging.js';
import { KubernetesBackend } from '../../services/executor/backends/kubernetes/kubernetes-backend.js';
import { KubernetesEnvironment } from '../../services/executor/backends/kubernetes/kubernetes-environment.js';
import { runBackendConformance } from '../../services/conformance/backend-conformance.js';
import { dockerUnavailableReason } from '../support/docker-fixtures.js';
import { kubernetesTestOptions } from '../support/kubernetes-backend-fixtures.js';
import { startKubernetesStandIn, type RunningKubernetesStandIn } from '../support/kubernetes-standin.js';
import { buildNoPythonImage, type NoPythonImage } from '../support/no-python-image.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
let standIn: RunningKubernetesStandIn | undefined;
let backend: KubernetesBackend | undefined;
let image: NoPythonImage | undefined;

function podEnv(env: unknown): KubernetesEnvironment {
  if (!(env instanceof KubernetesEnvironment)) throw new Error('not a kubernetes environment');
  return env;
}

/** The image and the stand-in, made once for both parts of this file. */
async function started(): Promise<void> {
  image ??= await buildNoPythonImage();
  if (!standIn) {
    standIn = await startKubernetesStandIn(['--namespace', 'berth-sandboxes', '--node-cpu', '64', '--node-memory', '64Gi']);
    process.env.KUBECONFIG = standIn.kubeconfig;
  }
}

if (unavailable) {
  describe('backend conformance: kubernetes per-command exec (stand-in)', { skip: unavailable }, () => {});
} else {
  runBackendConformance(
    'kubernetes (per-command exec)',
    async () => {
      await started();
      backend = await KubernetesBackend.start(kubernetesTestOptions({ image: image!.tag, logger: silentLogger() }));
      return backend;
    },
    {
      sharedHost: false,
      timeScale: 3,
      // Every open exec stream is let go of: the pod is kept, what ran on the streams is stopped.
      dropAgentStream: async (env) => podEnv(env).podExecChannel.dropStreams(),
      backgroundAfterDrop: 'ends',
      // No Python for execute_code's scripts.
      executeCode: false,
      environmentExists: async (env) => {
        const pod = await backend!.api.readPod(podEnv(env).podName);
        return pod !== undefined && !pod.metadata?.deletionTimestamp;
      },
    },
  );

  describe('kubernetes per-command exec: what it says', () => {
    it('runs one pods/exec per command, says so in berth doctor, and refuses execute_code with what to do', async () => {
      await started();
      const own = await KubernetesBackend.start(kubernetesTestOptions({ image: image!.tag, logger: silentLogger() }));
      const key = { tenant: 'conformance', taskId: 'per-command-doctor' };
      const env = podEnv(await own.createEnvironment(key));
      try {
        assert.equal(env.transport, 'pod-exec');
        assert.match(own.perCommandReason ?? '', /python/i);
        const findings = await own.diagnose(key, 'live');
        const transport = findings.find((f) => /pods\/exec each/.test(f.text));
        assert.equal(transport?.verdict, 'warn');
        assert.match(transport!.text, new RegExp(`${image!.tag.replace(/[.:]/g, '\\$&')}.*cannot run the exec agent`));
        await assert.rejects(
          env.rpcRelay.listen('/tmp/berth-code/x/rpc.sock', () => undefined),
          (err: unknown) => err instanceof BerthError && err.code === 'FAILED_PRECONDITION' && /execute_code needs python3.*kubernetes_image/.test(err.message),
        );
      } finally {
        await env.dispose('end_task');
        await own.close();
      }
    });
  });

  after(async () => {
    delete process.env.KUBECONFIG;
    await standIn?.stopAndCheck();
    await image?.remove();
  });
}
