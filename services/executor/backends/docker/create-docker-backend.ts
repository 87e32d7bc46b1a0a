/** The docker backend from config (see docker-options.ts for the mapping). */
import type { BerthConfig } from '../../../common/config.js';
import type { Logger } from '../../../common/logging.js';
import type { ContainerStartSink } from '../../backend.js';
import { DockerBackend } from './docker-backend.js';
import { dockerOptionsFromConfig } from './docker-options.js';

export function createDockerBackend(config: BerthConfig, logger: Logger, onContainerStart?: ContainerStartSink): Promise<DockerBackend> {
  return DockerBackend.start(dockerOptionsFromConfig(config, logger, onContainerStart));
}
