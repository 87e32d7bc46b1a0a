/**
 * Started containers kept ready (agent connected) for tasks that do not have
 * one yet, so a new task's first call skips the cold start. Claiming takes a
 * ready container at once; refilling runs in the background, one container
 * at a time, backing off while Docker fails (say, the daemon is down).
 *
 * Adaptive (`docker.warm_pool_max`): the pool grows to as many containers as
 * new tasks arrived in the last window, so the next burst like the last one
 * is served from it, as far as its memory budget and the executor's memory
 * admission allow; it shrinks back to `docker.warm_pool` as those arrivals
 * age out of the window.
 *
 * Refilling starts a moment after a claim, not at once: starting a container
 * keeps dockerd and containerd busy for about a second of CPU, and on a small
 * machine that would land on the claimed container's first commands, the
 * very calls the pool is there to make fast.
 */
import type { Logger } from '../../../common/logging.js';
import { outsideStageSpans } from '../../../common/tracing/stage-spans.js';
import { AgentChannel } from '../shared/agent/agent-channel.js';
import type { SandboxContainer } from './sandbox-container.js';

export interface WarmPoolOptions {
  /** Containers to keep ready at the least. */
  readonly size: number;
  /**
   * Adaptive sizing (`docker.warm_pool_max`): the pool keeps as many ready
   * containers as new tasks arrived in the last `windowMs`, between `size`
   * and `max`. Absent, or not above `size`: a fixed pool of `size`.
   */
  readonly adaptive?: { readonly max: number; readonly windowMs: number };
  /**
   * Whether one more container may be started beyond `size` now (a memory
   * budget, the executor's memory admission); the `size` containers are
   * always started. Default: always.
   */
  readonly mayGrow?: (ready: number) => Promise<boolean>;
  readonly create: () => Promise<SandboxContainer>;
  readonly logger: Logger;
  /** First delay after a failed creation; doubles up to 30 s. Default 1000 ms. */
  readonly retryDelayMs?: number;
  /** Delay between a claim and the refill it causes. Default {@link DEFAULT_REFILL_DELAY_MS}. */
  readonly refillDelayMs?: number;
}

export const DEFAULT_REFILL_DELAY_MS = 1000;

export class WarmPool {
  readonly #o: WarmPoolOptions;
  readonly #ready: SandboxContainer[] = [];
  #filling: Promise<void> | undefined;
  #closed = false;
  #failures = 0;
  #retryTimer: NodeJS.Timeout | undefined;
  #refillTimer: NodeJS.Timeout | undefined;
  readonly #waiters: (() => void)[] = [];
  /** When new tasks asked for a container (claims and misses alike), oldest first, within the adaptive window. */
  readonly #arrivals: number[] = [];
  #trimTimer: NodeJS.Timeout | undefined;
  /** A claim came while a fill ran: the fill looks again when it ends. */
  #claimedWhileFilling = false;

  constructor(options: WarmPoolOptions) {
    this.#o = options;
  }

  /** The least the pool keeps ready. */
  get size(): number {
    return this.#o.size;
  }

