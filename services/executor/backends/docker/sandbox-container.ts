/**
 * Starting and removing one sandbox container: prepare its host directory
 * (agent script, socket, runner state), create and start it hardened, and
 * wait until its exec agent dials in, or fall back to `docker exec` when the
 * image cannot run the agent. A container whose start fails is removed, so
 * none is left stuck in Created.
 */
import { randomBytes } from 'node:crypto';
import { constants as fsConstants } from 'node:fs';
import { access, chmod, copyFile, lchown, lstat, mkdir, open, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type Dockerode from 'dockerode';
import { FailedPreconditionError, UnavailableError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import { AgentListener } from './agent-listener.js';
import { AgentChannel } from '../shared/agent/agent-channel.js';
import { AGENT_FILE_NAME } from '../shared/agent/agent-script.js';
import {
  ACCOUNT_FILES,
  RESOLV_CONF_FILE,
  AGENT_TOKEN_FILE,
  AGENT_UNAVAILABLE_FILE,
  LABEL,
  buildContainerCreateOptions,
  type ContainerSpecInput,
  type PersistentVolumeNames,
} from './container-spec.js';
import type { DiskLimits } from './disk-limits.js';
import type { ExtraDockerOptions } from './docker-extra-args.js';
import { DockerExecChannel } from './docker-exec-channel.js';
import { dockerError, dockerMessage, isConflict, isNotFound, missingImageError } from './docker-errors.js';
import { DockerStreamDemuxer } from './docker-stream-demuxer.js';
import type { ImageAccounts } from './image-accounts.js';
import { taskAccounts, type TaskIdentity } from './task-identity.js';
import type { SandboxChannel } from '../shared/sandbox-channel.js';

/**
 * Whether the executor runs as uid 0: then what it writes in a host
 * directory is the container root's (the agent's) alone. Otherwise the
 * container's root is another user for those files, and they fall back to
 * modes that let it read them.
 */
function executorIsRoot(): boolean {
  return process.getuid?.() === 0;
}

/** Settings shared by every container of one backend. */
export interface ContainerFactoryOptions {
  readonly docker: Dockerode;
  /** How error messages name the daemon. */
  readonly daemon: string;
  readonly image: string;
  /**
   * Docker's NetworkMode for a tenant's containers (undefined: a warm pool
   * container, whose tenant is not known yet); `renew` after the network
   * vanished under a create.
   */
  readonly networkFor: (tenant: string | undefined, renew: boolean) => Promise<string>;
  readonly runtime: string;
  readonly readOnlyRoot: boolean;
  readonly memoryMiB: number;
  readonly cpus: number;
  readonly pidsLimit: number;
  /** terminal.container_disk as Docker can apply it (learnt from the first creates). */
  readonly diskLimits: DiskLimits;
  readonly env: Readonly<Record<string, string>>;
  /** What terminal.docker_extra_args adds to every container. */
  readonly extra?: ExtraDockerOptions;
  readonly binds: readonly string[];
  readonly workspaceDir: string;
  readonly homeDir: string;
  /** The agent's archive on the executor's host, copied into each host directory. */
  readonly agentScriptPath: string;
  /** The image's own account files, the base of each task's (see task-identity.ts). */
  readonly accounts: ImageAccounts;
  readonly agentConnectTimeoutMs: number;
  readonly logger: Logger;
  /**
   * Called when the container name is taken: removes the holder if it is a
   * leftover, throws if a live executor owns it.
   */
  readonly resolveNameConflict: (name: string) => Promise<void>;
  /**
   * Under `docker.network: isolated`: the resolvers a container asks itself,
   * and how Docker's embedded DNS is closed in a started container (see
   * NetworkIsolation.closeEmbeddedDns), so that no name of another task's
   * container resolves there.
   */
  readonly embeddedDns?: { readonly resolvers: () => readonly string[]; readonly close: (pid: number) => Promise<void> };
  /** The cgroup parent of a tenant's containers under the daemon's cgroup driver (TaskNames.cgroupParent). */
  readonly cgroupParent: (tenant: string, driver: string | undefined) => string | undefined;
}

export interface StartParams {
  readonly name: string;
  readonly hostDir: string;
  /** The uid and gid the container's commands run as (the task's; see task-uids.ts). */
  readonly identity: TaskIdentity;
  readonly labels: Readonly<Record<string, string>>;
  readonly persistentVolumes?: PersistentVolumeNames;
  readonly volumeLabels?: Readonly<Record<string, string>>;
  /** The image to start from instead of the configured one: a fork's snapshot image (by id). Its accounts are the configured image's. */
  readonly image?: string;
  /** Whose container this is (picks its network policy); undefined for a warm pool container. */
  readonly tenant?: string;
  readonly signal?: AbortSignal;
}

/** What `docker inspect` says about a container we lost. */
export interface ContainerFate {
  readonly exists: boolean;
  readonly running: boolean;
  readonly exitCode?: number;
  readonly oomKilled?: boolean;
}

/** A started container and the channel into it. */
export class SandboxContainer {
  readonly id: string;
  readonly hostDir: string;
  /** The uid and gid its commands run as. */
  readonly identity: TaskIdentity;
  readonly channel: SandboxChannel;
  readonly startedAt: number;
  /** A shell snapshot written while the container waited in the warm pool (see BackendEnvironment.preparedSnapshot). */
  preparedSnapshot: string | undefined;
  #name: string;
  readonly #container: Dockerode.Container;
  readonly #listener: AgentListener;
  readonly #factory: ContainerFactory;
  #removing: Promise<void> | undefined;

  constructor(
    factory: ContainerFactory,
    container: Dockerode.Container,
    name: string,
    hostDir: string,
    identity: TaskIdentity,
    listener: AgentListener,
    channel: SandboxChannel,
  ) {
    this.#factory = factory;
    this.#container = container;
    this.id = container.id;
    this.#name = name;
    this.hostDir = hostDir;
    this.identity = identity;
    this.#listener = listener;
    this.channel = channel;
    this.startedAt = Date.now();
  }

  get name(): string {
    return this.#name;
  }

  /** Renames the container (a claimed pool container takes its task's name). */
  async rename(name: string): Promise<void> {
    const { docker, daemon } = this.#factory.options;
    try {
      await this.#container.rename({ name });
    } catch (err) {
      if (!isConflict(err)) throw dockerError(err, `renaming ${this.#name} to ${name}`, daemon);
      await this.#factory.options.resolveNameConflict(name);
      try {
        await docker.getContainer(this.id).rename({ name });
      } catch (again) {
        throw dockerError(again, `renaming ${this.#name} to ${name}`, daemon);
      }
    }
    this.#name = name;
  }

  /** Why the container is unusable: removed, stopped (OOM?), or still running. */
  async fate(): Promise<ContainerFate> {
    try {
      const info = await this.#container.inspect();
      return {
        exists: true,
        running: info.State.Running,
        exitCode: info.State.ExitCode,
        oomKilled: info.State.OOMKilled,
      };
    } catch (err) {
      if (isNotFound(err)) return { exists: false, running: false };
      throw dockerError(err, `inspecting ${this.#name}`, this.#factory.options.daemon);
    }
  }

  /**
   * Stops the container for a suspension: everything running in it ends
   * (SIGKILL: the shell state is on disk after every command), its
   * filesystem, volumes and host directory stay, and so does its name. The
   * channel and the agent socket are closed; {@link restartContainer} makes
   * a new {@link SandboxContainer} of it.
   */
  async stop(): Promise<void> {
    this.channel.close();
    await this.#listener.close();
    try {
      await this.#container.stop({ t: 0 });
    } catch (err) {
      // 304: stopped already.
      if ((err as { statusCode?: number }).statusCode !== 304) throw dockerError(err, `stopping ${this.#name}`, this.#factory.options.daemon);
    }
  }

  /** Force-removes the container (killing everything in it). Idempotent; a missing container is fine. */
  remove(): Promise<void> {
    this.#removing ??= (async () => {
      this.channel.close();
      await this.#listener.close();
      await removeContainer(this.#container, this.#factory.options.daemon);
    })();
    return this.#removing;
  }
}

/**
 * Force-removes a container and returns once it is gone (its name is free
 * again); 404 means it is gone already. Never removes volumes.
 */
export async function removeContainer(container: Dockerode.Container, daemon: string): Promise<void> {
  try {
    await container.remove({ force: true, v: false });
    return;
  } catch (err) {
    if (isNotFound(err)) return;
    if (!isConflict(err)) throw dockerError(err, `removing container ${container.id}`, daemon);
  }
  // 409: someone else's removal is in progress; wait for it to finish.
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    try {
      await container.inspect();
    } catch (err) {
      if (isNotFound(err)) return;
      throw dockerError(err, `inspecting container ${container.id}`, daemon);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new UnavailableError(`${daemon} did not finish removing container ${container.id} within 30 s`);
}

/** Whether `container` still runs, for its agent listener (an engine that does not answer: assume it does). */
export function runningProbe(container: Dockerode.Container): () => Promise<boolean> {
  return async () => {
    try {
      return (await container.inspect()).State.Running;
    } catch (err) {
      return !isNotFound(err);
    }
  };
}

/**
 * Writes the agent's token where only the container's root, the agent, can
 * read it (0600, the executor's: root on the host is root in the container;
 * 0644 where the executor is not root and the container's root would
 * otherwise not read it: the host directory's parent stays private to the
 * executor, and the file is gone before any command of the task runs).
 * Never follows a link left in the directory.
 */
export async function writeTokenFile(file: string, token: string): Promise<void> {
  await rm(file, { force: true });
  const handle = await open(file, fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_EXCL | fsConstants.O_NOFOLLOW, 0o600);
  try {
    await handle.writeFile(token, 'utf8');
    if (!executorIsRoot()) await handle.chmod(0o644);
  } finally {
    await handle.close();
  }
}

/** The engine's answer when a container's network does not exist (at create or, in older engines, at start). */
function isMissingNetwork(err: unknown): boolean {
  return isNotFound(err) && /network \S+ not found/i.test(dockerMessage(err));
}

/** Prepares host directories and starts containers with one backend's settings. */
/** A resolv.conf naming `resolvers` (created afresh, never through what the previous container may have left). */
async function writeResolvConf(file: string, resolvers: readonly string[]): Promise<void> {
  await rm(file, { force: true });
  const lines = [
    "# Berth: Docker's embedded DNS (127.0.0.11) is closed in this container; names resolve through these.",
    ...resolvers.slice(0, 3).map((r) => `nameserver ${r}`),
    'options ndots:0',
    '',
  ];
  await writeFile(file, lines.join('\n'), { flag: 'wx', mode: 0o644 });
}

export class ContainerFactory {
  readonly options: ContainerFactoryOptions;
  readonly #fallbackLogged = new Set<string>();
  #cgroupDriver: Promise<string | undefined> | undefined;

  constructor(options: ContainerFactoryOptions) {
    this.options = options;
  }

  /** Fails with the image name and how to build it when the image is missing. Never pulls. Resolves to the image's id. */
  async ensureImage(): Promise<string> {
    const { docker, image, daemon } = this.options;
    try {
      return (await docker.getImage(image).inspect()).Id;
    } catch (err) {
      if (isNotFound(err)) throw missingImageError(image, daemon);
      throw dockerError(err, `looking up the image ${image}`, daemon);
    }
  }

  /**
   * The host directory bind-mounted at /run/berth: the executor's (0755;
   * world-writable only where the executor is not root, so the container's
   * root can still leave its marker there), with the agent script (readable
   * by the container's root only), the task's account files and a `state`
   * directory of the task's uid for the shell-state runner. Commands can
   * write nothing here but `state` (and the execute_code run dirs handed to
   * them), so nothing they leave can be taken for the agent's.
   */
  async prepareHostDir(hostDir: string, identity: TaskIdentity, accounts: { passwd: string; group: string }): Promise<void> {
    // Entries inside hostDir may have been writable by the previous container of the
    // task (an older executor gave it the whole directory). Whatever it left there,
    // symlinks to host files included, is replaced, never followed: rm removes links
    // themselves, and the files are created exclusively.
    const root = executorIsRoot();
    await mkdir(path.dirname(hostDir), { recursive: true, mode: 0o700 });
    await mkdir(hostDir, { recursive: true, mode: 0o755 });
    const hostInfo = await lstat(hostDir);
    if (!hostInfo.isDirectory()) throw new FailedPreconditionError(`${hostDir} is not a directory; refusing to use it`);
    // One an older executor gave the sandbox user goes back to the container's root where that is allowed.
    if (root && hostInfo.uid !== 0) await lchown(hostDir, 0, 0).catch(() => undefined);
    await chmod(hostDir, root ? 0o755 : 0o777);
    const state = path.join(hostDir, 'state');
    const stateInfo = await lstat(state).catch(() => undefined);
    if (stateInfo && !stateInfo.isDirectory()) await rm(state, { force: true });
    await mkdir(state, { recursive: true, mode: 0o755 });
    try {
      await lchown(state, identity.uid, identity.gid);
    } catch {
      // An executor without CAP_CHOWN (not root, or root with its capabilities dropped, as in compose).
      await chmod(state, 0o777);
    }
    await rm(path.join(hostDir, AGENT_UNAVAILABLE_FILE), { force: true });
    await rm(path.join(hostDir, AGENT_TOKEN_FILE), { force: true });
    const agent = path.join(hostDir, AGENT_FILE_NAME);
    await rm(agent, { force: true });
    await copyFile(this.options.agentScriptPath, agent, fsConstants.COPYFILE_EXCL);
    await chmod(agent, root ? 0o600 : 0o644);
    for (const [name, content] of [
      [ACCOUNT_FILES.passwd, accounts.passwd],
      [ACCOUNT_FILES.group, accounts.group],
    ] as const) {
      const file = path.join(hostDir, name);
      await rm(file, { force: true });
      await writeFile(file, content, { flag: 'wx', mode: 0o644 });
    }
  }

  /** The daemon's cgroup driver, asked once; a failed answer is asked again next time. */
  #driver(): Promise<string | undefined> {
    this.#cgroupDriver ??= this.options.docker.info().then(
      (info: { CgroupDriver?: string }) => info.CgroupDriver,
      (err: unknown) => {
        this.#cgroupDriver = undefined;
        throw dockerError(err, 'asking for the cgroup driver', this.options.daemon);
      },
    );
    return this.#cgroupDriver;
  }

  async start(params: StartParams): Promise<SandboxContainer> {
    const o = this.options;
    // First, so that a network the host cannot isolate fails before anything is made.
    const network = await o.networkFor(params.tenant, false);
    // Pool containers have no tenant yet: they keep the daemon's default parent (see docs/performance.md, fair share).
    const tenant = params.labels[LABEL.tenant];
    const cgroupParent = tenant === undefined ? undefined : o.cgroupParent(tenant, await this.#driver());
    const imageAccounts = await o.accounts.of(o.image, await this.ensureImage());
    await this.prepareHostDir(params.hostDir, params.identity, taskAccounts(imageAccounts, params.identity, o.homeDir));
    // The container's root (the agent) only: no command can even connect to it.
    const listener = await AgentListener.listen(path.join(params.hostDir, 'agent.sock'), params.name, { uid: 0, gid: 0 }, o.logger);
    const resolvConf = o.embeddedDns ? path.join(params.hostDir, RESOLV_CONF_FILE) : undefined;
    if (resolvConf && o.embeddedDns) await writeResolvConf(resolvConf, o.embeddedDns.resolvers());
    const token = randomBytes(16).toString('hex');
    const tokenFile = path.join(params.hostDir, AGENT_TOKEN_FILE);
    await writeTokenFile(tokenFile, token);
    const spec: ContainerSpecInput = {
      name: params.name,
      image: params.image ?? o.image,
      hostDir: params.hostDir,
      labels: params.labels,
      env: o.env,
      memoryMiB: o.memoryMiB,
      cpus: o.cpus,
      pidsLimit: o.pidsLimit,
      network,
      readOnlyRoot: o.readOnlyRoot,
      runtime: o.runtime,
      binds: o.binds,
      ...(o.extra ? { extra: o.extra } : {}),
      ...(params.persistentVolumes ? { persistentVolumes: params.persistentVolumes } : {}),
      ...(params.volumeLabels ? { volumeLabels: params.volumeLabels } : {}),
      workspaceDir: o.workspaceDir,
      homeDir: o.homeDir,
      ...(cgroupParent !== undefined ? { cgroupParent } : {}),
      identity: params.identity,
      accountFiles: {
        passwd: path.join(params.hostDir, ACCOUNT_FILES.passwd),
        group: path.join(params.hostDir, ACCOUNT_FILES.group),
      },
      ...(resolvConf ? { resolvConf } : {}),
    };
    // Expect the agent before the container starts: a busy daemon may answer the start request only after
    // the agent has dialled in, and a hello nobody waits for is refused (the agent then exits, and so does
    // the container).
    const stop = new AbortController();
    const signal = params.signal ? AbortSignal.any([params.signal, stop.signal]) : stop.signal;
    const agent = listener.expect(token, o.agentConnectTimeoutMs, signal);
    agent.catch(() => undefined);
    let container: Dockerode.Container | undefined;
    try {
      for (let renewed = false; ; renewed = true) {
        container = await this.#create(spec, params.tenant);
        try {
          await container.start();
          break;
        } catch (err) {
          // The engine looks the network up at start: one removed under us is made again, once.
          if (renewed || !isMissingNetwork(err)) throw dockerError(err, `starting container ${params.name}`, o.daemon);
          await removeContainer(container, o.daemon);
          container = undefined;
          await o.networkFor(params.tenant, true);
        }
      }
      const started = container;
      // Before any command can run: the executor sends none until the agent's hello, awaited below.
      if (o.embeddedDns) await o.embeddedDns.close((await started.inspect()).State.Pid);
      listener.isAlive = runningProbe(started);
      const channel = await this.connect(container, params, agent, signal);
      // The agent removed it before dialling in; gone for certain now (and for the docker exec fallback).
      await rm(tokenFile, { force: true });
      return new SandboxContainer(this, container, params.name, params.hostDir, params.identity, listener, channel);
    } catch (err) {
      await rm(tokenFile, { force: true }).catch(() => undefined);
      await listener.close();
      // Never leave a container stuck in Created (or running without its agent).
      if (container) await removeContainer(container, o.daemon).catch(() => undefined);
      throw err;
    } finally {
      stop.abort();
    }
  }

  async #create(spec: ContainerSpecInput, tenant: string | undefined): Promise<Dockerode.Container> {
    const o = this.options;
    let nameCleared = false;
    let networkRenewed = false;
    // At most: once as asked, once per disk-limit part the daemon refuses, once after clearing the name.
    for (;;) {
      const disk = o.diskLimits.request();
      try {
        const container = await o.docker.createContainer(buildContainerCreateOptions({ ...spec, disk }));
        o.diskLimits.applied(disk);
        return container;
      } catch (err) {
        if (isMissingNetwork(err) && !networkRenewed) {
          // Another executor removed the shared network while it had no containers: make it (and its rules) again.
          networkRenewed = true;
          await o.networkFor(tenant, true);
          continue;
        }
        if (isNotFound(err)) throw missingImageError(o.image, o.daemon);
        if (o.diskLimits.refused(err, disk)) continue;
        if (!isConflict(err) || nameCleared) throw dockerError(err, `creating container ${spec.name}`, o.daemon);
      }
      // The name is taken: a leftover of this task. Clear it and try once more.
      await o.resolveNameConflict(spec.name);
      nameCleared = true;
    }
  }

  /**
   * Waits for the agent, the "cannot run the agent" marker, or the container's exit; `signal` ends the wait.
   * Also for a stopped container started again (container-restart.ts).
   */
  async connect(
    container: Dockerode.Container,
    params: StartParams,
    agent: Promise<SandboxChannel>,
    signal: AbortSignal,
  ): Promise<SandboxChannel> {
    const o = this.options;
    const marker = path.join(params.hostDir, AGENT_UNAVAILABLE_FILE);
    const fallback = (async (): Promise<'fallback' | 'exited'> => {
      let round = 0;
      while (!signal.aborted) {
        await new Promise((r) => setTimeout(r, 25));
        if (await access(marker).then(() => true, () => false)) return 'fallback';
        if (++round % 20 === 0) {
          const info = await container.inspect().catch(() => undefined);
          if (info && !info.State.Running) return 'exited';
        }
      }
      return 'exited';
    })();
    try {
      const first = await Promise.race([agent, fallback]);
      if (first !== 'fallback' && first !== 'exited') {
        if (first instanceof AgentChannel && !first.hello.capabilities.includes('task-user')) {
          // An agent that ignored --user would run commands as the container's root.
          first.close();
          throw new FailedPreconditionError(
            `the exec agent of ${params.name} cannot run commands as the task's uid (an agent without ` +
              "the 'task-user' capability); run the one shipped with this executor",
          );
        }
        return first;
      }
      if (first === 'fallback') {
        const reason = await readFile(marker, 'utf8').catch(() => '');
        if (!this.#fallbackLogged.has(o.image)) {
          this.#fallbackLogged.add(o.image);
          o.logger.warn(
            { image: o.image, reason: reason.trim() },
            'the image cannot run the exec agent; using docker exec for its containers (slower: ~45 ms a command)',
          );
        }
        return new DockerExecChannel(container, params.name, params.identity, o.daemon, o.logger);
      }
      throw new UnavailableError(
        `container ${params.name} (image ${o.image}) stopped before its exec agent connected: ${await this.#logsTail(container)}`,
      );
    } catch (err) {
      if (err instanceof UnavailableError && /did not connect/.test(err.message)) {
        throw new UnavailableError(`${err.message}; container output: ${await this.#logsTail(container)}`, { cause: err });
      }
      throw err;
    }
  }

  async #logsTail(container: Dockerode.Container): Promise<string> {
    try {
      const logs = (await container.logs({ stdout: true, stderr: true, tail: 20, follow: false })) as Buffer;
      const text = new DockerStreamDemuxer()
        .push(logs)
        .map((part) => part.data.toString('utf8'))
        .join('')
        .trim();
      return text || '(no output)';
    } catch {
      return '(no output)';
    }
  }
}
