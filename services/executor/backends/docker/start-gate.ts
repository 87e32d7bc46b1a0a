/**
 * How many containers this executor has the Docker engine create and start
 * at once (`docker.start_concurrency`). Twenty starts asked together on two
 * cores all come up near the end of the burst, since the engine and the
 * CPUs share themselves among them; two at a time come up one after another,
 * so most of a burst's first calls return sooner (measured in
 * docs/performance.md, "A start gate"). Tasks' starts go before the warm
 * pool's, each in arrival order.
 */

/** Who is starting a container: a task waiting for its call, or the warm pool filling ahead. */
export type StartPriority = 'task' | 'pool';

interface Waiter {
  readonly grant: () => void;
}

export class StartGate {
  readonly #limit: () => Promise<number>;
  #resolved: number | undefined;
  #running = 0;
  readonly #waiting: Record<StartPriority, Waiter[]> = { task: [], pool: [] };

  /** `limit`: how many at once, asked once before the first start (e.g. from the engine's CPU count). */
  constructor(limit: () => Promise<number>) {
    this.#limit = limit;
  }

  /** Starts running now. */
  get running(): number {
    return this.#running;
  }

  /** Starts waiting for a slot. */
  get waiting(): number {
    return this.#waiting.task.length + this.#waiting.pool.length;
  }

  /**
   * Resolves with the release of a slot once one is free; call it when the
   * start is done (it frees the slot once, however often it is called). An
   * abort of `signal` while waiting rejects with its reason and takes no slot.
   */
  async acquire(priority: StartPriority, signal?: AbortSignal): Promise<() => void> {
    await this.#acquire(priority, signal);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#release();
    };
  }

  async #acquire(priority: StartPriority, signal: AbortSignal | undefined): Promise<void> {
    signal?.throwIfAborted();
    // A failed lookup is asked again by the next start; until one answers, starts are not held back.
    this.#resolved ??= await this.#limit().catch(() => undefined);
    if (this.#resolved === undefined || this.#running < this.#resolved) {
      this.#running++;
      return;
    }
    await new Promise<void>((resolve, reject) => {
      const queue = this.#waiting[priority];
      const onAbort = () => {
        const at = queue.indexOf(waiter);
        if (at >= 0) queue.splice(at, 1);
        reject(signal!.reason);
      };
      // #release counts the slot as taken before granting it, so no start can slip in between.
      const waiter: Waiter = {
        grant: () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        },
      };
      queue.push(waiter);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  #release(): void {
    const next = this.#waiting.task.shift() ?? this.#waiting.pool.shift();
    if (next) next.grant();
    else this.#running--;
  }
}
