/**
 * A task's environment on a sandbox reached through a {@link SandboxChannel}
 * (the exec agent over a socket or a stream, or a fallback channel), the
 * same for every backend built that way: docker, modal, daytona,
 * singularity, and any other whose sandbox the executor reaches the same way.
 *
 * The environment holds a link: the channel and whatever the backend keeps
 * beside it (a container, a cloud sandbox, a pod). Everything that is not
 * about how that link is made lives here once:
 * - readiness: a lost channel (or a link the backend calls stale) is
 *   replaced before the next operation, by one replacement however many
 *   callers noticed;
 * - a dropped stream is first given back to the channel (`recover()`: the
 *   agent lingered and was found again, same sandbox, background processes
 *   kept); only when that fails is the link replaced;
 * - each operation runs once more on the new link when the old one was lost
 *   before it got anywhere;
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
import type { Duplex } from 'node:stream';
import type { Logger } from '../../../common/logging.js';
import type {
  BackendEnvironment,
  BackgroundHandle,
  BackgroundOptions,
  ExecOptions,
  ExecResult,
  FileStat,
  RelayedSocket,
  RpcRelay,
} from '../../backend.js';
import { awaitForeground, backgroundHandle, spawnOptionsOf } from './channel-commands.js';
import { InterruptedBeforeStartError, unlessAborted } from '../../../common/interrupts.js';
import { INTERRUPTED_BEFORE_START, interruptedBeforeStart } from './exec-deadline.js';
import { assertAbsolute, assertNotReleased } from './guards.js';
import { SandboxLostError, type ProcessExit, type SandboxChannel } from './sandbox-channel.js';

/** What an environment holds of its sandbox: at least the channel into it. */
export interface ChannelLink<C extends SandboxChannel = SandboxChannel> {
  readonly channel: C;
}

/** A channel that can relay a Unix socket inside the sandbox over its stream (the exec agent's). */
export interface RelayingChannel extends SandboxChannel {
  listen(socketPath: string, onConnection: (socket: Duplex) => void): Promise<RelayedSocket>;
}

/** Why a link is replaced. */
export type ReplaceCause =
  /** Its channel is lost for good (recovery failed); `duringCommand`: a foreground command was running on it. */
  | { readonly kind: 'lost'; readonly duringCommand: boolean }
  /** The backend said the live link must be renewed ({@link ChannelEnvironment.isStale}). */
  | { readonly kind: 'stale' };

/** A link made in place of an old one, and what the task is told about it. */
export interface Replacement<L> {
  readonly link: L;
  /** Handed out with the next result, in this order. */
  readonly notices: readonly string[];
  /**
   * The sandbox itself is new (not only the channel into it): background
   * processes and files outside persisted paths may be gone
   * ({@link BackendEnvironment.takeRecreated}).
   */
  readonly recreated: boolean;
}

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
  #link: L;
  #replacing: Promise<L> | undefined;
  readonly #notices: string[] = [];
  #recreated = false;
  #disposing: Promise<void> | undefined;

  protected constructor(link: L, settings: ChannelEnvironmentSettings) {
    this.#link = link;
    this.#settings = settings;
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
    return this.#link;
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
    await this.#replacing?.catch(() => undefined);
    return stop(this.#link);
  }

  /** Resumes a suspended environment: `start` brings the sandbox back and its link becomes the current one. */
  protected async resumeLink(start: (suspended: L) => Promise<L>): Promise<void> {
    this.assertLive();
    this.#link = await start(this.#link);
  }

  /** Runs `fn` on the live channel; once more on a new link when the old one was lost before `fn` got anywhere. */
  protected async withChannel<T>(fn: (channel: L['channel']) => Promise<T>): Promise<T> {
    const link = await this.#ready();
    try {
      return await fn(link.channel);
    } catch (err) {
      if (!(err instanceof SandboxLostError) || this.#disposing) throw err;
      const next = await this.#replace(link, { kind: 'lost', duringCommand: false });
      return fn(next.channel);
    }
  }

  /**
   * execute_code's socket inside the sandbox, under `sandboxDir`, relayed by
   * the agent over the current link's stream (so the script's open() sees
   * the files its terminal() calls wrote).
   */
  protected relayIn(this: ChannelEnvironment<ChannelLink<RelayingChannel>>, sandboxDir: string): RpcRelay {
    return {
      sandboxDir,
      listen: async (socketPath, onConnection) => {
        this.assertLive();
        return this.withChannel((channel) => channel.listen(socketPath, onConnection));
      },
    };
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
    const early = interruptedBeforeStart(options);
    if (early) return early;
    const { logger, killGraceMs } = this.#settings;
    const stdin = options.stdin !== undefined ? { stdin: options.stdin } : {};
    const spawn = (on: L) => on.channel.spawn(spawnOptionsOf(options, this.initialCwd, logger, stdin));
    // A sandbox being replaced may take long (a new container, a cloud sandbox): an interrupt ends the
    // wait and the command never starts; the replacement goes on for the task's next call.
    const untilReady = (ready: Promise<L>) =>
      unlessAborted(ready, options.signal, 'the command').catch((err: unknown) => {
        if (err instanceof InterruptedBeforeStartError) return undefined;
        throw err;
      });
    let link = await untilReady(this.#ready());
    if (link === undefined || options.signal?.aborted) return INTERRUPTED_BEFORE_START;
    let proc;
    try {
      proc = await spawn(link);
    } catch (err) {
      if (!(err instanceof SandboxLostError) || this.#disposing) throw err;
      link = await untilReady(this.#replace(link, { kind: 'lost', duringCommand: false }));
      if (link === undefined || options.signal?.aborted) return INTERRUPTED_BEFORE_START;
      proc = await spawn(link);
    }
    const outcome = await awaitForeground(proc, options, killGraceMs);
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
    await this.#replace(link, { kind: 'lost', duringCommand: true });
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
      await this.#replacing?.catch(() => undefined);
      await this.releaseLink(this.#link);
    })();
    return this.#disposing;
  }

  // --- readiness and replacement ------------------------------------------------

  /** The current link: replaced first if its channel was lost, or renewed if stale. */
  async #ready(): Promise<L> {
    this.assertLive();
    if (this.#replacing) return this.#replacing;
    const link = this.#link;
    if (link.channel.isLost) return this.#replace(link, { kind: 'lost', duringCommand: false });
    if (this.isStale(link)) return this.#replace(link, { kind: 'stale' });
    return link;
  }

  /** Replaces `old` (once, however many callers noticed); resolves to the link to use. */
  #replace(old: L, cause: ReplaceCause): Promise<L> {
    if (this.#link !== old && !this.#replacing) return Promise.resolve(this.#link);
    this.#replacing ??= (async () => {
      // A dropped stream whose agent was found again: same sandbox, background processes kept.
      if (cause.kind === 'lost' && (await old.channel.recover?.())) return old;
      const replacement = await this.replaceLink(old, cause);
      if (this.#disposing) {
        await this.discardLink(replacement.link);
        this.assertLive();
      }
      this.#link = replacement.link;
      if (replacement.recreated) this.#recreated = true;
      this.#notices.push(...replacement.notices);
      await this.adopted(replacement);
      return replacement.link;
    })().finally(() => {
      this.#replacing = undefined;
    });
    return this.#replacing;
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
