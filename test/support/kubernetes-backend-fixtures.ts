/**
 * Options of the kubernetes backend for tests against the Kubernetes
 * stand-in (a test double): the sandbox image, small limits, the stand-in's
 * namespace; the cluster itself is whatever KUBECONFIG names. Pods run as
 * the fixed uid 1000 unless `ownUids` (then each its own, as by default).
 */
import { randomBytes } from 'node:crypto';
import type { KubernetesBackendOptions } from '../../services/executor/backends/kubernetes/kubernetes-backend.js';
import type { PodSettings } from '../../services/executor/backends/kubernetes/pod-spec.js';

export const STANDIN_NAMESPACE = 'berth-sandboxes';

export function kubernetesTestOptions(
  over: Partial<Omit<KubernetesBackendOptions, 'pod'>> & { image: string; pod?: Partial<Omit<PodSettings, 'namespace'>>; ownUids?: boolean },
): KubernetesBackendOptions {
  const { image, pod, ownUids, ...rest } = over;
  return {
    pod: {
      image,
      executorId: `test-${randomBytes(4).toString('hex')}`,
      cpu: 1,
      memoryMiB: 1024,
      diskMiB: 1024,
      ...(ownUids ? {} : { runAsUser: 1000, runAsGroup: 1000 }),
      homeDir: '/home/sandbox',
      readOnlyRoot: true,
      ...pod,
    },
    namespace: STANDIN_NAMESPACE,
    persistent: false,
    pendingTimeoutMs: 20_000,
    labelSecret: 'test-secret',
    ...rest,
  };
}
