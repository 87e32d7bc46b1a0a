/**
 * The settings of a docker backend's containers (ContainerFactoryOptions),
 * from its options: the sandbox environment (what of the executor's own is
 * forwarded), terminal.docker_extra_args, limits, the agent, and the
 * network each tenant's containers join. Warns about what it refuses or
 * what weakens the sandbox.
 */
import type Dockerode from 'dockerode';
import { UnavailableError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import { findAgentScript } from '../shared/agent/agent-script.js';
import type { ContainerFactoryOptions } from './container-factory.js';
import { LABEL, buildSandboxEnv, parseVolumeSpec, type ExecutorLabels } from './container-spec.js';
import { DiskLimits } from './disk-limits.js';
import type { DockerBackendOptions } from './docker-backend-options.js';
import { parseDockerExtraArgs } from './docker-extra-args.js';
import { ImageAccounts } from './image-accounts.js';
import { NetworkIsolation } from './network-isolation.js';
import { StartGate } from './start-gate.js';
import type { TaskNames } from './task-names.js';

/** What of the backend the settings refer to. */
export interface FactoryContext {
  readonly docker: Dockerode;
  readonly daemon: string;
  readonly logger: Logger;
  /** terminal.container_persistent. */
  readonly persistent: boolean;
  readonly names: TaskNames;
  /** The executor's labels (on the containers that read image accounts). */
  readonly labels: () => ExecutorLabels;
  /** The installed network isolation, once the backend has started (`docker.network: isolated`). */
  readonly isolation: () => NetworkIsolation | undefined;
  readonly resolveNameConflict: (name: string) => Promise<void>;
}

/** The container settings of a backend started with `options`; throws on a terminal.docker_extra_args flag it cannot take. */
export function containerFactoryOptions(options: DockerBackendOptions, ctx: FactoryContext): ContainerFactoryOptions {
  const { env, refused } = buildSandboxEnv({
    dockerEnv: options.dockerEnv ?? {},
    forwardEnv: options.forwardEnv ?? [],
    baseEnv: options.baseEnv ?? process.env,
    envPassthrough: options.envPassthrough ?? [],
    homeDir: options.homeDir ?? '/home/sandbox',
  });
  if (refused.length > 0) {
    ctx.logger.warn(
      { names: refused },
      'terminal.docker_forward_env: not forwarding variables that look like provider secrets (list them in env_passthrough to allow)',
    );
  }
  // A flag it cannot take is a config error: the executor does not start with part of its config dropped.
  const extra = parseDockerExtraArgs(options.extraArgs ?? []);
  for (const note of extra.weakening) {
    ctx.logger.warn({ setting: 'terminal.docker_extra_args' }, `terminal.docker_extra_args weakens the sandbox: ${note}`);
  }
  return {
    docker: ctx.docker,
    daemon: ctx.daemon,
    image: options.image,
    networkFor: async (tenant, renew) => {
      const mode = options.network ?? 'isolated';
      if (mode !== 'isolated') return mode;
      const isolation = ctx.isolation();
      if (!isolation) throw new UnavailableError('network isolation is not installed (the backend is not started)');
      return isolation.networkFor(tenant, renew);
    },
    runtime: options.runtime ?? '',
    readOnlyRoot: options.readOnlyRoot ?? false,
    memoryMiB: options.memoryMiB ?? 5120,
    cpus: options.cpus ?? 1,
    pidsLimit: options.pidsLimit ?? 256,
    diskLimits: new DiskLimits({
      mode: options.diskLimit ?? 'auto',
      sizeMiB: options.diskMiB ?? 51_200,
      volumes: ctx.persistent,
      daemon: ctx.daemon,
      logger: ctx.logger,
    }),
    env,
    extra: extra.options,
    binds: (options.volumes ?? []).map((spec) => parseVolumeSpec(spec)),
    workspaceDir: options.workspaceDir ?? '/workspace',
    homeDir: options.homeDir ?? '/home/sandbox',
    agentScriptPath: options.agentScriptPath ?? findAgentScript(),
    accounts: new ImageAccounts({
      docker: ctx.docker,
      daemon: ctx.daemon,
      labels: () => ({ ...ctx.labels(), [LABEL.created]: new Date().toISOString() }),
    }),
    agentConnectTimeoutMs: options.agentConnectTimeoutMs ?? 30_000,
    // Unset: as many as the Docker host has CPUs (the engine's, which may not be the executor's).
    startGate: new StartGate(async () => options.startConcurrency || Math.max(1, (await ctx.docker.info()).NCPU ?? 1)),
    logger: ctx.logger,
    resolveNameConflict: ctx.resolveNameConflict,
    cgroupParent: (tenant, driver) => ctx.names.cgroupParent(tenant, driver),
    ...((options.network ?? 'isolated') === 'isolated'
      ? {
          embeddedDns: {
            resolvers: () => ctx.isolation()?.resolvers ?? [],
            close: (pid: number) => NetworkIsolation.closeEmbeddedDns(pid),
          },
        }
      : {}),
  };
}
