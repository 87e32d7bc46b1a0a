/**
 * Helpers for tests against the real Docker engine: whether it answers, and
 * cleanup by label so no test leaves a container or volume behind.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import Dockerode from 'dockerode';
import { silentLogger } from '../../services/common/logging.js';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import { DockerStreamDemuxer } from '../../services/executor/backends/docker/docker-stream-demuxer.js';
import { NetworkIsolation } from '../../services/executor/backends/docker/network-isolation.js';
import { DEFAULT_NAME_KEY_FILE, TaskNames } from '../../services/executor/backends/docker/task-names.js';
import { toolsRequired } from './require-tools.js';

export const SANDBOX_IMAGE = process.env.BERTH_TEST_IMAGE ?? 'berth-sandbox:latest';

/** The names (container, volumes) a docker executor with this state root gives tasks: keyed by the name key it made at its start. */
export function taskNamesIn(stateRoot: string): Promise<TaskNames> {
  return TaskNames.load(path.join(stateRoot, 'docker', DEFAULT_NAME_KEY_FILE));
}

/**
 * Why docker tests cannot run here, or undefined when they can. Under make
 * test or CI a missing engine or image is a failure, not a skip: make image
 * provides both.
 */
export async function dockerUnavailableReason(docker = new Dockerode()): Promise<string | undefined> {
  let reason: string | undefined;
  try {
    await docker.ping();
    await docker.getImage(SANDBOX_IMAGE).inspect();
  } catch (err) {
    reason = `Docker or ${SANDBOX_IMAGE} is not available (${(err as Error).message}); run \`make image\``;
  }
  if (reason && toolsRequired()) throw new Error(reason);
  return reason;
}

/** Whether the daemon has the named OCI runtime registered. */
export async function hasRuntime(docker: Dockerode, name: string): Promise<boolean> {
  const info = (await docker.info()) as { Runtimes?: Record<string, unknown> };
  return Object.hasOwn(info.Runtimes ?? {}, name);
}

/** Force-removes every container, then every volume, carrying `label=value`. */
export async function removeLabelled(docker: Dockerode, label: string, value: string): Promise<number> {
  const filters = { label: [`${label}=${value}`] };
  const containers = await docker.listContainers({ all: true, filters });
  await Promise.all(
    containers.map((c) => docker.getContainer(c.Id).remove({ force: true }).catch(() => undefined)),
  );
  const { Volumes } = await docker.listVolumes({ filters });
  await Promise.all((Volumes ?? []).map((v) => docker.getVolume(v.Name).remove().catch(() => undefined)));
  return containers.length + (Volumes ?? []).length;
}

/** Removes everything created under a test's state roots and tenant. */
export async function cleanupDocker(docker: Dockerode, tenant: string, stateRoots: readonly string[]): Promise<void> {
  await removeLabelled(docker, LABEL.tenant, tenant);
  for (const root of stateRoots) await removeLabelled(docker, LABEL.stateRoot, root);
}

/**
 * Removes Berth's isolated networks that no container uses, and their
 * iptables rules: what executors killed with -9 leave behind (closed, by
 * design). Networks in use, and their rules, stay.
 */
export async function pruneIsolatedNetworks(docker = new Dockerode()): Promise<void> {
  const isolation = await NetworkIsolation.install({
    docker,
    daemon: 'the Docker daemon',
    operator: { egress: 'public-only', egressAllow: [] },
    tenants: {},
    extraDns: [],
    logger: silentLogger(),
  });
  await isolation.close();
}

/**
 * Runs `script` with `sh -c` in a container as its root, from outside (what
 * an operator, or the kernel, can do to a sandbox; no command of the task
 * can): resolves to the exit code and stdout.
 */
export async function execAsRoot(docker: Dockerode, nameOrId: string, script: string): Promise<{ exitCode: number; stdout: string }> {
  const exec = await docker.getContainer(nameOrId).exec({ Cmd: ['sh', '-c', script], User: '0:0', AttachStdout: true, AttachStderr: true });
  const stream = await exec.start({ hijack: true, stdin: false });
  const demuxer = new DockerStreamDemuxer();
  let stdout = '';
  await new Promise<void>((resolve, reject) => {
    stream.on('data', (chunk: Buffer) => {
      for (const part of demuxer.push(chunk)) if (part.stream === 'stdout') stdout += part.data.toString('utf8');
    });
    stream.on('end', resolve);
    stream.on('close', resolve);
    stream.on('error', reject);
  });
  return { exitCode: (await exec.inspect()).ExitCode ?? -1, stdout };
}

/**
 * The name of a task's container (`role` code: its execute_code code
 * container), found by its labels, or undefined when there is none. Names
 * are keyed by the executor's secret (task-names.ts): a test that has no
 * backend or state root at hand finds them this way.
 */
