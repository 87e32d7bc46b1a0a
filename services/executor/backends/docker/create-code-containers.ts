/** execute_code's code containers from config: the docker backend's settings, for a backend that needs them. */
import type { CodeRunnersFactory } from '../../backend.js';
import { CodeContainers } from './code-containers.js';
import { dockerOptionsFromConfig } from './docker-options.js';

export const createCodeContainers: CodeRunnersFactory = (config, backend, logger, onContainerStart) =>
  CodeContainers.start({
    setting: config.code_execution.code_container,
    backend,
    docker: dockerOptionsFromConfig(config, logger, onContainerStart),
    logger,
  });
