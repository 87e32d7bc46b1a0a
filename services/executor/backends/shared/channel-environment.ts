/**
 * A task's environment on a sandbox reached through a {@link SandboxChannel}
 * (the exec agent over a socket or a stream, or a fallback channel), the
 * same for every backend built that way: docker, modal, daytona,
 * singularity, and any other whose sandbox the executor reaches the same way.
 *
 * The environment holds a link: the channel and whatever the backend keeps
 * beside it (a container, a cloud sandbox, a pod), kept live by a
 * {@link LiveLink} (one replacement however many callers noticed a lost or
 * stale link, a dropped stream first given back to the channel, one retry of
 * an operation that got nowhere). Everything else that is not about how that
 * link is made lives here once:
 * - a foreground command whose channel went away under it ends with 137
 *   and a notice (dropped stream: the sandbox was kept; lost: replaced);
 * - notices and the recreated flag are handed out once with the next result.
 *
 * A backend extends this class and supplies only its transport and
 * lifecycle: {@link ChannelEnvironment.replaceLink} (a new link for a lost
 * or stale one, with what to tell the task), {@link ChannelEnvironment.discardLink}
 * and {@link ChannelEnvironment.releaseLink}, and optionally a staleness
 * test, work after a replacement and after each command.
 */
import type { Logger } from '../../../common/logging.js';
import type {
  BackendEnvironment,
  BackgroundHandle,
  BackgroundOptions,
  ExecOptions,
  ExecResult,
  FileStat,
  RpcRelay,
} from '../../backend.js';
import { awaitForeground, backgroundHandle, spawnOptionsOf } from './channel-commands.js';
import { assertAbsolute, assertNotReleased } from './guards.js';
import { LiveLink, type ChannelLink, type RelayingChannel, type ReplaceCause, type Replacement } from './live-link.js';
import type { ProcessExit, SandboxChannel } from './sandbox-channel.js';

export type { ChannelLink, RelayingChannel, ReplaceCause, Replacement } from './live-link.js';

/**
 * The replacement for a lost agent when the sandbox itself stays (a new
 * agent in the same instance or directory): files are kept, background
 * processes the old agent ran are no longer tracked, and the task is told so.
 */
export function newAgentReplacement<C extends SandboxChannel>(
  description: string,
  channel: C,
  cause: ReplaceCause,
): Replacement<ChannelLink<C>> {
  const during = cause.kind === 'lost' && cause.duringCommand ? ' while a command ran' : '';
  return {
    link: { channel },
    recreated: false,
    notices: [
      `The exec agent in ${description} went away${during}; a new one was started: ` +
        'background processes started before are no longer tracked.',
    ],
  };
}

/** How a notice about a dropped stream names the agent and what was kept. */
export interface DroppedStreamWords {
  /** e.g. `the exec agent in docker:NAME`. */
  readonly agent: string;
  /** e.g. `background processes were kept`. */
  readonly kept: string;
}

export interface ChannelEnvironmentSettings {
  /** Between SIGTERM and SIGKILL of a process group, unless a call says otherwise. */
  readonly killGraceMs: number;
  readonly logger: Logger | undefined;
}

export abstract class ChannelEnvironment<L extends ChannelLink> implements BackendEnvironment {
  abstract readonly description: string;
  abstract readonly homeDir: string;
  abstract readonly initialCwd: string;
  abstract readonly stateDir: string;

  readonly #settings: ChannelEnvironmentSettings;
  readonly #live: LiveLink<L>;
  readonly #notices: string[] = [];
  #recreated = false;
  #disposing: Promise<void> | undefined;

