/**
 * Backend factory. Each backend's module (and its SDK) is loaded lazily, so
 * an executor only loads what its backend needs.
 */
import type { BerthConfig } from '../../common/config.js';
import { FailedPreconditionError } from '../../common/errors.js';
import type { Logger } from '../../common/logging.js';
import type { Backend } from '../backend.js';

export async function createBackend(config: BerthConfig, logger: Logger): Promise<Backend> {
  const name = config.terminal.backend;
  switch (name) {
    case 'local': {
      const { LocalBackend } = await import('./local/local-backend.js');
      return new LocalBackend({
        ...(config.executor.state_root ? { stateRoot: config.executor.state_root } : {}),
        ...(config.terminal.cwd ? { initialCwd: config.terminal.cwd } : {}),
        envPassthrough: config.terminal.env_passthrough,
        logger,
      });
    }
    default:
      // Never fall back to a weaker sandbox: a backend that is not here is an error.
      throw new FailedPreconditionError(
        `the ${name} backend is not available in this version of Berth; available: local`,
      );
  }
}
