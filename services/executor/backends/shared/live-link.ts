/**
 * The link an environment holds to its sandbox (the channel into it and
 * whatever the backend keeps beside it), kept live:
 * - a lost link (or one the backend calls stale) is replaced before the next
 *   operation, by one replacement however many callers noticed; a dropped
 *   stream is first given back to the channel (`recover()`);
 * - an operation whose channel was lost before it got anywhere runs once
 *   more on the new link;
 * - a command's start waits for a replacement under way, and an interrupt
 *   ends that wait: the command never starts;
 * - once released, no operation is retried and a replacement that finishes
 *   is undone.
 *
 * {@link ChannelEnvironment} is built on it; an environment that reaches its
 * sandbox through a channel only some of the time (ssh's exec agent, absent
 * on a host without python3) holds one directly.
 */
import type { Duplex } from 'node:stream';
import { InterruptedBeforeStartError, unlessAborted } from '../../../common/interrupts.js';
import type { Logger } from '../../../common/logging.js';
import type { ExecOptions, ExecResult, RelayedSocket, RpcRelay } from '../../backend.js';
import { spawnOptionsOf } from './channel-commands.js';
import { INTERRUPTED_BEFORE_START, interruptedBeforeStart } from './exec-deadline.js';
import { assertNotReleased } from './guards.js';
import { SandboxLostError, type SandboxChannel, type SandboxProcess } from './sandbox-channel.js';

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
  /** The backend said the live link must be renewed ({@link LinkRenewal.isStale}). */
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

/** How a link is renewed: the holder's transport and lifecycle. */
export interface LinkRenewal<L> {
  /** Makes a new link in place of `old` (its channel failed to recover, or it is stale); throws when none can be made. */
  replace(old: L, cause: ReplaceCause): Promise<Replacement<L>>;
  /** Undoes a replacement that finished after the release began. */
  discard(link: L): Promise<void>;
  /** Runs once a replacement became the current link. */
  adopted?(replacement: Replacement<L>): Promise<void>;
  /** True when a live link must be renewed before it is used. */
  isStale?(link: L): boolean;
}

/** A foreground command started on a link, or the result it had before it started (an interrupt, no time left). */
export type CommandStart<L> = { readonly link: L; readonly proc: SandboxProcess } | { readonly ended: ExecResult };

export class LiveLink<L extends ChannelLink> {
  readonly #owner: { readonly description: string };
  readonly #renewal: LinkRenewal<L>;
  #link: L;
  #replacing: Promise<L> | undefined;
  #released = false;

  /** `owner` names the environment in the error of a replacement that finished after the release. */
  constructor(owner: { readonly description: string }, link: L, renewal: LinkRenewal<L>) {
    this.#owner = owner;
    this.#link = link;
    this.#renewal = renewal;
  }

  /** The current link (it may be lost; operations go through {@link withLink}). */
  get link(): L {
    return this.#link;
  }

  /** Makes `link` the current one (a suspended sandbox resumed). */
  set link(link: L) {
    this.#link = link;
  }

  /** The current link: replaced first if its channel was lost, or renewed if stale. */
  ready(): Promise<L> {
    if (this.#replacing) return this.#replacing;
    const link = this.#link;
    if (link.channel.isLost) return this.replace(link, { kind: 'lost', duringCommand: false });
    if (this.#renewal.isStale?.(link)) return this.replace(link, { kind: 'stale' });
    return Promise.resolve(link);
  }

  /** Replaces `old` (once, however many callers noticed); resolves to the link to use. */
  replace(old: L, cause: ReplaceCause): Promise<L> {
    if (this.#link !== old && !this.#replacing) return Promise.resolve(this.#link);
    this.#replacing ??= (async () => {
      // A dropped stream whose agent was found again: same sandbox, background processes kept.
      if (cause.kind === 'lost' && (await old.channel.recover?.())) return old;
      const replacement = await this.#renewal.replace(old, cause);
      if (this.#released) {
        await this.#renewal.discard(replacement.link);
        assertNotReleased(this.#owner, true);
      }
      this.#link = replacement.link;
      await this.#renewal.adopted?.(replacement);
      return replacement.link;
    })().finally(() => {
      this.#replacing = undefined;
    });
    return this.#replacing;
  }

  /**
   * Runs `fn` on the live link; once more on a new link when the old one was
   * lost before `fn` got anywhere. An abort of `signal` while a link is
   * waited for ends the call with an {@link InterruptedBeforeStartError}.
   */
  async withLink<T>(fn: (link: L) => Promise<T>, signal?: AbortSignal): Promise<T> {
    const link = await reached(this.ready(), signal);
    try {
      return await fn(link);
    } catch (err) {
      if (!(err instanceof SandboxLostError) || this.#released) throw err;
      return fn(await reached(this.replace(link, { kind: 'lost', duringCommand: false }), signal));
    }
  }

  /**
   * Starts a foreground command (exec) on the live channel in `cwd`, through
   * {@link withLink}: one that an interrupt or its deadline ended before it
   * started is not started.
   */
  async startCommand(options: ExecOptions, cwd: string, logger: Logger | undefined): Promise<CommandStart<L>> {
    const early = interruptedBeforeStart(options);
    if (early) return { ended: early };
    const stdin = options.stdin !== undefined ? { stdin: options.stdin } : {};
    const spawn = spawnOptionsOf(options, cwd, logger, stdin);
    return this.withLink(async (link) => ({ link, proc: await link.channel.spawn(spawn) }), options.signal).catch(
      (err: unknown) => {
        if (err instanceof InterruptedBeforeStartError) return { ended: INTERRUPTED_BEFORE_START };
        throw err;
      },
    );
  }

  /**
   * execute_code's socket under `sandboxDir`, relayed by the live link's
   * channel over its stream (so the script's open() sees the files its
   * terminal() calls wrote); `assertLive` refuses a released environment.
   */
  relay(this: LiveLink<ChannelLink<RelayingChannel>>, sandboxDir: string, assertLive: () => void): RpcRelay {
    return {
      sandboxDir,
      listen: async (socketPath, onConnection) => {
        assertLive();
        return this.withLink((link) => link.channel.listen(socketPath, onConnection));
      },
    };
  }

  /** From now on nothing is retried and a replacement that finishes is undone (the holder is being released). */
  release(): void {
    this.#released = true;
  }

  /** The current link once a replacement under way is done. */
  async settled(): Promise<L> {
    await this.#replacing?.catch(() => undefined);
    return this.#link;
  }
}

/** `ready` once it resolves, unless `signal` aborted first (an {@link InterruptedBeforeStartError}). */
async function reached<L>(ready: Promise<L>, signal: AbortSignal | undefined): Promise<L> {
  const link = await unlessAborted(ready, signal, 'the command');
  if (signal?.aborted) throw new InterruptedBeforeStartError('the command');
  return link;
}
