/**
 * Watch patterns of one background process, with upstream's rate limits
 * (`_check_watch_patterns`): every line of new output that contains a pattern
 * is a hit; at most one notification per 15 s cooldown window; hits inside a
 * window are dropped and counted, and the first drop of a window is one
 * strike; three consecutive strike windows, or the 8th delivered match,
 * disable watching and promote the process to notify-on-complete, with one
 * summary saying why.
 *
 * Lines are judged whole even when they arrive over several chunks (upstream
 * judges each chunk's lines alone, so a pattern split by a chunk boundary is
 * missed); a line is reported once. A partial last line is judged as it
 * stands, so a prompt without a newline is still seen.
 */
import { stripAnsi } from './output.js';

export interface WatchLimits {
  /** Between delivered matches; default 15,000 ms (`WATCH_MIN_INTERVAL_SECONDS`). */
  readonly minIntervalMs?: number;
  /** Consecutive strike windows that disable watching; default 3 (`WATCH_STRIKE_LIMIT`). */
  readonly strikeLimit?: number;
  /** Delivered matches after which watching stops; default 8 (`WATCH_LIFETIME_MAX_HITS`). */
  readonly lifetimeMaxHits?: number;
}

/** What one chunk of output produced. */
export type WatchOutcome =
  | { readonly kind: 'none' }
  | {
      readonly kind: 'match';
      readonly pattern: string;
      /** The matching lines, joined and capped as upstream's notification carries them. */
      readonly output: string;
      readonly suppressed: number;
      /** This was the last match (lifetime cap): watching is now disabled. */
      readonly lifetimeExhausted: boolean;
    }
  | { readonly kind: 'disabled'; readonly suppressed: number; readonly why: string };

/** Matching lines a notification carries, and its character cap. */
const MAX_LINES = 20;
const MAX_OUTPUT_CHARS = 2000;
/** Longest partial line remembered between chunks; longer lines are judged by their end. */
const MAX_CARRY_CHARS = 8192;

/** Python's `str.splitlines()` separators. */
const LINE_BREAK = /\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]/;

const rstrip = (line: string) => line.replace(/\s+$/u, '');

export class ProcessWatch {
  readonly patterns: readonly string[];
  readonly #minIntervalMs: number;
  readonly #strikeLimit: number;
  readonly #lifetimeMaxHits: number;
  /** The last line so far, without its end. */
  #carry = '';
  /** The carried line was reported already. */
  #carryHit = false;
  #cooldownUntilMs = 0;
  #strikeCandidate = false;
  #consecutiveStrikes = 0;
  #suppressed = 0;
  #hits = 0;
  #disabled = false;

  constructor(patterns: readonly string[], limits: WatchLimits = {}) {
    this.patterns = patterns.filter((p) => p.length > 0);
    this.#minIntervalMs = limits.minIntervalMs ?? 15_000;
    this.#strikeLimit = limits.strikeLimit ?? 3;
    this.#lifetimeMaxHits = limits.lifetimeMaxHits ?? 8;
  }

  /** Patterns are set and watching has not been disabled. */
  get active(): boolean {
    return this.patterns.length > 0 && !this.#disabled;
  }

  /** At least one match was delivered. */
  get hit(): boolean {
    return this.#hits > 0;
  }

  /** Judges new output (raw, as the process wrote it) at `nowMs`. */
  scan(text: string, nowMs: number): WatchOutcome {
    if (!this.active || text === '') return { kind: 'none' };
    const hits = this.#hitLines(text);
    if (hits.length === 0) return { kind: 'none' };

    if (this.#cooldownUntilMs && nowMs < this.#cooldownUntilMs) {
      this.#suppressed += hits.length;
      if (this.#strikeCandidate) return { kind: 'none' };
      this.#strikeCandidate = true;
      this.#consecutiveStrikes += 1;
      if (this.#consecutiveStrikes < this.#strikeLimit) return { kind: 'none' };
      this.#disabled = true;
      return {
        kind: 'disabled',
        suppressed: this.#suppressed,
        why:
          `${this.#strikeLimit} consecutive rate-limit windows triggered ` +
          `(min spacing ${this.#minIntervalMs / 1000}s). `,
      };
    }
    // A window that ended without drops resets the strikes: the cadence is healthy again.
    if (this.#cooldownUntilMs && !this.#strikeCandidate) this.#consecutiveStrikes = 0;
    this.#strikeCandidate = false;
    this.#cooldownUntilMs = nowMs + this.#minIntervalMs;
    this.#hits += 1;
    const suppressed = this.#suppressed;
    this.#suppressed = 0;
    const lifetimeExhausted = this.#hits >= this.#lifetimeMaxHits;
    if (lifetimeExhausted) this.#disabled = true;
    let output = hits
      .slice(0, MAX_LINES)
      .map((h) => h.line)
      .join('\n');
    if (output.length > MAX_OUTPUT_CHARS) output = `${output.slice(0, MAX_OUTPUT_CHARS)}\n...(truncated)`;
    return { kind: 'match', pattern: hits[0]!.pattern, output, suppressed, lifetimeExhausted };
  }

  /** Why the lifetime cap stopped watching (upstream's `why` text). */
  lifetimeCapWhy(): string {
    return `reached the lifetime cap of ${this.#lifetimeMaxHits} delivered matches. `;
  }

  /** Lines of `text` (with the carried start of the first) that contain a pattern and were not reported yet. */
  #hitLines(text: string): Array<{ pattern: string; line: string }> {
    const lines = (this.#carry + text).split(LINE_BREAK);
    const last = lines.pop() ?? '';
    const hits: Array<{ pattern: string; line: string }> = [];
    lines.forEach((line, i) => {
      if (i === 0 && this.#carryHit) return;
      const pattern = this.#firstPattern(line);
      if (pattern !== undefined) hits.push({ pattern, line: rstrip(stripAnsi(line)) });
    });
    const carriedOn = lines.length === 0 && this.#carryHit;
    this.#carry = last.length > MAX_CARRY_CHARS ? last.slice(-MAX_CARRY_CHARS) : last;
    this.#carryHit = carriedOn;
    if (!carriedOn && last !== '') {
      const pattern = this.#firstPattern(last);
      if (pattern !== undefined) {
        hits.push({ pattern, line: rstrip(stripAnsi(last)) });
        this.#carryHit = true;
      }
    }
    return hits;
  }

  #firstPattern(line: string): string | undefined {
    return this.patterns.find((p) => line.includes(p));
  }
}
