/**
 * The Docker engine's own start of containers, without Berth around it: N
 * containers created and started at once through the Engine API, each
 * waited for and removed (what `docker run --rm` does, without the CLI).
 * Used twice: as the cold burst's second baseline, with the create options
 * container-spec.ts builds for a task (the bench server's config, its
 * tenant's network and cgroup parent) running `true`; and by
 * engine-ablation.ts, which adds Berth's settings one at a time to a plain
 * spec to find which of them cost the engine's start.
 *
 * Every container carries {@link BENCH_LABEL} and {@link ENGINE_RUN_LABEL}
 * (this process's pid), and Berth's own labels renamed `berth-bench.*` (as
 * many, as long): an executor's sweep and a test run's leftover check go by
 * `berth.*` labels, and these containers are neither's.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type Docker from 'dockerode';
import type { BerthConfig } from '../../common/config.js';
import {
  ACCOUNT_FILES,
  RESOLV_CONF_FILE,
  buildContainerCreateOptions,
  buildSandboxEnv,
  parseVolumeSpec,
  type ContainerSpecInput,
} from '../../executor/backends/docker/container-spec.js';
import { parseDockerExtraArgs } from '../../executor/backends/docker/docker-extra-args.js';
import type { LoadRound } from './bench-case.js';
import { concurrentRound } from './case-helpers.js';
import { BENCH_LABEL } from './docker-helpers.js';

/** On every container (and volume) this module makes: the pid of the process that made it. */
export const ENGINE_RUN_LABEL = 'berth-bench.engine-run';

/** The command every container here runs: nothing, so its life is the engine's create, start, exit and remove. */
const COMMAND = ['true'];

/** Where a container's time went, ms: the create call, the start call, until it exited, its removal. */
export interface EngineSteps {
  readonly createMs: number;
  readonly startMs: number;
  readonly waitMs: number;
  readonly removeMs: number;
}

/** Berth's labels renamed `berth-bench.*`, with the bench's own: the same count and sizes for the engine to store. */
export function benchLabels(labels: Readonly<Record<string, string>> | undefined): Record<string, string> {
  const renamed = Object.entries(labels ?? {}).map(([k, v]) => [k.replace(/^berth\./, 'berth-bench.'), v] as const);
  const [benchKey, benchValue] = BENCH_LABEL.split('=') as [string, string];
  return { ...Object.fromEntries(renamed), [benchKey]: benchValue, [ENGINE_RUN_LABEL]: String(process.pid) };
}

/** `options` running `true` instead of its entrypoint, labelled as this module's. The named volumes it asks for are labelled too. */
export function runningTrue(options: Docker.ContainerCreateOptions): Docker.ContainerCreateOptions {
  const mounts = options.HostConfig?.Mounts?.map((m) =>
    m.Type === 'volume' && m.VolumeOptions ? { ...m, VolumeOptions: { ...m.VolumeOptions, Labels: benchLabels(m.VolumeOptions.Labels) } } : m,
  );
  return {
    ...options,
    Entrypoint: COMMAND,
    Cmd: [],
    Labels: benchLabels(options.Labels),
    ...(options.HostConfig ? { HostConfig: { ...options.HostConfig, ...(mounts ? { Mounts: mounts } : {}) } } : {}),
  };
}

/** One container's life: create, start, wait for its exit, remove (with its anonymous volumes; named ones stay for {@link removeEngineLeftovers}). */
export async function containerLife(docker: Docker, options: Docker.ContainerCreateOptions): Promise<EngineSteps> {
  const t0 = performance.now();
  const container = await docker.createContainer(options);
  const t1 = performance.now();
  let t2 = t1;
  let t3 = t1;
  try {
    await container.start();
    t2 = performance.now();
    const { StatusCode } = (await container.wait()) as { StatusCode: number };
    t3 = performance.now();
    if (StatusCode !== 0) throw new Error(`${options.name ?? 'a container'} exited ${StatusCode}`);
  } finally {
    await container.remove({ force: true, v: true });
  }
  return { createMs: t1 - t0, startMs: t2 - t1, waitMs: t3 - t2, removeMs: performance.now() - t3 };
}

/** Removes every container and volume this process made here (by {@link ENGINE_RUN_LABEL}); never throws. */
export async function removeEngineLeftovers(docker: Docker): Promise<void> {
  const label = [`${ENGINE_RUN_LABEL}=${process.pid}`];
  const containers = await docker.listContainers({ all: true, filters: { label } }).catch(() => []);
  await Promise.all(containers.map((c) => docker.getContainer(c.Id).remove({ force: true, v: true }).catch(() => undefined)));
  const volumes = await docker.listVolumes({ filters: { label } }).catch(() => ({ Volumes: [] }));
  await Promise.all((volumes.Volumes ?? []).map((v) => docker.getVolume(v.Name).remove().catch(() => undefined)));
}

/**
 * `specs.length` container lives at once; each latency counts from the
 * round's start, as the bursts' do. Each container's steps go to `steps`.
 * Named volumes a spec asks for are removed after the round (a task's are
 * new on its first start).
 */
export async function engineRound(docker: Docker, specs: readonly Docker.ContainerCreateOptions[], steps?: EngineSteps[]): Promise<LoadRound> {
  try {
    return await concurrentRound(specs.length, 1, async (i) => {
      const s = await containerLife(docker, specs[i]!);
      steps?.push(s);
    });
  } finally {
    const volumes = specs.flatMap((s) => s.HostConfig?.Mounts?.filter((m) => m.Type === 'volume').map((m) => m.Source ?? '') ?? []);
    await Promise.all(volumes.filter(Boolean).map((v) => docker.getVolume(v).remove().catch(() => undefined)));
  }
}

