/**
 * One task's environment on the docker backend: a long-lived container and
 * the channel into it. Exec semantics match the local backend: each command
 * is `bash -c` in its own process group; on timeout or interrupt the whole
 * group (and session) inside the container gets SIGTERM, then SIGKILL after
 * the grace period, so nothing of it keeps running; 124 / 130 exit codes.
 *
 * When the container disappears (removed by hand, OOM-killed, daemon
 * restart), the next operation starts a new one under the same name and the
 * same host directory, so the shell snapshot survives, and says so in a
 * notice with the next command's result.
 *
 * A dropped agent stream (EOF or reset, no protocol fault) is not a lost
 * container: the agent, PID 1, keeps its background processes and dials in
 * again, and the channel binds them to the new stream (agent-channel.ts);
 * only a foreground command that was running ends (137, with a notice).
 * When the agent does not come back in time, the container is replaced.
 */
import { rm } from 'node:fs/promises';
import type { Logger } from '../../../common/logging.js';
import type {
  BackendEnvironment,
  BackgroundHandle,
  BackgroundOptions,
  ExecOptions,
  ExecResult,
  FileStat,
  TaskKey,
} from '../../backend.js';
import { ChannelOperations, awaitForeground } from '../shared/channel-commands.js';
import { interruptedBeforeStart } from '../shared/exec-deadline.js';
import { assertNotReleased, deliverOutput } from '../shared/guards.js';
import { buildPreparedSnapshot } from '../../shell-state-runner.js';
import { OOM_KILLS, PIDS_LIMIT_HITS, parseCounter, type CgroupCounter } from './cgroup-counters.js';
import { SANDBOX_RPC_DIR, type PersistentVolumeNames } from './container-spec.js';
import type { ContainerFactory, ContainerFate, SandboxContainer } from './sandbox-container.js';
import { SandboxLostError, type ProcessExit, type SandboxChannel, type SandboxProcess } from '../shared/sandbox-channel.js';

export interface DockerEnvironmentOptions {
  readonly key: TaskKey;
  readonly containerName: string;
  readonly factory: ContainerFactory;
  /** Labels for a replacement container (fresh `berth.created`). */
  readonly labels: () => Readonly<Record<string, string>>;
  readonly persistentVolumes?: PersistentVolumeNames;
  readonly volumeLabels?: Readonly<Record<string, string>>;
  readonly initialCwd: string;
  readonly homeDir: string;
  /** A snapshot the container wrote while in the warm pool. */
  readonly preparedSnapshot?: string;
  readonly killGraceMs: number;
  readonly memoryMiB: number;
  readonly pidsLimit: number;
  readonly logger: Logger;
  /** Removes the container's host directory on dispose (false for directories someone else owns). */
  readonly ownsHostDir: boolean;
  readonly onDisposed: () => void;
  /** Called with a container id whose removal failed, for a later retry. */
  readonly onRemoveFailed: (containerId: string) => void;
  /** Called when a lost container has been replaced by a new one. */
  readonly onReplaced?: () => void;
}

function describeFate(fate: ContainerFate | undefined): string {
  if (!fate) return 'could not be reached';
  if (!fate.exists) return 'was removed';
  if (!fate.running) {
    return fate.oomKilled
      ? 'was stopped by the out-of-memory killer'
      : `stopped (exit status ${fate.exitCode ?? 'unknown'})`;
  }
  return 'lost its exec agent';
}

/** The runner's state files, in the bind-mounted per-task directory (kept when a container is replaced). */
export const SANDBOX_STATE_DIR = `${SANDBOX_RPC_DIR}/state`;

/**
 * Runs the shell-state bootstrap in a container that has no task yet;
 * resolves to the snapshot's path, or undefined when the login shell failed
 * (the task's runner then tries again itself, login shell or not).
 */
export async function prepareShellSnapshot(channel: SandboxChannel, initialCwd: string): Promise<string | undefined> {
  const prepared = buildPreparedSnapshot(SANDBOX_STATE_DIR, initialCwd);
  const proc = await channel.spawn({ script: prepared.script, cwd: initialCwd, onOutput: () => undefined });
  const timer = setTimeout(() => void proc.kill(1000).catch(() => undefined), 30_000);
  try {
    const exit = await proc.exited;
    if (exit.code !== 0) return undefined;
  } finally {
    clearTimeout(timer);
  }
  return (await channel.stat(prepared.path)).exists ? prepared.path : undefined;
}

