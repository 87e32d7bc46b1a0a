/**
 * Started containers kept ready (agent connected) for tasks that do not have
 * one yet, so a new task's first call skips the cold start. Claiming takes a
 * ready container at once; refilling runs in the background, one container
 * at a time, backing off while Docker fails (say, the daemon is down).
 *
 * Refilling starts a moment after a claim, not at once: starting a container
 * keeps dockerd and containerd busy for about a second of CPU, and on a small
 * machine that would land on the claimed container's first commands, the
 * very calls the pool is there to make fast.
 */
import type { Logger } from '../../../common/logging.js';
import { AgentChannel } from '../shared/agent/agent-channel.js';
import type { SandboxContainer } from './sandbox-container.js';

export interface WarmPoolOptions {
  /** Containers to keep ready. */
  readonly size: number;
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

  constructor(options: WarmPoolOptions) {
    this.#o = options;
  }

  get size(): number {
    return this.#o.size;
  }

  /** Containers ready to be claimed right now. */
  get readyCount(): number {
    return this.#ready.length;
  }

  /** Starts filling in the background. */
  start(): void {
    this.#fill();
  }

  /** A ready container, or undefined when none is (the caller starts one itself). */
  take(): SandboxContainer | undefined {
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
    if (this.#ready.length >= this.#o.size || this.#closed) return Promise.resolve();
    return new Promise<void>((resolve) => this.#waiters.push(resolve));
  }

  /** Stops refilling and removes every ready container. */
  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#retryTimer);
    clearTimeout(this.#refillTimer);
    await this.#filling?.catch(() => undefined);
    const ready = this.#ready.splice(0);
    await Promise.all(ready.map((c) => c.remove().catch(() => undefined)));
    for (const w of this.#waiters.splice(0)) w();
  }

  #scheduleRefill(): void {
    if (this.#closed || this.#refillTimer) return;
    this.#refillTimer = setTimeout(() => {
      this.#refillTimer = undefined;
      this.#fill();
    }, this.#o.refillDelayMs ?? DEFAULT_REFILL_DELAY_MS);
    this.#refillTimer.unref();
  }

  #fill(): void {
    if (this.#closed || this.#filling || this.#retryTimer) return;
    if (this.#ready.length >= this.#o.size) return;
    this.#filling = (async () => {
      while (!this.#closed && this.#ready.length < this.#o.size) {
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
        if (this.#ready.length >= this.#o.size) for (const w of this.#waiters.splice(0)) w();
      }
    })()
      .then(() => {
        this.#filling = undefined;
        // A claim may have come in after the loop's last check.
        this.#fill();
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
