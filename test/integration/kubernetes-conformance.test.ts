/**
 * The shared backend conformance suite on the kubernetes backend, through
 * the pinned @kubernetes/client-node and the Kubernetes stand-in (a test
 * double of a Kubernetes API server whose pods are containers of the local
 * Docker engine), started once for this file and reached only through the
 * kubeconfig it writes (KUBECONFIG), as a cluster would be.
 */
import { after, describe } from 'node:test';
import Dockerode from 'dockerode';
import { silentLogger } from '../../services/common/logging.js';
import { KubernetesBackend } from '../../services/executor/backends/kubernetes/kubernetes-backend.js';
import { KubernetesEnvironment } from '../../services/executor/backends/kubernetes/kubernetes-environment.js';
import { runBackendConformance } from '../../services/conformance/backend-conformance.js';
import { SANDBOX_IMAGE, dockerUnavailableReason } from '../support/docker-fixtures.js';
import { kubernetesTestOptions } from '../support/kubernetes-backend-fixtures.js';
import { startKubernetesStandIn, type RunningKubernetesStandIn } from '../support/kubernetes-standin.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
let standIn: RunningKubernetesStandIn | undefined;
let backend: KubernetesBackend | undefined;

if (unavailable) {
  describe('backend conformance: kubernetes (stand-in)', { skip: unavailable }, () => {});
} else {
  runBackendConformance(
    'kubernetes',
    async () => {
      standIn = await startKubernetesStandIn(['--namespace', 'berth-sandboxes', '--node-cpu', '64', '--node-memory', '64Gi']);
      process.env.KUBECONFIG = standIn.kubeconfig;
      backend = await KubernetesBackend.start(kubernetesTestOptions({ image: SANDBOX_IMAGE, logger: silentLogger() }));
      return backend;
    },
    {
      sharedHost: false,
      timeScale: 2,
      // The exec's stdin is half-closed from the executor's side; the agent lingers on its socket and the next exec bridges to it.
      dropAgentStream: async (env) => {
        if (!(env instanceof KubernetesEnvironment)) throw new Error(`not a kubernetes environment: ${env.description}`);
        env.agentChannel.dropStream();
      },
      backgroundAfterDrop: 'survives',
      // Scripts run inside the pod through the agent's relay.
      executeCode: true,
      environmentExists: async (env) => {
        if (!(env instanceof KubernetesEnvironment)) throw new Error(`not a kubernetes environment: ${env.description}`);
        const pod = await backend!.api.readPod(env.podName);
        return pod !== undefined && !pod.metadata?.deletionTimestamp;
      },
    },
  );

  after(async () => {
    delete process.env.KUBECONFIG;
    await standIn?.stopAndCheck();
  });
}