export class DockerEnvironment implements BackendEnvironment {
  readonly homeDir: string;
  readonly initialCwd: string;
  readonly stateDir = SANDBOX_STATE_DIR;
  readonly preparedSnapshot?: string;
  readonly rpcDir: { readonly hostPath: string; readonly sandboxPath: string };
  readonly containerName: string;
  readonly #o: DockerEnvironmentOptions;
  readonly #ops = new ChannelOperations({
    withChannel: (fn) => this.#withChannel(fn),
    cwd: () => this.initialCwd,
    killGraceMs: () => this.#o.killGraceMs,
    logger: () => this.#o.logger,
  });
  #container: SandboxContainer;
  #recreating: Promise<SandboxContainer> | undefined;
  #notices: string[] = [];
  #recreated = false;
  #disposing: Promise<void> | undefined;
  /** Counter values when last looked at; undefined where the container has no such file. */
  readonly #counters = new Map<CgroupCounter, number | undefined>();

  constructor(container: SandboxContainer, options: DockerEnvironmentOptions) {
    this.#container = container;
    this.#o = options;
    this.containerName = options.containerName;
    this.homeDir = options.homeDir;
    this.initialCwd = options.initialCwd;
    if (options.preparedSnapshot !== undefined) this.preparedSnapshot = options.preparedSnapshot;
    this.rpcDir = { hostPath: container.hostDir, sandboxPath: SANDBOX_RPC_DIR };
  }

  get description(): string {
    return `docker:${this.containerName} (${this.#container.id.slice(0, 12)})`;
  }

  /** The current container (tests and the backend look at it). */
  get container(): SandboxContainer {
    return this.#container;
  }

  /** Notices gathered since the last call: a replaced container, a limit that killed a command. */
  takeNotices(): string[] {
    return this.#notices.splice(0);
  }

  /** Whether a new container replaced a lost one since the last call. */
  takeRecreated(): boolean {
    const recreated = this.#recreated;
    this.#recreated = false;
    return recreated;
  }

  /** Adds a notice for the next result (the backend's word on how the environment began). */
  addNotice(text: string): void {
    this.#notices.push(text);
  }

  /** Records the baselines of the OOM and pids counters; called once the container runs. */
  async init(): Promise<void> {
    this.#counters.clear();
    const channel = this.#container.channel;
    const [oom, pids] = await Promise.all([OOM_KILLS, PIDS_LIMIT_HITS].map((c) => this.#readCounter(channel, c)));
    this.#counters.set(OOM_KILLS, oom);
    this.#counters.set(PIDS_LIMIT_HITS, pids);
  }

  async #readCounter(channel: SandboxChannel, counter: CgroupCounter): Promise<number | undefined> {
    for (const p of counter.paths) {
      const text = await channel.readFile(p).then(
        (b) => b.toString('utf8'),
        () => undefined,
      );
      const value = text === undefined ? undefined : parseCounter(text, counter.key);
      if (value !== undefined) return value;
    }
    return undefined;
  }

  /** Compares counters with the last values seen; a rise becomes a notice. */
  #applyCounters(values: { oomKills?: number | undefined; pidsMaxHits?: number | undefined }): void {
    const rise = (counter: CgroupCounter, value: number | undefined): boolean => {
      if (value === undefined) return false;
      const before = this.#counters.get(counter);
      this.#counters.set(counter, value);
      return before !== undefined && value > before;
    };
    if (rise(OOM_KILLS, values.oomKills)) {
      this.#notices.push(
        `A process was killed by the out-of-memory killer: the container's memory limit is ${this.#o.memoryMiB} MiB.`,
      );
    }
    if (rise(PIDS_LIMIT_HITS, values.pidsMaxHits)) {
      this.#notices.push(
        `The command hit the container's limit of ${this.#o.pidsLimit} processes: new processes could not be started.`,
      );
    }
  }

  /** After a command: did a limit of the container kill or hobble it? */
  async #limitNotices(channel: SandboxChannel, exit: ProcessExit, exitCode: number): Promise<void> {
    if (exit.counters) {
      this.#applyCounters(exit.counters);
      return;
    }
    // The docker exec fallback reports no counters: read them, but only after a failure.
    if (exitCode === 0) return;
    const [oomKills, pidsMaxHits] = await Promise.all([
      this.#readCounter(channel, OOM_KILLS).catch(() => undefined),
      this.#readCounter(channel, PIDS_LIMIT_HITS).catch(() => undefined),
    ]);
    this.#applyCounters({ oomKills, pidsMaxHits });
  }

  /** The current container, replaced first if it was lost. */
  async #ready(): Promise<SandboxContainer> {
    assertNotReleased(this, this.#disposing);
    if (this.#recreating) return this.#recreating;
    const current = this.#container;
    return current.channel.isLost ? this.#recreate(current, '') : current;
  }

  /** Replaces a lost container (once, however many callers noticed). */
  #recreate(lost: SandboxContainer, during: string): Promise<SandboxContainer> {
    if (this.#container !== lost && !this.#recreating) return Promise.resolve(this.#container);
    this.#recreating ??= (async () => {
      // A dropped stream whose agent dialled in again: same container, nothing to replace.
      if (await lost.channel.recover?.()) return lost;
      const fate = await lost.fate().catch(() => undefined);
      this.#o.logger.warn({ container: lost.name, fate }, 'task container lost; starting a new one');
      await lost.remove().catch((err: unknown) => {
        this.#o.logger.warn({ err }, 'removing the lost container failed');
        this.#o.onRemoveFailed(lost.id);
      });
      assertNotReleased(this, this.#disposing);
      const next = await this.#o.factory.start({
        name: this.containerName,
        hostDir: lost.hostDir,
        labels: this.#o.labels(),
        tenant: this.#o.key.tenant,
        ...(this.#o.persistentVolumes ? { persistentVolumes: this.#o.persistentVolumes } : {}),
        ...(this.#o.volumeLabels ? { volumeLabels: this.#o.volumeLabels } : {}),
      });
      if (this.#disposing) {
        await next.remove().catch(() => this.#o.onRemoveFailed(next.id));
        assertNotReleased(this, this.#disposing);
      }
      this.#container = next;
      this.#recreated = true;
      this.#o.onReplaced?.();
      await this.init().catch(() => undefined);
      const kept = this.#o.persistentVolumes
        ? `files in ${this.initialCwd} and ${this.homeDir} were kept`
        : 'files written in the old container are gone';
      this.#notices.push(
        `The task's container ${describeFate(fate)}${during}; a new container was started: ` +
          `background processes were stopped and ${kept}.`,
      );
      return next;
    })().finally(() => {
      this.#recreating = undefined;
    });
    return this.#recreating;
  }

  /** Runs `fn` on the channel; once more on a new container if the old one was lost. */
  async #withChannel<T>(fn: (channel: SandboxChannel) => Promise<T>): Promise<T> {
    const container = await this.#ready();
    try {
      return await fn(container.channel);
    } catch (err) {
      if (!(err instanceof SandboxLostError) || this.#disposing) throw err;
      const next = await this.#recreate(container, '');
      return fn(next.channel);
    }
  }

  async exec(options: ExecOptions): Promise<ExecResult> {
    assertNotReleased(this, this.#disposing);
    const early = interruptedBeforeStart(options);
    if (early) return early;
    let container = await this.#ready();
    const spawn = (channel: SandboxChannel) =>
      channel.spawn({
        script: options.script,
        cwd: this.initialCwd,
        ...(options.env ? { env: options.env } : {}),
        ...(options.pty ? { pty: true } : {}),
        ...(options.stdin !== undefined ? { stdin: options.stdin } : {}),
        onOutput: (chunk) => deliverOutput(options.onOutput, chunk, this.#o.logger),
      });
    let proc: SandboxProcess;
    try {
      proc = await spawn(container.channel);
    } catch (err) {
      if (!(err instanceof SandboxLostError) || this.#disposing) throw err;
      container = await this.#recreate(container, '');
      proc = await spawn(container.channel);
    }

    const outcome = await awaitForeground(proc, options, this.#o.killGraceMs);
    if (!outcome.exit) {
      // The container (or only the stream to its agent) went away under the command: nothing of it runs any more.
      if (this.#disposing) throw outcome.lost;
      if (await container.channel.recover?.()) {
        this.#notices.push(
          "The connection to the container's exec agent dropped while the command ran; the command was stopped " +
            '(the container and its background processes were kept).',
        );
        return outcome.deadline.result(137);
      }
      await this.#recreate(container, ' while the command ran');
      return outcome.deadline.result(137);
    }
    await this.#limitNotices(container.channel, outcome.exit, outcome.result.exitCode);
    return outcome.result;
  }

  startBackground(options: BackgroundOptions): Promise<BackgroundHandle> {
    assertNotReleased(this, this.#disposing);
    return this.#ops.startBackground(options);
  }

  readFile(absPath: string): Promise<Buffer> {
    return this.#ops.readFile(absPath);
  }

  writeFile(absPath: string, data: Uint8Array): Promise<void> {
    return this.#ops.writeFile(absPath, data);
  }

  stat(absPath: string): Promise<FileStat> {
    return this.#ops.stat(absPath);
  }

  dispose(): Promise<void> {
    this.#disposing ??= (async () => {
      await this.#recreating?.catch(() => undefined);
      const container = this.#container;
      await container.remove().catch((err: unknown) => {
        this.#o.logger.warn({ err, container: container.name }, 'removing the task container failed; will retry');
        this.#o.onRemoveFailed(container.id);
      });
      if (this.#o.ownsHostDir) await rm(container.hostDir, { recursive: true, force: true }).catch(() => undefined);
      this.#o.onDisposed();
    })();
    return this.#disposing;
  }
}

