import { Status } from '../common/nice-grpc-common-cjs.js';
import { BerthError } from './errors.js';

/**
 * How idempotent calls are retried when the server is UNAVAILABLE (down,
 * restarting, shutting down). Exponential backoff with full jitter.
 */
export interface RetryOptions {
  /** Attempts in all, the first included; 1 turns retries off. Default 5. */
  readonly maxAttempts?: number;
  /** Upper bound of the first wait. Default 200 ms. */
  readonly initialBackoffMs?: number;
  /** Upper bound of any wait. Default 5000 ms. */
  readonly maxBackoffMs?: number;
  /** Told before each wait: which attempt failed, with what, and how long until the next. */
  readonly onRetry?: (event: { readonly method: string; readonly attempt: number; readonly error: BerthError; readonly delayMs: number }) => void;
}

const DEFAULTS = { maxAttempts: 5, initialBackoffMs: 200, maxBackoffMs: 5000 } as const;

/** The wait before attempt `attempt + 1` (attempt counts from 1): a random share of the capped exponential bound. */
export function backoffDelayMs(attempt: number, options: RetryOptions = {}, random: () => number = Math.random): number {
  const initial = options.initialBackoffMs ?? DEFAULTS.initialBackoffMs;
  const max = options.maxBackoffMs ?? DEFAULTS.maxBackoffMs;
  const bound = Math.min(max, initial * 2 ** (attempt - 1));
  return Math.round(bound * random());
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason as Error);
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason as Error);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Runs `attempt` until it succeeds, fails with anything but UNAVAILABLE, or
 * the attempts run out. Only for calls that are safe to repeat: a retried
 * call may have run on the server before the connection failed.
 */
export async function withRetry<T>(method: string, options: RetryOptions, signal: AbortSignal | undefined, attempt: () => Promise<T>): Promise<T> {
  const maxAttempts = Math.max(1, options.maxAttempts ?? DEFAULTS.maxAttempts);
  for (let n = 1; ; n++) {
    try {
      return await attempt();
    } catch (err) {
      if (!(err instanceof BerthError) || err.code !== Status.UNAVAILABLE || n >= maxAttempts || signal?.aborted) throw err;
      const delayMs = backoffDelayMs(n, options);
      options.onRetry?.({ method, attempt: n, error: err, delayMs });
      await sleep(delayMs, signal);
    }
  }
}
