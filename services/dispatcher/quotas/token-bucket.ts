/**
 * A token bucket for `quotas.calls_per_minute`: it holds at most `perMinute`
 * tokens, refills continuously at `perMinute` a minute, and each call takes
 * one. A tenant that was quiet may burst up to a minute's worth at once;
 * over any longer stretch it gets `perMinute` calls a minute. Time comes from
 * the caller (milliseconds on a monotonic clock), so tests need no sleeps.
 */
export class TokenBucket {
  readonly #capacity: number;
  readonly #refillPerMs: number;
  #tokens: number;
  #updatedMs: number;

  constructor(perMinute: number, nowMs: number) {
    this.#capacity = perMinute;
    this.#refillPerMs = perMinute / 60_000;
    this.#tokens = perMinute;
    this.#updatedMs = nowMs;
  }

  get capacity(): number {
    return this.#capacity;
  }

  /** Takes a token if there is one; false leaves the bucket as it was. */
  tryTake(nowMs: number): boolean {
    this.#refill(nowMs);
    if (this.#tokens < 1) return false;
    this.#tokens -= 1;
    return true;
  }

  /** Tokens taken and not yet refilled, rounded up: the calls that count against the minute now. */
  used(nowMs: number): number {
    this.#refill(nowMs);
    return Math.max(0, Math.ceil(this.#capacity - this.#tokens - 1e-9));
  }

  /** Milliseconds until the next token, 0 when one is there. */
  retryAfterMs(nowMs: number): number {
    this.#refill(nowMs);
    return this.#tokens >= 1 ? 0 : Math.ceil((1 - this.#tokens) / this.#refillPerMs);
  }

  #refill(nowMs: number): void {
    // A clock that steps back (it should not: callers pass a monotonic one) refills nothing.
    const elapsedMs = Math.max(0, nowMs - this.#updatedMs);
    this.#tokens = Math.min(this.#capacity, this.#tokens + elapsedMs * this.#refillPerMs);
    this.#updatedMs = Math.max(this.#updatedMs, nowMs);
  }
}
