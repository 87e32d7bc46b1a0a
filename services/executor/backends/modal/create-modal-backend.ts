/**
 * The modal backend from config: `terminal.modal_image`, the container
 * limits and persistence, `terminal.cwd`, the network policy of `docker.*`
 * and `tenants[].network`, and the executor's state root (where the
 * snapshot record lives). Credentials and the server URL are the SDK's own
 * settings, read from the executor's environment.
 */
import path from 'node:path';
import type { BerthConfig } from '../../../common/config.js';
import type { Logger } from '../../../common/logging.js';
import { executorStateDir } from '../shared/state-root.js';
import { ModalBackend, type ModalBackendOptions } from './modal-backend.js';

export function modalOptionsFromConfig(config: BerthConfig, logger?: Logger): ModalBackendOptions {
  const t = config.terminal;
  return {
    image: t.modal_image,
    cpu: t.container_cpu,
    memoryMiB: t.container_memory,
    persistent: t.container_persistent,
    stateDir: path.join(executorStateDir(config.executor.state_root), 'modal'),
    ...(t.cwd ? { initialCwd: t.cwd } : {}),
    network: { egress: config.docker.egress, egressAllow: config.docker.egress_allow },
    tenantNetworks: Object.fromEntries(config.tenants.flatMap((tenant) => (tenant.network ? [[tenant.id, tenant.network]] : []))),
    ...(logger ? { logger } : {}),
  };
}

export function createModalBackend(config: BerthConfig, logger: Logger): Promise<ModalBackend> {
  return ModalBackend.start(modalOptionsFromConfig(config, logger));
}
