/** The local backend from config: `executor.state_root`, `terminal.cwd` and `terminal.env_passthrough`. */
import type { BerthConfig } from '../../../common/config.js';
import type { Logger } from '../../../common/logging.js';
import { LocalBackend } from './local-backend.js';

export function createLocalBackend(config: BerthConfig, logger: Logger): Promise<LocalBackend> {
  return Promise.resolve(
    new LocalBackend({
      ...(config.executor.state_root ? { stateRoot: config.executor.state_root } : {}),
      ...(config.terminal.cwd ? { initialCwd: config.terminal.cwd } : {}),
      envPassthrough: config.terminal.env_passthrough,
      logger,
    }),
  );
}
