/**
 * The apptainer test double (test/fixtures/apptainer-double/apptainer): where
 * it is, whether this machine can run it, and a state directory per test run.
 */
import { execFile, spawnSync } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { SingularityBackendOptions } from '../../services/executor/backends/singularity/singularity-backend.js';
import { toolsRequired } from './require-tools.js';

const here = path.dirname(fileURLToPath(import.meta.url));
/** The double's path, from dist/test/support or test/support alike. */
export const APPTAINER_DOUBLE = path.resolve(
  here,
  '..',
  '..',
  ...(here.includes(`${path.sep}dist${path.sep}`) ? ['..'] : []),
  'test',
  'fixtures',
  'apptainer-double',
  'apptainer',
);

/** The image the tests convert (from the local Docker daemon; nothing is pulled). */
export const DOUBLE_IMAGE = 'docker://berth-sandbox:latest';

/**
 * Why the double cannot run here, or undefined when it can. Under make test or
 * CI a missing tool is a failure, not a skip: scripts/test-setup.sh installs bubblewrap.
 */
export function doubleUnavailableReason(): string | undefined {
  const reason = unavailableReason();
  if (reason && toolsRequired()) throw new Error(`apptainer test double cannot run: ${reason}`);
  return reason;
}

function unavailableReason(): string | undefined {
  if (typeof process.getuid === 'function' && process.getuid() !== 0) return 'the apptainer test double needs root (mount, nsenter)';
  for (const tool of ['bwrap', 'nsenter', 'unshare', 'docker']) {
    if (spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0) {
      return `${tool} is not installed${tool === 'bwrap' ? ' (apt-get install -y bubblewrap)' : ''}`;
    }
  }
  if (spawnSync('docker', ['image', 'inspect', 'berth-sandbox:latest'], { stdio: 'ignore' }).status !== 0) {
    return 'the berth-sandbox:latest image is missing (make image)';
  }
  return undefined;
}

/**
 * Where the double keeps exported root filesystems: a cache that outlives
 * runs on purpose (test/run.sh names it outside the run's own temp directory).
 */
export function doubleRootfsCache(): string {
  return process.env.APPTAINER_DOUBLE_ROOTFS ?? path.join(os.tmpdir(), 'berth-apptainer-double-rootfs');
}

/**
 * A state directory for the double. The exported root filesystem is shared
 * by all runs (under the OS temp dir, keyed by image id), since exporting it
 * takes seconds; instances and the call log are per run.
 */
export async function doubleState(): Promise<{ stateDir: string; env: Record<string, string>; calls: () => Promise<string[]> }> {
  const stateDir = await mkdtemp(path.join(os.tmpdir(), 'berth-apptainer-double-'));
  return {
    stateDir,
    env: { APPTAINER_DOUBLE_STATE: stateDir, APPTAINER_DOUBLE_ROOTFS: doubleRootfsCache() },
    calls: async () =>
      (await readFile(path.join(stateDir, 'calls.log'), 'utf8').catch(() => '')).split('\n').filter((l) => l !== ''),
  };
}

/** Options for a singularity backend driven by the double, under `double`'s state dir: not persistent, 768 MiB, 1 cpu. */
export function doubleBackendOptions(
  double: { readonly stateDir: string; readonly env: Record<string, string> },
  extra: Partial<SingularityBackendOptions> = {},
): SingularityBackendOptions {
  return {
    binary: APPTAINER_DOUBLE,
    image: DOUBLE_IMAGE,
    stateRoot: path.join(double.stateDir, 'berth'),
    persistent: false,
    memoryMiB: 768,
    cpus: 1,
    pidsLimit: 300,
    cliEnv: double.env,
    ...extra,
  };
}

/**
 * A "sandbox" (directory) image of {@link DOUBLE_IMAGE} without python3:
 * the double's exported root filesystem copied with hard links (no file
 * content is copied, so it takes a second), then every `python3*` in
 * /usr/bin and /usr/local/bin unlinked. Apptainer runs directory images as
 * it runs SIFs; so does the double.
 */
export async function doubleImageWithoutPython(double: { readonly stateDir: string; readonly env: Record<string, string> }): Promise<string> {
  const run = promisify(execFile);
  const sif = path.join(double.stateDir, 'no-python-source.sif');
  await run(APPTAINER_DOUBLE, ['build', '--force', sif, DOUBLE_IMAGE], { env: { ...process.env, ...double.env } });
  const rootfs = /^rootfs=(.+)$/m.exec(await readFile(sif, 'utf8'))?.[1];
  if (!rootfs) throw new Error(`${sif} names no root filesystem`);
  const image = path.join(double.stateDir, 'no-python-image');
  await run('cp', ['-al', rootfs, image]);
  for (const dir of ['usr/bin', 'usr/local/bin']) {
    for (const name of await readdir(path.join(image, dir)).catch(() => [] as string[])) {
      if (name.startsWith('python3')) await rm(path.join(image, dir, name), { force: true });
    }
  }
  return image;
}
