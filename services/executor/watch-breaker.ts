/**
 * The circuit breaker over watch-pattern matches of many processes
 * (upstream `_global_watch_admit`): at most 15 matches in a 10 s window; the
 * 16th trips it, and for 30 s every match is dropped and counted. One summary
 * event says it tripped; the first match looked at after the cooldown
 * releases it with one summary of how many were dropped.
 *
 * Upstream keeps one breaker for the whole process. Berth keeps one per
 * tenant, so a tenant whose processes flood cannot silence another tenant's
 * watches.
 */
import type { WatchOverflowReleasedEvent, WatchOverflowTrippedEvent } from '../common/process-notification.js';

export interface WatchBreakerLimits {
  /** Matches let through per window; default 15 (`WATCH_GLOBAL_MAX_PER_WINDOW`). */
  readonly maxPerWindow?: number;
  /** Default 10,000 ms (`WATCH_GLOBAL_WINDOW_SECONDS`). */
  readonly windowMs?: number;
  /** How long a tripped breaker drops matches; default 30,000 ms (`WATCH_GLOBAL_COOLDOWN_SECONDS`). */
  readonly cooldownMs?: number;
}

export type WatchBreakerEvent = WatchOverflowTrippedEvent | WatchOverflowReleasedEvent;

export interface WatchAdmission {
  readonly admit: boolean;
  /** Summaries to deliver (tripped, released), in order. */
  readonly events: readonly WatchBreakerEvent[];
}

const seconds = (ms: number) => ms / 1000;

export class WatchBreaker {
  readonly #maxPerWindow: number;
  readonly #windowMs: number;
  readonly #cooldownMs: number;
  #windowStartMs = 0;
  #windowHits = 0;
  /** 0 when not tripped. */
  #trippedUntilMs = 0;
  #suppressedDuringTrip = 0;

  constructor(limits: WatchBreakerLimits = {}) {
    this.#maxPerWindow = limits.maxPerWindow ?? 15;
    this.#windowMs = limits.windowMs ?? 10_000;
    this.#cooldownMs = limits.cooldownMs ?? 30_000;
  }

  /** Whether one watch match at `nowMs` may be delivered, and the summaries this decision produced. */
  admit(nowMs: number): WatchAdmission {
    const events: WatchBreakerEvent[] = [];
    if (this.#trippedUntilMs && nowMs >= this.#trippedUntilMs) {
      const suppressed = this.#suppressedDuringTrip;
      this.#trippedUntilMs = 0;
      this.#suppressedDuringTrip = 0;
      this.#windowStartMs = nowMs;
      this.#windowHits = 0;
      if (suppressed > 0) {
        events.push({
          session_id: '',
          command: '',
          type: 'watch_overflow_released',
          suppressed,
          message: `Watch-pattern notifications resumed. ${suppressed} match event(s) were suppressed during the flood.`,
        });
      }
    }
    if (this.#trippedUntilMs && nowMs < this.#trippedUntilMs) {
      this.#suppressedDuringTrip += 1;
      return { admit: false, events };
    }
    if (nowMs - this.#windowStartMs >= this.#windowMs) {
      this.#windowStartMs = nowMs;
      this.#windowHits = 0;
    }
    if (this.#windowHits < this.#maxPerWindow) {
      this.#windowHits += 1;
      return { admit: true, events };
    }
    this.#trippedUntilMs = nowMs + this.#cooldownMs;
    this.#suppressedDuringTrip += 1;
    events.push({
      session_id: '',
      command: '',
      type: 'watch_overflow_tripped',
      message:
        `Watch-pattern overflow: >${this.#maxPerWindow} notifications in ${seconds(this.#windowMs)}s across all ` +
        `processes. Suppressing further watch_match events for ${seconds(this.#cooldownMs)}s.`,
    });
    return { admit: false, events };
  }
}
