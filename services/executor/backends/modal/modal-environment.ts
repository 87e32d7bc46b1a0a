/**
 * One task's environment on the modal backend: its running sandbox and the
 * exec agent in it, on the kit's channel environment. A sandbox that is
 * lost is replaced; one near Modal's timeout is renewed from a snapshot of
 * its files; release snapshots (persistent mode) and terminates it.
 */
import type * as ModalSdk from 'modal';
import { FailedPreconditionError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import type { RpcRelay, TaskKey } from '../../backend.js';
import type { AgentChannel } from '../shared/agent/agent-channel.js';
import {
  PlacedChannelEnvironment,
  type DroppedStreamWords,
  type ReplaceCause,
  type Replacement,
} from '../shared/channel-environment.js';
import { modalError } from './modal-errors.js';

/**
 * Where execute_code's run dirs go inside the sandbox (one sandbox per task,
 * so private to the task); emptied when the agent starts in a sandbox, which
 * drops run dirs a snapshot or an earlier executor's sandbox still held.
 */
export const SANDBOX_CODE_DIR = '/tmp/berth-code';

/** A task's sandbox, found or made, before its agent runs. */
export interface OpenedSandbox {
  readonly sandbox: ModalSdk.Sandbox;
  /** When it was created (an estimate for one found running); its timeout runs from then. */
  readonly createdAt: number;
  /** Found running (an earlier executor's), not created now. */
  readonly reattached?: boolean;
  readonly notice?: string;
}

/** One running sandbox of a task and the agent in it. */
export interface LiveSandbox {
  readonly sandbox: ModalSdk.Sandbox;
  readonly channel: AgentChannel;
  readonly description: string;
  readonly stateDir: string;
  readonly homeDir: string;
  readonly initialCwd: string;
  /** When the sandbox was created: its timeout runs from then. */
  readonly startedAt: number;
}

/** What an environment asks of its backend to replace and release its sandbox. */
export interface ModalSandboxes {
  readonly sandboxTimeoutMs: number;
  /** A new sandbox for the task (from `image`, or its snapshot, or the configured image). */
  openSandbox(key: TaskKey, reattach: boolean, logger: Logger | undefined, image?: ModalSdk.Image): Promise<OpenedSandbox>;
  /** Starts the agent in a sandbox and prepares the task's directories in it. */
  attach(sandbox: ModalSdk.Sandbox, key: TaskKey, logger: Logger | undefined, createdAt: number, keptStateDir?: string): Promise<LiveSandbox>;
  /** Remembers (or forgets) the snapshot a persistent task's next sandbox starts from. */
  recordSnapshot(key: TaskKey, imageId: string | undefined): Promise<void>;
}

export interface EnvironmentSettings {
  readonly persistent: boolean;
  readonly killGraceMs: number;
  readonly logger: Logger | undefined;
  readonly onDisposed: () => void;
}

/** How long before the sandbox's timeout a task in use gets a new sandbox. */
function renewMarginMs(timeoutMs: number): number {
  return Math.min(5 * 60_000, Math.floor(timeoutMs / 4));
}

export class ModalEnvironment extends PlacedChannelEnvironment<LiveSandbox> {
  readonly #backend: ModalSandboxes;
  readonly #key: TaskKey;
  readonly #s: EnvironmentSettings;
  /** While suspended: the snapshot of the terminated sandbox's files, which resuming starts from. */
  #suspendedImage: ModalSdk.Image | undefined;
  /**
   * execute_code runs in the sandbox itself: the agent makes the run dir and
   * rpc.sock there and relays each connection over its stream, so the
   * script's open() sees the files its terminal() calls wrote.
   */
  readonly rpcRelay: RpcRelay = this.relayIn(SANDBOX_CODE_DIR);

  constructor(backend: ModalSandboxes, key: TaskKey, live: LiveSandbox, settings: EnvironmentSettings) {
    super(live, settings);
    this.#backend = backend;
    this.#key = key;
    this.#s = settings;
  }

  /** The current sandbox's exec agent (tests drop its stream). */
  get agentChannel(): AgentChannel {
    return this.link.channel;
  }
  /** The current sandbox (tests look at it). */
  get sandboxId(): string {
    return this.link.sandbox.sandboxId;
  }

  /** Snapshots the current sandbox's files (a tenant's snapshot); the image id. */
  async snapshotFiles(): Promise<string> {
    this.assertLive();
    try {
      return (await this.link.sandbox.snapshotFilesystem()).imageId;
    } catch (err) {
      throw modalError(err, 'snapshotting the sandbox');
    }
  }

  /**
   * Suspends: snapshots the sandbox's files (the runner's state directory
   * with them) and terminates it, so nothing runs or is billed. Background
   * processes end.
   */
  async suspend(): Promise<{ readonly processesKept: boolean }> {
    await this.suspendLink(async (live) => {
      let image: ModalSdk.Image;
      try {
        image = await live.sandbox.snapshotFilesystem();
      } catch (err) {
        throw modalError(err, 'snapshotting the sandbox for the suspension');
      }
      this.#suspendedImage = image;
      live.channel.close();
      await live.sandbox.terminate().catch((err: unknown) => this.#s.logger?.warn({ err }, 'terminating the suspended sandbox failed'));
      live.sandbox.detach();
    });
    return { processesKept: false };
  }

  /** Starts a new sandbox from the suspension's snapshot, its agent on the same state directory. */
  async resume(): Promise<void> {
    await this.resumeLink(async (suspended) => {
      const image = this.#suspendedImage;
      if (!image) throw new FailedPreconditionError(`${suspended.description} is not suspended`);
      const opened = await this.#backend.openSandbox(this.#key, false, this.#s.logger, image);
      try {
        const next = await this.#backend.attach(opened.sandbox, this.#key, this.#s.logger, opened.createdAt, suspended.stateDir);
        this.#suspendedImage = undefined;
        return next;
      } catch (err) {
        await opened.sandbox.terminate().catch(() => undefined);
        throw err;
      }
    });
  }

  /** Renewed when the sandbox's timeout is near. */
  protected override isStale(live: LiveSandbox): boolean {
    const timeout = this.#backend.sandboxTimeoutMs;
    return Date.now() >= live.startedAt + timeout - renewMarginMs(timeout);
  }

  protected override droppedStreamWords(live: LiveSandbox): DroppedStreamWords {
    return { agent: `the exec agent in ${live.description}`, kept: 'the sandbox and its background processes were kept' };
  }

  /**
   * A new sandbox for the task: after a loss, from its recorded snapshot
   * (persistent) or the image; to renew, from a snapshot of the old one.
   */
  protected async replaceLink(old: LiveSandbox, cause: ReplaceCause): Promise<Replacement<LiveSandbox>> {
    const logger = this.#s.logger;
    let image: ModalSdk.Image | undefined;
    let what: string;
    if (cause.kind === 'stale') {
      image = await old.sandbox.snapshotFilesystem().catch((err: unknown) => {
        logger?.warn({ err }, 'snapshot for the renewal failed; the new sandbox starts without the files');
        return undefined;
      });
      what =
        `The task's Modal sandbox reached the end of its ${this.#backend.sandboxTimeoutMs / 1000}-second ` +
        `lifetime; a new sandbox was started from a snapshot of its files${image ? '' : ' (the snapshot failed: files are gone)'}: ` +
        'background processes were stopped.';
    } else {
      const code = await old.sandbox.poll().catch(() => null);
      const fate = code === null ? 'lost its exec agent' : code === 124 ? 'reached its timeout' : `ended (exit ${code})`;
      const during = cause.duringCommand ? ' while the command ran' : '';
      what =
        `The task's Modal sandbox ${fate}${during}; a new sandbox was started: background processes were stopped and ` +
        (this.#s.persistent ? 'files written since the last release are gone.' : 'files written in the old sandbox are gone.');
    }
    old.channel.close();
    await old.sandbox.terminate().catch((err: unknown) => logger?.warn({ err }, 'terminating the old sandbox failed'));
    old.sandbox.detach();
    this.assertLive();
    const opened = await this.#backend.openSandbox(this.#key, false, logger, image);
    let next: LiveSandbox;
    try {
      next = await this.#backend.attach(opened.sandbox, this.#key, logger, opened.createdAt);
    } catch (err) {
      await opened.sandbox.terminate().catch(() => undefined);
      throw err;
    }
    logger?.warn({ sandbox: next.sandbox.sandboxId, why: cause.kind === 'stale' ? 'renew' : 'lost' }, 'task sandbox replaced');
    return { link: next, recreated: true, notices: opened.notice ? [what, opened.notice] : [what] };
  }

  protected async discardLink(next: LiveSandbox): Promise<void> {
    next.channel.close();
    await next.sandbox.terminate().catch(() => undefined);
  }

  /** Stops the agent (and what it runs), snapshots in persistent mode, terminates the sandbox. */
  protected async releaseLink(live: LiveSandbox): Promise<void> {
    const logger = this.#s.logger;
    live.channel.close();
    if (this.#s.persistent && this.#suspendedImage) {
      // Released while suspended: the sandbox is gone already, its files are in the suspension's snapshot.
      await this.#backend.recordSnapshot(this.#key, this.#suspendedImage.imageId).catch((err: unknown) => logger?.warn({ err }, 'recording the task\'s snapshot failed'));
    } else if (this.#s.persistent) {
      try {
        const image = await live.sandbox.snapshotFilesystem();
        await this.#backend.recordSnapshot(this.#key, image.imageId);
        logger?.info({ image: image.imageId }, 'task files snapshotted for its next sandbox');
      } catch (err) {
        logger?.warn({ err: modalError(err, 'snapshotting the sandbox').message }, 'the task\'s files could not be snapshotted');
      }
    } else {
      await this.#backend.recordSnapshot(this.#key, undefined).catch(() => undefined);
    }
    await live.sandbox.terminate().catch((err: unknown) => {
      logger?.warn({ err: modalError(err, 'terminating the sandbox').message }, 'terminating the task sandbox failed');
    });
    live.sandbox.detach();
    this.#s.onDisposed();
  }
}
