/**
 * A sandbox image without python3, for the per-command paths of backends
 * whose exec agent needs it: built once per test file FROM the local
 * berth-sandbox image (nothing is pulled), under a unique tag, and removed
 * by {@link NoPythonImage.remove}.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import { SANDBOX_IMAGE } from './docker-fixtures.js';

const run = promisify(execFile);

export interface NoPythonImage {
  readonly tag: string;
  remove(): Promise<void>;
}

/** Builds `berth-test-nopython:RANDOM`: the sandbox image with every python3 removed, the same user after. */
export async function buildNoPythonImage(): Promise<NoPythonImage> {
  const tag = `berth-test-nopython:${randomBytes(6).toString('hex')}`;
  const dockerfile = [
    `FROM ${SANDBOX_IMAGE}`,
    'USER root',
    'RUN rm -f /usr/bin/python3* /usr/local/bin/python3* && ! command -v python3',
    'USER sandbox',
  ].join('\n');
  const child = run('docker', ['build', '--quiet', '--tag', tag, '-'], { maxBuffer: 16 * 1024 * 1024 });
  child.child.stdin?.end(dockerfile);
  await child;
  return {
    tag,
    remove: async () => {
      await run('docker', ['image', 'rm', '--force', tag]).catch(() => undefined);
    },
  };
}
