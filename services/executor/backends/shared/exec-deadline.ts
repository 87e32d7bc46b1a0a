/**
 * The timeout and the interrupt of one exec, the same on every backend: when
 * `timeoutMs` passes the run is marked timed out, when the signal aborts it
 * is marked interrupted (unless it timed out first), and either way `kill`
 * is called; the backend reports 124 or 130 (see {@link ExecDeadline.exitCode}).
 */
import type { ExecOptions, ExecResult } from '../../backend.js';

/** setTimeout fires at once for delays beyond 2^31-1 ms; clamp instead. */
const MAX_TIMER_MS = 2 ** 31 - 1;

export class ExecDeadline {
  #timedOut = false;
  #interrupted = false;
  readonly #timer: NodeJS.Timeout;
  readonly #signal: AbortSignal | undefined;
  readonly #onAbort: () => void;

  /** Starts the clock; an already aborted signal interrupts at once. */
  constructor(options: Pick<ExecOptions, 'timeoutMs' | 'signal'>, kill: () => void) {
    this.#timer = setTimeout(() => {
      this.#timedOut = true;
      kill();
    }, Math.min(options.timeoutMs, MAX_TIMER_MS));
    this.#signal = options.signal;
    this.#onAbort = () => {
      if (!this.#timedOut) this.#interrupted = true;
      kill();
    };
    this.#signal?.addEventListener('abort', this.#onAbort, { once: true });
    if (this.#signal?.aborted) this.#onAbort();
  }

  get timedOut(): boolean {
    return this.#timedOut;
  }

  get interrupted(): boolean {
    return this.#interrupted;
  }

  /** Timed out or interrupted: the run is being killed. */
  get ended(): boolean {
    return this.#timedOut || this.#interrupted;
  }

  /** 124 when timed out, 130 when interrupted, else the command's own code. */
  exitCode(natural: number): number {
    return this.#timedOut ? 124 : this.#interrupted ? 130 : natural;
  }

  /** The result to report for a run whose own exit code is `natural`. */
  result(natural: number): ExecResult {
    return { exitCode: this.exitCode(natural), timedOut: this.#timedOut, interrupted: this.#interrupted };
  }

  /** Stops the clock and stops listening to the signal; call once the run is over. */
  dispose(): void {
    clearTimeout(this.#timer);
    this.#signal?.removeEventListener('abort', this.#onAbort);
  }
}

/** What an exec interrupted before its command started reports (nothing was run). */
export const INTERRUPTED_BEFORE_START: ExecResult = Object.freeze({ exitCode: 130, timedOut: false, interrupted: true });

/** The result for an exec whose signal was aborted before it started (nothing is run), else undefined. */
export function interruptedBeforeStart(options: Pick<ExecOptions, 'signal'>): ExecResult | undefined {
  return options.signal?.aborted ? INTERRUPTED_BEFORE_START : undefined;
}
