/**
 * Whether an exec agent still answers. Only asked while something waits
 * for it (a request's reply, a spawn's `started`): an agent that runs a
 * quiet command may rightly say nothing for hours.
 */

/**
 * Once something has waited this long with nothing at all heard from the
 * agent, it is sent a ping...
 */
export const LIVENESS_PROBE_AFTER_MS = 5_000;
/**
 * ...and when it stays silent this long after that, it is stopped or
 * wedged, or its stream stalled (a live agent answers a ping between any
 * two operations, even while it waits for a process group to die): the
 * stream counts as dropped, the agent is looked for again where the
 * backend can do that, and otherwise (or when it is not found) the channel
 * is lost and the backend replaces the sandbox as it does a dead one. This
 * bounds what a wedged agent costs the next call, where the answer deadline
 * alone would let a spawn wait for its `started` without end.
 */
export const LIVENESS_TIMEOUT_MS = 15_000;

export interface LivenessOptions {
  readonly probeAfterMs: number;
  readonly timeoutMs: number;
  /** Whether anything waits for the agent now (the watchdog stops when nothing does). */
  readonly isWaiting: () => boolean;
  /** Sends the ping (its pong, like any frame, counts as heard). */
  readonly probe: () => void;
  /** The agent stayed silent past the probe: `silentMs` since anything was heard. */
  readonly onSilent: (silentMs: number) => void;
}

export class LivenessWatchdog {
  readonly #o: LivenessOptions;
  #timer: NodeJS.Timeout | undefined;
  /** Since when nothing was heard (or since the watchdog started: silence before anyone waited is no sign). */
  #quietSinceMs = 0;
  /** When the ping went out, while it is unanswered. */
  #probeSentMs: number | undefined;

  constructor(options: LivenessOptions) {
    this.#o = options;
  }

  /** Something began to wait for the agent: watch it, unless already watching. */
  arm(): void {
    if (this.#timer) return;
    this.#quietSinceMs = Date.now();
    this.#probeSentMs = undefined;
    const { probeAfterMs, timeoutMs } = this.#o;
    this.#timer = setInterval(() => this.#check(), Math.max(10, Math.min(probeAfterMs, timeoutMs) / 4));
    this.#timer.unref();
  }

  /** A frame arrived: the agent lives. */
  heard(): void {
    this.#quietSinceMs = Date.now();
    this.#probeSentMs = undefined;
  }

  disarm(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.#probeSentMs = undefined;
  }

  #check(): void {
    if (!this.#o.isWaiting()) {
      this.disarm();
      return;
    }
    const now = Date.now();
    if (this.#probeSentMs === undefined) {
      if (now - this.#quietSinceMs < this.#o.probeAfterMs) return;
      this.#probeSentMs = now;
      this.#o.probe();
      return;
    }
    if (now - this.#probeSentMs < this.#o.timeoutMs) return;
    const silentMs = now - this.#quietSinceMs;
    this.disarm();
    this.#o.onSilent(silentMs);
  }
}
