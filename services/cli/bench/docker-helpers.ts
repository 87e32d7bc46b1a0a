/**
 * Docker baselines (a long-running container to exec into, exec through the
 * CLI or dockerode) and waits on a bench server's containers (its warm pool,
 * its ended tasks).
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { createConnection, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { finished } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import type Docker from 'dockerode';
import { parseConfig } from '../../common/config-load.js';

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

/** After the pool's containers run, their in-container agent still has to connect back. */
const AGENT_CONNECT_MS = 300;

/** Names of the containers of the executor in process `pid` that `docker ps -a` lists with `filters`. */
async function executorContainers(pid: number, filters: readonly string[]): Promise<string[]> {
  const args = ['ps', '-a', '--filter', `label=berth.executor.pid=${pid}`, ...filters.flatMap((f) => ['--filter', f])];
  const { stdout } = await run('docker', [...args, '--format', '{{.Names}}']);
  return stdout.trim().split('\n').filter(Boolean);
}

/** Waits until the executor in process `pid` has `size` running pool containers. */
export async function waitForPool(pid: number, size: number, waitMs = 60_000): Promise<void> {
  const deadline = Date.now() + waitMs;
  while ((await executorContainers(pid, ['label=berth.pool=1', 'name=berth-pool-', 'status=running'])).length < size) {
    if (Date.now() > deadline) throw new Error(`the warm pool did not fill to ${size} within ${waitMs} ms`);
    await sleep(100);
  }
  await sleep(AGENT_CONNECT_MS);
}

/**
 * Waits until the executor in process `pid` has no container left but its
 * warm pool's: the tasks it ended are gone, so the next round meets a quiet
 * Docker daemon.
 */
export async function waitForTaskContainersGone(pid: number, waitMs = 60_000): Promise<void> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    const left = (await executorContainers(pid, [])).filter((name) => !name.startsWith('berth-pool-'));
    if (left.length === 0) return;
    if (Date.now() > deadline) throw new Error(`${left.length} ended tasks' containers were still there after ${waitMs} ms`);
    await sleep(100);
  }
}

/** Whether the server's log says the task's container came from the pool (undefined: the log does not say). */
export function servedFromPool(logPath: string, task: string): boolean | undefined {
  for (const line of readFileSync(logPath, 'utf8').split('\n')) {
    if (!line.includes(`"task":"${task}"`) || !line.includes('fromPool')) continue;
    try {
      const fromPool = (JSON.parse(line) as { fromPool?: unknown }).fromPool;
      if (typeof fromPool === 'boolean') return fromPool;
    } catch {
      // A partly written line; the next call looks again.
    }
  }
  return undefined;
}

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

/**
 * The floor of any in-container exec path: a resident process in a running
 * container that forks `bash -c true` when asked over a Unix socket in a
 * bind-mounted directory, and answers when it exited. Berth's docker path is
 * this plus gRPC, the dispatcher and the shell-state wrapper.
 */
export interface ForkServer {
  /** One `bash -c true` in the container, round trip included. */
  request(): Promise<void>;
  remove(): Promise<void>;
}

const FORK_SERVER_PY = [
  'import os, socket, subprocess',
  's = socket.socket(socket.AF_UNIX); s.bind("/bench/fork.sock"); s.listen(1)',
  'c, _ = s.accept()',
  'while c.recv(1):',
  '    subprocess.run(["bash", "-c", "true"], stdin=subprocess.DEVNULL, close_fds=True)',
  '    c.sendall(b".")',
].join('\n');

export async function startForkServer(image = SANDBOX_IMAGE): Promise<ForkServer> {
  const dir = await mkdtemp(join(tmpdir(), 'berth-bench-fork-'));
  await chmod(dir, 0o777);
  const remove = async () => {
    if (id !== undefined) await run('docker', ['rm', '-f', id]).catch(() => undefined);
    await rm(dir, { recursive: true, force: true });
  };
  let id: string | undefined;
  try {
    const { stdout } = await run('docker', [
      'run', '-d', '--rm', '--label', BENCH_LABEL, '-v', `${dir}:/bench`, image, 'python3', '-c', FORK_SERVER_PY,
    ]);
    id = stdout.trim();
    const socketPath = join(dir, 'fork.sock');
    const deadline = Date.now() + 30_000;
    let socket: Socket | undefined;
    while (socket === undefined) {
      socket = await new Promise<Socket | undefined>((resolve) => {
        const s = createConnection(socketPath);
        s.once('connect', () => resolve(s));
        s.once('error', () => resolve(undefined));
      });
      if (socket === undefined) {
        if (Date.now() > deadline) throw new Error(`the fork server in ${id.slice(0, 12)} did not listen within 30 s`);
        await sleep(50);
      }
    }
    const connected = socket;
    return {
      request: () =>
        new Promise<void>((resolve, reject) => {
          const onError = (err: Error) => reject(err);
          connected.once('error', onError);
          connected.once('data', () => {
            connected.off('error', onError);
            resolve();
          });
          connected.write('x');
        }),
      async remove() {
        connected.destroy();
        await remove();
      },
    };
  } catch (err) {
    await remove();
    throw err;
  }
}