/** How long a network holder lives at most, seconds: it removes itself if the bench never gets to. */
const HOLDER_S = 7200;

/**
 * Starts a container that only sleeps on `network`, so that the network
 * stays while the rounds run: an executor that closes removes every Berth
 * network without a container on it (network-isolation.ts), and between
 * rounds the bench's network may have none. Berth's own starts make it
 * again then; this baseline cannot (the rules are Berth's), so it keeps it.
 */
export async function holdNetwork(docker: Docker, network: string, image: string): Promise<void> {
  const container = await docker.createContainer({
    name: `bench-engine-${process.pid}-holder`,
    Image: image,
    Entrypoint: ['sleep', String(HOLDER_S)],
    Cmd: [],
    Labels: benchLabels({}),
    HostConfig: { NetworkMode: network, Init: true, AutoRemove: true },
  });
  await container.start();
}

/** A task's host directory as the engine sees it: the account files and resolv.conf a start binds (their content does not matter to `true`). */
export interface BenchHostDir {
  readonly path: string;
  remove(): Promise<void>;
}

export async function benchHostDir(): Promise<BenchHostDir> {
  const path = await mkdtemp(join(tmpdir(), 'berth-bench-engine-'));
  await writeFile(join(path, ACCOUNT_FILES.passwd), 'root:x:0:0:root:/root:/bin/sh\nsandbox:x:10000:10000::/home/sandbox:/bin/bash\n');
  await writeFile(join(path, ACCOUNT_FILES.group), 'root:x:0:\nsandbox:x:10000:\n');
  await writeFile(join(path, RESOLV_CONF_FILE), 'nameserver 127.0.0.1\n');
  return { path, remove: () => rm(path, { recursive: true, force: true }) };
}

/** What a task's spec takes from where Berth made it rather than from config: its tenant's network and cgroup parent, its uid. */
export interface TaskPlacement {
  /** Docker's NetworkMode: `none`, `bridge`, or Berth's isolated network of the tenant's policy. */
  readonly network: string;
  readonly cgroupParent?: string;
  readonly uid: number;
  /** The writable layer's size limit, MiB, when the daemon applies one (StorageOpt). */
  readonly layerMiB?: number;
}

/** Learns a {@link TaskPlacement} from a task container Berth made (`docker inspect`'s HostConfig and labels). */
export function placementOf(info: Docker.ContainerInspectInfo): TaskPlacement {
  const h = info.HostConfig as Docker.HostConfig & { StorageOpt?: Record<string, string> };
  const uid = Number(info.Config.Labels?.['berth.uid'] ?? 10_000);
  const size = /^(\d+)m$/i.exec(h.StorageOpt?.size ?? '')?.[1];
  return {
    network: h.NetworkMode ?? 'bridge',
    ...(h.CgroupParent ? { cgroupParent: h.CgroupParent } : {}),
    uid,
    ...(size !== undefined ? { layerMiB: Number(size) } : {}),
  };
}

/**
 * The create options container-spec.ts builds for a task container of a
 * server with `config`, placed as `placement`, running `true`: the task's
 * binds (host directory, account files, resolv.conf under `isolated`), its
 * named volumes when `terminal.container_persistent` (new ones, as on a
 * task's first start), limits, capabilities, tmpfs, init, labels.
 */
export function taskSpecRunningTrue(
  config: BerthConfig,
  placement: TaskPlacement,
  name: string,
  hostDir: string,
): Docker.ContainerCreateOptions {
  const { env } = buildSandboxEnv({
    dockerEnv: config.terminal.docker_env,
    forwardEnv: config.terminal.docker_forward_env,
    baseEnv: process.env,
    envPassthrough: config.terminal.env_passthrough,
    homeDir: '/home/sandbox',
  });
  const identity = { uid: placement.uid, gid: placement.uid };
  const labels = {
    'berth.task': name,
    'berth.tenant': 'bench',
    'berth.created': new Date().toISOString(),
    'berth.hostdir': hostDir,
    'berth.executor': 'bench-engine-start',
    'berth.executor.pid': String(process.pid),
  };
  const input: ContainerSpecInput = {
    name,
    image: config.terminal.docker_image,
    hostDir,
    labels,
    env,
    memoryMiB: config.terminal.container_memory,
    cpus: config.terminal.container_cpu,
    pidsLimit: config.terminal.container_pids,
    network: placement.network,
    readOnlyRoot: config.docker.read_only_root,
    runtime: config.docker.runtime,
    binds: config.terminal.docker_volumes.map((v) => parseVolumeSpec(v)),
    ...(config.terminal.container_persistent
      ? { persistentVolumes: { workspace: `${name}-workspace`, home: `${name}-home` }, volumeLabels: { 'berth.task': name } }
      : {}),
    workspaceDir: '/workspace',
    homeDir: '/home/sandbox',
    ...(placement.layerMiB !== undefined ? { disk: { layerMiB: placement.layerMiB } } : {}),
    extra: parseDockerExtraArgs(config.terminal.docker_extra_args).options,
    ...(placement.cgroupParent !== undefined ? { cgroupParent: placement.cgroupParent } : {}),
    identity,
    accountFiles: { passwd: join(hostDir, ACCOUNT_FILES.passwd), group: join(hostDir, ACCOUNT_FILES.group) },
    ...(config.docker.network === 'isolated' ? { resolvConf: join(hostDir, RESOLV_CONF_FILE) } : {}),
  };
  return runningTrue(buildContainerCreateOptions(input));
}
