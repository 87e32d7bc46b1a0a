/** Docker baselines: a long-running container to exec into, and exec through the CLI or dockerode. */
import { execFile } from 'node:child_process';
import { finished } from 'node:stream/promises';
import { promisify } from 'node:util';
import type Docker from 'dockerode';
import { parseConfig } from '../../services/common/config.js';

/** The image tasks run in by default (`terminal.docker_image`). */
export const SANDBOX_IMAGE = parseConfig({}).terminal.docker_image;

/**
 * Bench servers on the docker backend run tasks without named volumes: the
 * warm pool serves only such tasks, and sharing one config lets the cases
 * share one server. Calls on a running container do not depend on it.
 */
export const DOCKER_SERVER = { backend: 'docker', config: { terminal: { container_persistent: false } } } as const;

/** Label on every container the benchmarks start, so a stray one is easy to find and remove. */
export const BENCH_LABEL = 'berth-bench=1';

const run = promisify(execFile);

/** A container of `image` that sleeps until removed: the target of the exec baselines. */
export interface Sleeper {
  readonly id: string;
  remove(): Promise<void>;
}

export async function startSleeper(image = SANDBOX_IMAGE): Promise<Sleeper> {
  const { stdout } = await run('docker', ['run', '-d', '--rm', '--label', BENCH_LABEL, image, 'sleep', 'infinity']);
  const id = stdout.trim();
  return {
    id,
    async remove() {
      await run('docker', ['rm', '-f', id]).catch(() => undefined);
    },
  };
}

/** A dockerode client on the default socket (DOCKER_HOST or /var/run/docker.sock). */
export async function dockerClient(): Promise<Docker> {
  const { default: DockerCtor } = await import('dockerode');
  return new DockerCtor();
}

/**
 * `CMD` in the container through the Engine API, the way a backend would:
 * create the exec, attach, drain until the stream ends, then read the exit
 * code. Throws on a non-zero exit.
 */
export async function dockerodeExec(docker: Docker, containerId: string, cmd: readonly string[]): Promise<void> {
  const exec = await docker.getContainer(containerId).exec({ Cmd: [...cmd], AttachStdout: true, AttachStderr: true });
  const stream = await exec.start({ hijack: true, stdin: false });
  stream.resume();
  await finished(stream);
  const info = await exec.inspect();
  if (info.ExitCode !== 0) throw new Error(`${cmd.join(' ')} exited ${info.ExitCode} in ${containerId.slice(0, 12)}`);
}
