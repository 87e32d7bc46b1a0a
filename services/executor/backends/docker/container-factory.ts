/**
 * Starting sandbox containers with one backend's settings: prepare the
 * task's host directory (host-dir.ts), create and start the container
 * hardened (container-spec.ts), and wait until its exec agent dials in, or
 * fall back to `docker exec` when the image cannot run the agent. A
 * container whose start fails is removed, so none is left stuck in Created.
 */
import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import type Dockerode from 'dockerode';
import { FailedPreconditionError, UnavailableError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import { stageSpan } from '../../../common/tracing/stage-spans.js';
import { AgentListener } from './agent-listener.js';
import { AgentChannel } from '../shared/agent/agent-channel.js';
import {
  ACCOUNT_FILES,
  RESOLV_CONF_FILE,
  AGENT_TOKEN_FILE,
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
import { agentUnavailableReason, prepareHostDir as prepareDir, writeTokenFile } from './host-dir.js';
import type { ImageAccounts } from './image-accounts.js';
import { SandboxContainer, removeContainer, runningProbe, type SandboxEngine } from './sandbox-container.js';
import type { StartGate, StartPriority } from './start-gate.js';
import { taskAccounts, type TaskIdentity } from './task-identity.js';
import type { SandboxChannel } from '../shared/sandbox-channel.js';

/** How often one container's create or start makes the tenant's network again after it vanished. */
const NETWORK_RENEWALS = 3;

/** Settings shared by every container of one backend. */
export interface ContainerFactoryOptions extends SandboxEngine {
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
   * Under `docker.network: isolated`: the resolvers a container asks itself,
   * and how Docker's embedded DNS is closed in a started container (see
   * NetworkIsolation.closeEmbeddedDns), so that no name of another task's
   * container resolves there.
   */
  readonly embeddedDns?: { readonly resolvers: () => readonly string[]; readonly close: (pid: number) => Promise<void> };
  /** The cgroup parent of a tenant's containers under the daemon's cgroup driver (TaskNames.cgroupParent). */
  readonly cgroupParent: (tenant: string, driver: string | undefined) => string | undefined;
  /** How many containers are created and started at once (docker.start_concurrency). */
  readonly startGate: StartGate;
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
  /** Whose start goes first when starts queue (a task's, by default). */
  readonly priority?: StartPriority;
  readonly signal?: AbortSignal;
}

/** The engine's answer when a container's network does not exist (at create or, in older engines, at start). */
function isMissingNetwork(err: unknown): boolean {
  return isNotFound(err) && /network \S+ not found/i.test(dockerMessage(err));
}

/** Prepares host directories and starts containers with one backend's settings. */
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
   * Prepares the task's host directory for one start of its container, a
   * restarted one included (see host-dir.ts): a fresh copy of the agent, the
   * task's account files from the configured image's, a resolv.conf under
   * `docker.network: isolated`.
   */
  async prepareHostDir(hostDir: string, identity: TaskIdentity): Promise<void> {
    const o = this.options;
    const imageAccounts = await o.accounts.of(o.image, await this.ensureImage());
    await prepareDir(hostDir, identity, {
      agentScriptPath: o.agentScriptPath,
      accounts: taskAccounts(imageAccounts, identity, o.homeDir),
      ...(o.embeddedDns ? { resolvers: o.embeddedDns.resolvers() } : {}),
    });
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
    const network = await stageSpan('network_setup', () => o.networkFor(params.tenant, false));
    // Pool containers have no tenant yet: they keep the daemon's default parent (see docs/performance.md, fair share).
    const tenant = params.labels[LABEL.tenant];
    const cgroupParent = tenant === undefined ? undefined : o.cgroupParent(tenant, await this.#driver());
    await stageSpan('host_dir', () => this.prepareHostDir(params.hostDir, params.identity));
    // The container's root's (the agent's), 0600, under a root executor: no command can even connect to it (see AgentListener.listen).
    const listener = await AgentListener.listen(path.join(params.hostDir, 'agent.sock'), params.name, { uid: 0, gid: 0 }, o.logger);
    const resolvConf = o.embeddedDns ? path.join(params.hostDir, RESOLV_CONF_FILE) : undefined;
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
    const stop = new AbortController();
    const signal = params.signal ? AbortSignal.any([params.signal, stop.signal]) : stop.signal;
    let container: Dockerode.Container | undefined;
    let release: (() => void) | undefined;
    try {
      // A few containers at a time (docker.start_concurrency): in a burst, each then starts sooner.
      release = await stageSpan('start_queue', () => o.startGate.acquire(params.priority ?? 'task', signal));
      // Expect the agent before the container starts: a busy daemon may answer the start request only after
      // the agent has dialled in, and a hello nobody waits for is refused (the agent then exits, and so does
      // the container). Its time runs from here, not from the queue.
      const agent = listener.expect(token, o.agentConnectTimeoutMs, signal);
      agent.catch(() => undefined);
      for (let renewals = 0; ; renewals++) {
        container = await stageSpan('container_create', () => this.#create(spec, params.tenant));
        const created = container;
        try {
          await stageSpan('container_start', () => created.start());
          break;
        } catch (err) {
          // The engine looks the network up at start: one removed under us is made again (a few times: executors
          // sharing the engine that close one after another may each remove it while it has no container yet).
          if (renewals >= NETWORK_RENEWALS || !isMissingNetwork(err)) throw dockerError(err, `starting container ${params.name}`, o.daemon);
          await removeContainer(container, o.daemon);
          container = undefined;
          await o.networkFor(params.tenant, true);
        }
      }
      release();
      const started = container;
      // Before any command can run: the executor sends none until the agent's hello, awaited below.
      const dns = o.embeddedDns;
      if (dns) await stageSpan('network_setup', async () => dns.close((await started.inspect()).State.Pid));
      listener.isAlive = runningProbe(started);
      const channel = await stageSpan('agent_connect', () => this.connect(started, params, agent, signal));
      // The agent removed it before dialling in; gone for certain now (and for the docker exec fallback).
      await rm(tokenFile, { force: true });
      return new SandboxContainer(o, container, params.name, params.hostDir, params.identity, listener, channel);
    } catch (err) {
      await rm(tokenFile, { force: true }).catch(() => undefined);
      await listener.close();
      // Never leave a container stuck in Created (or running without its agent).
      if (container) await removeContainer(container, o.daemon).catch(() => undefined);
      throw err;
    } finally {
      release?.();
      stop.abort();
    }
  }

  async #create(spec: ContainerSpecInput, tenant: string | undefined): Promise<Dockerode.Container> {
    const o = this.options;
    let nameCleared = false;
    let networkRenewals = 0;
    // At most: once as asked, once per disk-limit part the daemon refuses, NETWORK_RENEWALS times for the network, once after clearing the name.
    for (;;) {
      const disk = o.diskLimits.request();
      try {
        const container = await o.docker.createContainer(buildContainerCreateOptions({ ...spec, disk }));
        o.diskLimits.applied(disk);
        return container;
      } catch (err) {
        if (isMissingNetwork(err) && networkRenewals < NETWORK_RENEWALS) {
          // Another executor removed the shared network while it had no containers: make it (and its rules) again.
          networkRenewals++;
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
    let reason: string | undefined;
    const fallback = (async (): Promise<'fallback' | 'exited'> => {
      let round = 0;
      while (!signal.aborted) {
        await new Promise((r) => setTimeout(r, 25));
        reason = await agentUnavailableReason(params.hostDir).catch(() => undefined);
        if (reason !== undefined) return 'fallback';
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
        if (!this.#fallbackLogged.has(o.image)) {
          this.#fallbackLogged.add(o.image);
          o.logger.warn(
            { image: o.image, reason: (reason ?? '').trim() },
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
