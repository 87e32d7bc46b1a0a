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
import { taskKeyString, type BackgroundHandle, type BackgroundOptions, type ExecOptions, type ExecResult, type TaskKey } from '../../backend.js';
import {
  ChannelEnvironment,
  type DroppedStreamWords,
  type ReplaceCause,
  type Replacement,
} from '../shared/channel-environment.js';
import { prepareSnapshot } from '../shared/shell-bootstrap.js';
import type { DiskMeter } from './disk-meter.js';
import { OOM_KILLS, PIDS_LIMIT_HITS, parseCounter, type CgroupCounter } from './cgroup-counters.js';
import { SANDBOX_RPC_DIR, type PersistentVolumeNames } from './container-spec.js';
import { restartContainer } from './container-restart.js';
import { packTmpfsScript, unpackTmpfsScript } from './tmpfs-keeper.js';
import { UnavailableError } from '../../../common/errors.js';
import type { ContainerFactory } from './container-factory.js';
import type { ContainerFate, SandboxContainer } from './sandbox-container.js';
import type { ProcessExit, SandboxChannel } from '../shared/sandbox-channel.js';

export interface DockerEnvironmentOptions {
  readonly key: TaskKey;
  readonly containerName: string;
  readonly factory: ContainerFactory;
  /** Labels for a replacement container (fresh `berth.created`). */
  readonly labels: () => Readonly<Record<string, string>>;
  readonly persistentVolumes?: PersistentVolumeNames;
  readonly volumeLabels?: Readonly<Record<string, string>>;
  /** A fork's snapshot image: a replacement container starts from it too. */
  readonly image?: string;
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
  /**
   * Whether another executor's container holds the task's name (it took the task over while this executor was
   * judged gone): then neither a replacement nor the release touches the task's host directory.
   */
  readonly heldByAnother?: (name: string, ownId: string) => Promise<boolean>;
  /**
   * terminal.container_disk where Docker cannot enforce it: checked before
   * each command and file write, and every `diskCheckIntervalMs` while
   * background processes run (past the limit they are stopped).
   */
  readonly diskMeter?: DiskMeter;
  readonly diskCheckIntervalMs?: number;
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

/** The kit's {@link prepareSnapshot} in a warm container's state directory. */
export function prepareShellSnapshot(channel: SandboxChannel, initialCwd: string): Promise<string | undefined> {
  return prepareSnapshot(channel, SANDBOX_STATE_DIR, initialCwd);
}

export class DockerEnvironment extends ChannelEnvironment<SandboxContainer> {
  readonly homeDir: string;
  readonly initialCwd: string;
  readonly stateDir = SANDBOX_STATE_DIR;
  readonly preparedSnapshot?: string;
  readonly rpcDir: { readonly hostPath: string; readonly sandboxPath: string };
  readonly containerName: string;
  readonly #o: DockerEnvironmentOptions;
  /** Counter values when last looked at; undefined where the container has no such file. */
  readonly #counters = new Map<CgroupCounter, number | undefined>();
  /** Background processes the disk check stops past terminal.container_disk (where Berth measures it). */
  readonly #background = new Set<BackgroundHandle>();
  #diskTimer: NodeJS.Timeout | undefined;

  constructor(container: SandboxContainer, options: DockerEnvironmentOptions) {
    super(container, { killGraceMs: options.killGraceMs, logger: options.logger });
    this.#o = options;
    this.containerName = options.containerName;
    this.homeDir = options.homeDir;
    this.initialCwd = options.initialCwd;
    if (options.preparedSnapshot !== undefined) this.preparedSnapshot = options.preparedSnapshot;
    this.rpcDir = { hostPath: container.hostDir, sandboxPath: SANDBOX_RPC_DIR };
  }

  get description(): string {
    return `docker:${this.containerName} (${this.link.id.slice(0, 12)})`;
  }

  /** The current container (tests and the backend look at it). */
  get container(): SandboxContainer {
    return this.link;
  }

