/** The docker backend's state root on the executor's host. */
import { chmod, lstat, mkdir } from 'node:fs/promises';
import { FailedPreconditionError } from '../../../common/errors.js';

/** The state root holds every task's directory: ours and private, not a planted symlink. */
export async function ensureRoot(stateRoot: string, dockerRoot: string): Promise<void> {
  await mkdir(stateRoot, { recursive: true, mode: 0o700 });
  const info = await lstat(stateRoot);
  const uid = typeof process.getuid === 'function' ? process.getuid() : info.uid;
  if (!info.isDirectory() || info.uid !== uid) {
    throw new FailedPreconditionError(
      `state root ${stateRoot} must be a directory owned by uid ${uid}; refusing to use it`,
    );
  }
  if ((info.mode & 0o077) !== 0) await chmod(stateRoot, 0o700);
  await mkdir(dockerRoot, { recursive: true, mode: 0o700 });
}
