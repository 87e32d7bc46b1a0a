/** Starts an executor: one backend, its task environments, the gRPC server. */
import { randomUUID } from 'node:crypto';
import type { BerthConfig } from '../common/config.js';
import { createBerthServer, sharedSecretMiddleware } from '../common/grpc-server.js';
import type { Logger } from '../common/logging.js';
import { ExecutorDefinition } from '../gen/berth/v1/executor.js';
import type { Backend } from './backend.js';
import { createBackend, dockerOptionsFromConfig } from './backends/create-backend.js';
import type { CodeContainers } from './code-execution/code-containers.js';
import { CodeRunner } from './code-execution/code-runner.js';
import { createExecutorService } from './executor-service.js';
import { TaskEnvironments } from './task-environment.js';

export interface RunningExecutor {
  readonly executorId: string;
  readonly address: string;
  readonly port: number;
  /** Kills every task's processes and stops serving. */
  close(): Promise<void>;
}

export interface ExecutorStartOptions {
  readonly config: BerthConfig;
  readonly logger: Logger;
  readonly host: string;
  readonly port: number;
  readonly sharedSecret: string;
}

export async function startExecutor(options: ExecutorStartOptions): Promise<RunningExecutor> {
  const { config } = options;
  const executorId = `exec-${randomUUID().slice(0, 8)}`;
  const logger = options.logger.child({ component: 'executor', executorId, backend: config.terminal.backend });
  const backend = await createBackend(config, logger);
  let codeContainers: CodeContainers | undefined;
  try {
    codeContainers = await startCodeContainers(config, backend, logger);
  } catch (err) {
    await backend.close().catch(() => undefined);
    throw err;
  }
  const environments = new TaskEnvironments({
    backend,
    logger,
    lifetimeSeconds: config.terminal.lifetime_seconds,
  });
  const codeRunner = new CodeRunner(environments, { logger, ...(codeContainers ? { codeContainers } : {}) });
  const shutdown = new AbortController();
  const { server } = createBerthServer(logger, shutdown.signal, [ExecutorDefinition.fullName]);
  server
    .with(sharedSecretMiddleware(options.sharedSecret))
    .add(
      ExecutorDefinition,
      createExecutorService(environments, { executorId }, shutdown.signal, codeRunner),
    );
  const port = await server.listen(`${options.host}:${options.port}`);
  const address = `${options.host}:${port}`;
  logger.info({ address }, 'executor listening');

  let closing: Promise<void> | undefined;
  return {
    executorId,
    address,
    port,
    close() {
      closing ??= (async () => {
        shutdown.abort();
        await environments.closeAll();
        await codeContainers?.close();
        await backend.close();
        server.forceShutdown();
      })();
      return closing;
    },
  };
}

/**
 * execute_code's code containers, for a backend whose environments share no
 * directory with the executor (code_execution.code_container); loaded only
 * then, so other executors never load the Docker client for it.
 */
async function startCodeContainers(config: BerthConfig, backend: Backend, logger: Logger): Promise<CodeContainers | undefined> {
  if (backend.capabilities.sharesRpcDir) return undefined;
  const { CodeContainers } = await import('./code-execution/code-containers.js');
  return CodeContainers.start({
    setting: config.code_execution.code_container,
    backend: backend.capabilities.name,
    docker: dockerOptionsFromConfig(config, logger),
    logger,
  });
}