  protected constructor(link: L, settings: ChannelEnvironmentSettings) {
    this.#settings = settings;
    this.#live = new LiveLink(this, link, {
      replace: (old, cause) => this.replaceLink(old, cause),
      discard: (next) => this.discardLink(next),
      adopted: async (replacement) => {
        if (replacement.recreated) this.#recreated = true;
        this.#notices.push(...replacement.notices);
        await this.adopted(replacement);
      },
      isStale: (current) => this.isStale(current),
    });
  }

  // --- what a backend supplies -------------------------------------------------

  /**
   * Makes a new link in place of `old` (its channel already failed to
   * recover, or it is stale): start or find the sandbox again, start an
   * agent in it. Call {@link assertLive} before making anything new, so a
   * release under way is not raced. Throws when no new link can be made.
   */
  protected abstract replaceLink(old: L, cause: ReplaceCause): Promise<Replacement<L>>;

  /** Undoes a replacement that finished after the release began (the environment will not use it). */
  protected abstract discardLink(link: L): Promise<void>;

  /** Releases the current link for good (the environment is disposed). */
  protected abstract releaseLink(link: L): Promise<void>;

  /** True when a live link must be renewed before it is used (e.g. its sandbox nears a lifetime limit). */
  protected isStale(_link: L): boolean {
    return false;
  }

  /** Runs once a replacement became the current link (its notices already queued). */
  protected async adopted(_replacement: Replacement<L>): Promise<void> {}

  /** Runs after a foreground command exited normally on `link` (e.g. to notice a limit that killed it). */
  protected async afterCommand(_link: L, _exit: ProcessExit, _result: ExecResult): Promise<void> {}

  /** How the notice about a stream dropped under a command names the agent and what was kept. */
  protected droppedStreamWords(_link: L): DroppedStreamWords {
    return { agent: `the exec agent in ${this.description}`, kept: 'background processes were kept' };
  }

  // --- what a backend may use ---------------------------------------------------

  /** The current link (it may be lost; operations go through {@link withChannel}). */
  protected get link(): L {
    return this.#live.link;
  }

  protected get logger(): Logger | undefined {
    return this.#settings.logger;
  }

  /** Throws once the environment is being (or was) released. */
  protected assertLive(): void {
    assertNotReleased(this, this.#disposing);
  }

  /**
   * Suspends the environment with `stop` (the backend's) on the current
   * link, once a replacement under way is done. Nothing may use the
   * environment until {@link resumeLink}.
   */
  protected async suspendLink<T>(stop: (link: L) => Promise<T>): Promise<T> {
    this.assertLive();
    return stop(await this.#live.settled());
  }

  /** Resumes a suspended environment: `start` brings the sandbox back and its link becomes the current one. */
  protected async resumeLink(start: (suspended: L) => Promise<L>): Promise<void> {
    this.assertLive();
    this.#live.link = await start(this.#live.link);
  }

  /** Runs `fn` on the live channel; once more on a new link when the old one was lost before `fn` got anywhere. */
  protected async withChannel<T>(fn: (channel: L['channel']) => Promise<T>): Promise<T> {
    this.assertLive();
    return this.#live.withLink((link) => fn(link.channel));
  }

  /**
   * execute_code's socket inside the sandbox, under `sandboxDir`, relayed by
   * the agent over the current link's stream (so the script's open() sees
   * the files its terminal() calls wrote).
   */
  protected relayIn(this: ChannelEnvironment<ChannelLink<RelayingChannel>>, sandboxDir: string): RpcRelay {
    return this.#live.relay(sandboxDir, () => this.assertLive());
  }

  // --- the BackendEnvironment ---------------------------------------------------

  /** Notices gathered since the last call (a replaced sandbox, a dropped stream, a limit that killed a command). */
  takeNotices(): string[] {
    return this.#notices.splice(0);
  }

  /** Whether a new sandbox replaced the old one since the last call. */
  takeRecreated(): boolean {
    const recreated = this.#recreated;
    this.#recreated = false;
    return recreated;
  }

  /** Adds a notice for the next result (the backend's word on how the environment began, a limit that was hit). */
  addNotice(text: string): void {
    this.#notices.push(text);
  }

  async exec(options: ExecOptions): Promise<ExecResult> {
    this.assertLive();
    // A sandbox being replaced may take long (a new container, a cloud sandbox): an interrupt ends the
    // wait and the command never starts; the replacement goes on for the task's next call.
    const start = await this.#live.startCommand(options, this.initialCwd, this.#settings.logger);
    if ('ended' in start) return start.ended;
    const { link, proc } = start;
    const outcome = await awaitForeground(proc, options, this.#settings.killGraceMs);
    if (outcome.exit) {
      await this.afterCommand(link, outcome.exit, outcome.result);
      return outcome.result;
    }
    // The sandbox (or only the stream to its agent) went away under the command: nothing of it runs any more.
    if (this.#disposing) throw outcome.lost;
    if (await link.channel.recover?.()) {
      const words = this.droppedStreamWords(link);
      this.#notices.push(
        `The connection to ${words.agent} dropped while the command ran; the command was stopped (${words.kept}).`,
      );
      return outcome.deadline.result(137);
    }
    await this.#live.replace(link, { kind: 'lost', duringCommand: true });
    return outcome.deadline.result(137);
  }

  async startBackground(options: BackgroundOptions): Promise<BackgroundHandle> {
    this.assertLive();
    const { logger, killGraceMs } = this.#settings;
    const spawn = spawnOptionsOf(options, this.initialCwd, logger, { keepStdin: true, background: true });
    const proc = await this.withChannel((channel) => channel.spawn(spawn));
    return backgroundHandle(proc, options, killGraceMs, logger);
  }

  readFile(absPath: string): Promise<Buffer> {
    assertAbsolute(absPath);
    return this.withChannel((channel) => channel.readFile(absPath));
  }

  writeFile(absPath: string, data: Uint8Array): Promise<void> {
    assertAbsolute(absPath);
    return this.withChannel((channel) => channel.writeFile(absPath, data));
  }

  async stat(absPath: string): Promise<FileStat> {
    assertAbsolute(absPath);
    const s = await this.withChannel((channel) => channel.stat(absPath));
    return { exists: s.exists, isDirectory: s.isDirectory, sizeBytes: s.sizeBytes };
  }

  dispose(): Promise<void> {
    this.#disposing ??= (async () => {
      this.#live.release();
      await this.releaseLink(await this.#live.settled());
    })();
    return this.#disposing;
  }
}

/** What a link knows of its sandbox's places, for backends whose sandbox (and so those places) a new link may change. */
export interface PlacedLink {
  readonly description: string;
  readonly homeDir: string;
  readonly initialCwd: string;
  readonly stateDir: string;
}

/** A {@link ChannelEnvironment} whose description and places are those of its current link. */
export abstract class PlacedChannelEnvironment<L extends ChannelLink & PlacedLink> extends ChannelEnvironment<L> {
  get description(): string {
    return this.link.description;
  }
  get homeDir(): string {
    return this.link.homeDir;
  }
  get initialCwd(): string {
    return this.link.initialCwd;
  }
  get stateDir(): string {
    return this.link.stateDir;
  }
}
