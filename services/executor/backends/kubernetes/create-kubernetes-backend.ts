/**
 * The kubernetes backend from config: `terminal.kubernetes_image`, the
 * container limits and persistence, `terminal.cwd`, and the `kubernetes.*`
 * section. The cluster and credentials are the kubeconfig's (KUBECONFIG,
 * ~/.kube/config, or the pod's ServiceAccount), never this file's.
 */
import type { V1Toleration } from '@kubernetes/client-node';
import type { BerthConfig } from '../../../common/config.js';
import type { Logger } from '../../../common/logging.js';
import { executorStateDir } from '../shared/state-root.js';
import { KubernetesBackend, type KubernetesBackendOptions } from './kubernetes-backend.js';

export function kubernetesOptionsFromConfig(config: BerthConfig, logger?: Logger): KubernetesBackendOptions {
  const t = config.terminal;
  const k = config.kubernetes;
  return {
    pod: {
      image: t.kubernetes_image,
      executorId: k.executor_id,
      cpu: t.container_cpu,
      memoryMiB: t.container_memory,
      diskMiB: t.container_disk,
      ...(k.run_as_user !== undefined ? { runAsUser: k.run_as_user } : {}),
      ...(k.run_as_group !== undefined ? { runAsGroup: k.run_as_group } : {}),
      userNamespace: k.user_namespace,
      homeDir: k.home_dir,
      readOnlyRoot: k.read_only_root,
      ...(k.runtime_class ? { runtimeClass: k.runtime_class } : {}),
      nodeSelector: k.node_selector,
      tolerations: k.tolerations as V1Toleration[],
      labels: k.labels,
      annotations: k.annotations,
    },
    ...(k.context ? { context: k.context } : {}),
    ...(k.namespace ? { namespace: k.namespace } : {}),
    persistent: t.container_persistent,
    storageClass: k.storage_class,
    warmPool: k.warm_pool,
    pendingTimeoutMs: k.pending_timeout * 1000,
    taskUids: k.task_uids,
    labelSecret: config.executor.shared_secret,
    network: { egress: config.docker.egress, egressAllow: config.docker.egress_allow },
    tenantNetworks: Object.fromEntries(config.tenants.flatMap((tenant) => (tenant.network ? [[tenant.id, tenant.network]] : []))),
    ...(t.cwd ? { initialCwd: t.cwd } : {}),
    stateRoot: executorStateDir(config.executor.state_root),
    ...(logger ? { logger } : {}),
  };
}

export function createKubernetesBackend(config: BerthConfig, logger: Logger): Promise<KubernetesBackend> {
  return KubernetesBackend.start(kubernetesOptionsFromConfig(config, logger));
}
