/** Where a path a tool call names lies in the task's environment. */
import { posix } from 'node:path';
import { InvalidArgumentError } from '../common/errors.js';

/** Relative paths resolve against the runner's `cwd` (the task's); `~` and `~/...` against the environment's `homeDir`. */
export function resolveTaskPath(path: string, env: { readonly homeDir: string }, runner: { readonly cwd: string }): string {
  if (path === '') throw new InvalidArgumentError('path must not be empty');
  if (path.includes('\0')) throw new InvalidArgumentError('path must not contain NUL characters');
  if (path === '~') return posix.normalize(env.homeDir);
  if (path.startsWith('~/')) return posix.join(env.homeDir, path.slice(2));
  if (path.startsWith('/')) return posix.normalize(path);
  return posix.resolve(runner.cwd, path);
}