  /** How many ready containers the pool aims at now: {@link adaptiveTarget} of the recent arrivals. */
  get target(): number {
    const adaptive = this.#o.adaptive;
    if (!adaptive || adaptive.max <= this.#o.size) return this.#o.size;
    const since = Date.now() - adaptive.windowMs;
    while (this.#arrivals.length > 0 && this.#arrivals[0]! < since) this.#arrivals.shift();
    return adaptiveTarget(this.#arrivals.length, this.#o.size, adaptive.max);
  }

  /** Containers ready to be claimed right now. */
  get readyCount(): number {
    return this.#ready.length;
  }

  /** Starts filling in the background (and, when adaptive, shrinking back as arrivals age out). */
  start(): void {
    this.#fill();
    const adaptive = this.#o.adaptive;
    if (adaptive && adaptive.max > this.#o.size) {
      this.#trimTimer = setInterval(() => this.#trim(), Math.max(250, Math.floor(adaptive.windowMs / 4)));
      this.#trimTimer.unref();
    }
  }

  /** A ready container, or undefined when none is (the caller starts one itself). */
  take(): SandboxContainer | undefined {
    if (this.#o.adaptive) {
      this.#arrivals.push(Date.now());
      // Bounded: no window needs more arrivals than the pool may ever hold.
      if (this.#arrivals.length > this.#o.adaptive.max) this.#arrivals.shift();
    }
    if (this.#filling) this.#claimedWhileFilling = true;
    let container: SandboxContainer | undefined;
    while ((container = this.#ready.shift())) {
      if (!container.channel.isLost) break;
      void container.remove().catch(() => undefined);
    }
    this.#scheduleRefill();
    return container;
  }

  /** Resolves once the pool holds `size` ready containers (for tests and benchmarks). */
  whenFull(): Promise<void> {
    if (this.#ready.length >= this.target || this.#closed) return Promise.resolve();
    return new Promise<void>((resolve) => this.#waiters.push(resolve));
  }

  /** Stops refilling and removes every ready container. */
  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#trimTimer);
    clearTimeout(this.#retryTimer);
    clearTimeout(this.#refillTimer);
    await this.#filling?.catch(() => undefined);
    const ready = this.#ready.splice(0);
    await Promise.all(ready.map((c) => c.remove().catch(() => undefined)));
    for (const w of this.#waiters.splice(0)) w();
  }

  #scheduleRefill(): void {
    if (this.#closed || this.#refillTimer) return;
    // A claim in a traced call schedules this: the refill's starts are not that call's steps.
    this.#refillTimer = outsideStageSpans(() =>
      setTimeout(() => {
        this.#refillTimer = undefined;
        this.#fill();
      }, this.#o.refillDelayMs ?? DEFAULT_REFILL_DELAY_MS),
    );
    this.#refillTimer.unref();
  }

  /** Removes ready containers above the target, oldest first, once the arrivals that called for them aged out. */
  #trim(): void {
    const target = this.target;
    while (this.#ready.length > target) {
      const container = this.#ready.shift()!;
      void container.remove().catch(() => undefined);
    }
  }

  /** Whether the pool should start one more container now. */
  async #wantsMore(): Promise<boolean> {
    const ready = this.#ready.length;
    if (ready >= this.target) return false;
    return ready < this.#o.size || (await (this.#o.mayGrow?.(ready) ?? Promise.resolve(true)));
  }

  #fill(): void {
    if (this.#closed || this.#filling || this.#retryTimer) return;
    if (this.#ready.length >= this.target) return;
    this.#claimedWhileFilling = false;
    this.#filling = (async () => {
      while (!this.#closed && (await this.#wantsMore())) {
        const container = await this.#o.create();
        if (this.#closed) {
          await container.remove().catch(() => undefined);
          return;
        }
        this.#failures = 0;
        this.#ready.push(container);
        if (container.channel instanceof AgentChannel) {
          // A pool container whose agent dies is no use: drop it and make another.
          container.channel.onLost(() => {
            const at = this.#ready.indexOf(container);
            if (at < 0) return;
            this.#ready.splice(at, 1);
            void container.remove().catch(() => undefined);
            this.#fill();
          });
        }
        if (this.#ready.length >= this.target) for (const w of this.#waiters.splice(0)) w();
      }
    })()
      .then(() => {
        this.#filling = undefined;
        // A claim may have come in after the loop's last check. (A pool that mayGrow held back waits for the next claim.)
        if (this.#claimedWhileFilling || this.#ready.length < this.#o.size) this.#fill();
      })
      .catch((err: unknown) => {
        this.#filling = undefined;
        this.#failures += 1;
        const delay = Math.min(30_000, (this.#o.retryDelayMs ?? 1000) * 2 ** Math.min(this.#failures - 1, 5));
        this.#o.logger.warn({ err, retryInMs: delay }, 'warm pool: starting a container failed');
        this.#retryTimer = setTimeout(() => {
          this.#retryTimer = undefined;
          this.#fill();
        }, delay);
        this.#retryTimer.unref();
      });
  }
}

/**
 * The adaptive pool's size: as many ready containers as new tasks arrived
 * in the last window (a burst like the last one is then served from the
 * pool), at least `min`, at most `max`.
 */
export function adaptiveTarget(recentArrivals: number, min: number, max: number): number {
  return Math.max(min, Math.min(max, recentArrivals));
}
