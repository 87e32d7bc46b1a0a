/**
 * An interrupt is never lost on the kubernetes backend (cases in
 * test/support/interrupt-stages.ts), through the pinned
 * @kubernetes/client-node and the Kubernetes stand-in (a test double of a
 * Kubernetes API server whose pods are containers of the local Docker
 * engine), started once for this file and reached only through the
 * kubeconfig it writes. Scripts run inside the pod through the exec agent's
 * relay, whose start is a stage. The stand-in reaches the engine through a
 * socket that holds container creation while a case asks it to, so the new
 * pod in place of one the case deleted (`kubectl delete pod`) waits there.
 */
import { after, describe } from 'node:test';
import Dockerode from 'dockerode';
import { silentLogger } from '../../services/common/logging.js';
import { KubernetesBackend } from '../../services/executor/backends/kubernetes/kubernetes-backend.js';
import { KubernetesEnvironment } from '../../services/executor/backends/kubernetes/kubernetes-environment.js';
import { dockerUnavailableReason, heldCreateDockerProxy, SANDBOX_IMAGE } from '../support/docker-fixtures.js';
import { runInterruptStages } from '../support/interrupt-stages.js';
import { STANDIN_NAMESPACE, kubernetesTestOptions } from '../support/kubernetes-backend-fixtures.js';
import { startKubernetesStandIn, type RunningKubernetesStandIn } from '../support/kubernetes-standin.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
let standIn: RunningKubernetesStandIn | undefined;
let proxy: Awaited<ReturnType<typeof heldCreateDockerProxy>> | undefined;

if (unavailable) {
  describe('interrupts at every stage: kubernetes (stand-in)', { skip: unavailable }, () => {});
} else {
  runInterruptStages(
    'kubernetes (stand-in)',
    async () => {
      proxy = await heldCreateDockerProxy();
      standIn = await startKubernetesStandIn(['--namespace', STANDIN_NAMESPACE, '--node-cpu', '64', '--node-memory', '64Gi'], {
        DOCKER_HOST: `unix://${proxy.socketPath}`,
      });
      process.env.KUBECONFIG = standIn.kubeconfig;
      return KubernetesBackend.start(kubernetesTestOptions({ image: SANDBOX_IMAGE, logger: silentLogger() }));
    },
    {
      backend: 'kubernetes',
      relay: true,
      timeScale: 2,
      replacement: {
        async lose(env) {
          if (!(env instanceof KubernetesEnvironment)) throw new Error(`not a kubernetes environment: ${env.description}`);
          const deleted = await standIn!.kubectl(['-n', STANDIN_NAMESPACE, 'delete', 'pod', env.podName, '--grace-period=1']);
          if (deleted.code !== 0) throw new Error(`kubectl delete pod ${env.podName} failed: ${deleted.stderr}`);
        },
        holdReplacement: () => proxy!.holdCreates(),
      },
    },
  );

  after(async () => {
    delete process.env.KUBECONFIG;
    await standIn?.stopAndCheck();
    await proxy?.close();
  });
}