export async function containerOfTask(docker: Dockerode, taskId: string, role: 'task' | 'code' = 'task'): Promise<string | undefined> {
  const list = await docker.listContainers({ all: true, filters: { label: [`${LABEL.task}=${taskId}`] } });
  const found = list.find((c) => (c.Labels[LABEL.role] === 'code') === (role === 'code'));
  return found?.Names[0]?.replace(/^\//, '');
}

/** State of a container by name or id, or undefined when it does not exist. */
export async function containerState(docker: Dockerode, nameOrId: string): Promise<string | undefined> {
  try {
    return (await docker.getContainer(nameOrId).inspect()).State.Status;
  } catch {
    return undefined;
  }
}

/**
 * A script printing `count=N`: live processes with an argument exactly
 * `arg` (digits or letters). Zombies have an empty command line and do not
 * count; the bracketed pattern never matches the grep itself.
 */
export function countProcessesWithArg(arg: string): string {
  if (!/^[A-Za-z0-9_.-]+$/.test(arg)) throw new Error(`unsupported argument: ${arg}`);
  return `echo "count=$(grep -lzx -e '[${arg[0]}]${arg.slice(1).replaceAll('.', '\\.')}' /proc/[0-9]*/cmdline 2>/dev/null | wc -l)"`;
}

/** Task ids unique to this test run (`NAME-RUN`), remembered in `ids` for cleanup by label. */
export function runTaskIds(): { readonly run: string; readonly ids: readonly string[]; task(name: string): string } {
  const run = randomBytes(4).toString('hex');
  const ids: string[] = [];
  return {
    run,
    ids,
    task(name) {
      const id = `${name}-${run}`;
      ids.push(id);
      return id;
    },
  };
}

/**
 * A Unix socket in front of the Docker daemon that holds back the answer to
 * every container start request by `delayMs`, as a daemon busy with other
 * work does: the container runs at once, its start call returns late.
 */
export async function slowStartDockerProxy(
  delayMs: number,
  upstreamPath = '/var/run/docker.sock',
): Promise<{ readonly socketPath: string; close(): Promise<void> }> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'berth-slow-docker-'));
  const socketPath = path.join(dir, 'docker.sock');
  const open = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(upstreamPath);
    open.add(client).add(upstream);
    client.on('close', () => open.delete(client));
    upstream.on('close', () => open.delete(upstream));
    // Requests on one connection are answered in order: delay the answer that follows a start request.
    let delayNext = false;
    let chain = Promise.resolve();
    client.on('data', (chunk: Buffer) => {
      if (/^POST \S*\/containers\/[^/\s]+\/start[\s?]/m.test(chunk.toString('latin1'))) delayNext = true;
      upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      const wait = delayNext ? delayMs : 0;
      delayNext = false;
      chain = chain.then(() => (wait > 0 ? sleep(wait) : undefined)).then(() => void client.write(chunk));
    });
    upstream.on('end', () => void chain.then(() => client.end()));
    client.on('end', () => upstream.end());
    const destroy = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', destroy);
    upstream.on('error', destroy);
  });
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  return {
    socketPath,
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const socket of open) socket.destroy();
      await closed;
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/**
 * A Unix socket in front of the Docker daemon that, while `holdCreates`
 * is armed, holds back the next container create request (and what follows
 * it on that connection) until released: a daemon that takes its time to
 * make a container, without timing. `reached` resolves when one is held.
 */
export async function heldCreateDockerProxy(
  upstreamPath = '/var/run/docker.sock',
): Promise<{ readonly socketPath: string; holdCreates(): { reached: Promise<void>; release: () => void }; close(): Promise<void> }> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'berth-held-docker-'));
  const socketPath = path.join(dir, 'docker.sock');
  const open = new Set<net.Socket>();
  let armed: { reached: () => void; released: Promise<void> } | undefined;
  const server = net.createServer((client) => {
    const upstream = net.connect(upstreamPath);
    open.add(client).add(upstream);
    client.on('close', () => open.delete(client));
    upstream.on('close', () => open.delete(upstream));
    let chain = Promise.resolve();
    client.on('data', (chunk: Buffer) => {
      const hold = armed && /^POST \S*\/containers\/create[\s?]/m.test(chunk.toString('latin1')) ? armed : undefined;
      if (hold) {
        armed = undefined;
        hold.reached();
      }
      chain = chain.then(() => hold?.released).then(() => void upstream.write(chunk));
    });
    upstream.pipe(client);
    client.on('end', () => void chain.then(() => upstream.end()));
    const destroy = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', destroy);
    upstream.on('error', destroy);
  });
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  return {
    socketPath,
    holdCreates() {
      let reached!: () => void;
      const arrived = new Promise<void>((resolve) => (reached = resolve));
      let release!: () => void;
      const released = new Promise<void>((resolve) => (release = resolve));
      armed = { reached, released };
      return {
        reached: arrived,
        release: () => {
          if (armed?.released === released) armed = undefined;
          release();
        },
      };
    },
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const socket of open) socket.destroy();
      await closed;
      await rm(dir, { recursive: true, force: true });
    },
  };
}
