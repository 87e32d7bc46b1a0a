/**
 * berth-backend-subprocess: a Berth backend package. Its default export is
 * the backend factory `terminal.backend` loads:
 *
 *     terminal:
 *       backend: berth-backend-subprocess   # or a path to this package
 */
import path from 'node:path';
import { executorStateDir, type BackendFactory } from 'berth/backend-kit';
import { SubprocessBackend } from './subprocess-backend.js';

export { SubprocessBackend, type SubprocessBackendOptions } from './subprocess-backend.js';

/** Task directories go under `executor.state_root` (or the OS temp dir), in `subprocess/`. */
const createSubprocessBackend: BackendFactory = async (config, logger) =>
  new SubprocessBackend({
    root: path.join(executorStateDir(config.executor.state_root), 'subprocess'),
    envPassthrough: config.terminal.env_passthrough,
    logger,
  });

export default createSubprocessBackend;