  override async exec(options: ExecOptions): Promise<ExecResult> {
    await this.#checkDisk();
    return super.exec(options);
  }

  override async startBackground(options: BackgroundOptions): Promise<BackgroundHandle> {
    await this.#checkDisk();
    const handle = await super.startBackground(options);
    if (this.#o.diskMeter?.measuredParts().length) {
      this.#background.add(handle);
      this.#diskTimer ??= setInterval(() => void this.#checkBackgroundDisk(), this.#o.diskCheckIntervalMs ?? 30_000);
      this.#diskTimer.unref();
    }
    return handle;
  }

  /** Past terminal.container_disk, the background processes started since the last check are stopped, with a notice. */
  async #checkBackgroundDisk(): Promise<void> {
    try {
      await this.#checkDisk();
    } catch (err) {
      const handles = [...this.#background];
      this.#stopDiskTimer();
      await Promise.all(handles.map((h) => h.kill().catch(() => undefined)));
      this.addNotice(`Background processes were stopped: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  #stopDiskTimer(): void {
    if (this.#diskTimer) clearInterval(this.#diskTimer);
    this.#diskTimer = undefined;
    this.#background.clear();
  }

  override async dispose(): Promise<void> {
    this.#stopDiskTimer();
    return super.dispose();
  }

  /**
   * Stops the container (docker-lifecycle.ts): its background processes
   * end; its in-memory files are packed first (tmpfs-keeper.ts).
   */
  async suspend(): Promise<{ readonly processesKept: boolean }> {
    await this.#inContainer(packTmpfsScript(), 'packing its in-memory files (/tmp and other tmpfs) for the suspension');
    await this.suspendLink((container) => container.stop());
    this.#stopDiskTimer();
    return { processesKept: false };
  }

  /** Starts the same container again (its agent dials in anew) and unpacks its in-memory files. */
  async resume(): Promise<void> {
    await this.resumeLink((container) => restartContainer(this.#o.factory, container));
    await this.init().catch(() => undefined);
    // The task runs again whatever happens here: what could not be unpacked is told, not a failed resumption.
    await this.#inContainer(unpackTmpfsScript(), 'unpacking its in-memory files (/tmp and other tmpfs) after the suspension').catch(
      (err: unknown) => this.addNotice(`Some files in memory (/tmp and other tmpfs) could not be restored after the suspension: ${String(err)}`),
    );
  }

  /** Runs a script of the executor's own as the task's user; fails naming `what` with the script's output. */
  async #inContainer(script: string, what: string): Promise<void> {
    // What the sandbox prints is bounded: only its first 2000 bytes are kept, for the error.
    let output = Buffer.alloc(0);
    const onOutput = (chunk: Buffer) => {
      if (output.length < 2000) output = Buffer.concat([output, chunk.subarray(0, 2000 - output.length)]);
    };
    const r = await super.exec({ script, timeoutMs: 120_000, onOutput });
    if (r.exitCode !== 0) {
      const text = output.toString('utf8').trim() || 'no output';
      throw new UnavailableError(`${this.containerName}: ${what} failed (exit ${r.exitCode}): ${text}`);
    }
  }

  override async writeFile(absPath: string, data: Uint8Array): Promise<void> {
    await this.#checkDisk();
    return super.writeFile(absPath, data);
  }

  /** Refuses the call (RESOURCE_EXHAUSTED) when the task holds more disk than terminal.container_disk. */
  async #checkDisk(): Promise<void> {
    const { id, identity } = this.link;
    await this.#o.diskMeter?.check(id, `${identity.uid}:${identity.gid}`, taskKeyString(this.#o.key));
  }

  /** Records the baselines of the OOM and pids counters; called once the container runs. */
  async init(): Promise<void> {
    this.#counters.clear();
    const channel = this.link.channel;
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
      this.addNotice(
        `A process was killed by the out-of-memory killer: the container's memory limit is ${this.#o.memoryMiB} MiB.`,
      );
    }
    if (rise(PIDS_LIMIT_HITS, values.pidsMaxHits)) {
      this.addNotice(
        `The command hit the container's limit of ${this.#o.pidsLimit} processes: new processes could not be started.`,
      );
    }
  }

  /** After a command: did a limit of the container kill or hobble it? */
  protected override async afterCommand(container: SandboxContainer, exit: ProcessExit, result: ExecResult): Promise<void> {
    if (exit.counters) {
      this.#applyCounters(exit.counters);
      return;
    }
    // The docker exec fallback reports no counters: read them, but only after a failure.
    if (result.exitCode === 0) return;
    const [oomKills, pidsMaxHits] = await Promise.all([
      this.#readCounter(container.channel, OOM_KILLS).catch(() => undefined),
      this.#readCounter(container.channel, PIDS_LIMIT_HITS).catch(() => undefined),
    ]);
    this.#applyCounters({ oomKills, pidsMaxHits });
  }

  protected override droppedStreamWords(): DroppedStreamWords {
    return { agent: "the container's exec agent", kept: 'the container and its background processes were kept' };
  }

  /** A new container under the same name and host directory, in place of a lost one. */
  protected async replaceLink(lost: SandboxContainer, cause: ReplaceCause): Promise<Replacement<SandboxContainer>> {
    const fate = await lost.fate().catch(() => undefined);
    this.#o.logger.warn({ container: lost.name, fate }, 'task container lost; starting a new one');
    await lost.remove().catch((err: unknown) => {
      this.#o.logger.warn({ err }, 'removing the lost container failed');
      this.#o.onRemoveFailed(lost.id);
    });
    this.assertLive();
    if (await this.#o.heldByAnother?.(this.containerName, lost.id)) {
      throw new UnavailableError(
        `the task's container ${this.containerName} was taken over by another executor while this one counted as gone ` +
          '(stopped or hung past docker.executor_stale_ms); this executor no longer serves the task',
      );
    }
    const next = await this.#o.factory.start({
      name: this.containerName,
      hostDir: lost.hostDir,
      identity: lost.identity,
      labels: this.#o.labels(),
      tenant: this.#o.key.tenant,
      ...(this.#o.persistentVolumes ? { persistentVolumes: this.#o.persistentVolumes } : {}),
      ...(this.#o.volumeLabels ? { volumeLabels: this.#o.volumeLabels } : {}),
      ...(this.#o.image !== undefined ? { image: this.#o.image } : {}),
    });
    const during = cause.kind === 'lost' && cause.duringCommand ? ' while the command ran' : '';
    const kept = this.#o.persistentVolumes
      ? `files in ${this.initialCwd} and ${this.homeDir} were kept`
      : 'files written in the old container are gone';
    return {
      link: next,
      recreated: true,
      notices: [
        `The task's container ${describeFate(fate)}${during}; a new container was started: ` +
          `background processes were stopped and ${kept}.`,
      ],
    };
  }

  protected override async adopted(): Promise<void> {
    this.#o.onReplaced?.();
    await this.init().catch(() => undefined);
  }

  protected async discardLink(container: SandboxContainer): Promise<void> {
    await container.remove().catch(() => this.#o.onRemoveFailed(container.id));
  }

  protected async releaseLink(container: SandboxContainer): Promise<void> {
    await container.remove().catch((err: unknown) => {
      this.#o.logger.warn({ err, container: container.name }, 'removing the task container failed; will retry');
      this.#o.onRemoveFailed(container.id);
    });
    // The task's host directory is the new owner's once another executor took the task over.
    const takenOver = this.#o.heldByAnother ? await this.#o.heldByAnother(this.containerName, container.id).catch(() => true) : false;
    if (this.#o.ownsHostDir && !takenOver) await rm(container.hostDir, { recursive: true, force: true }).catch(() => undefined);
    this.#o.onDisposed();
  }
}
