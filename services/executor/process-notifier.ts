/**
 * Turns what background processes do into events for the agent, with
 * upstream's rules (`process_registry.py`): a completion for a process with
 * notify-on-complete, unless the model already took it (its own kill, a wait
 * that saw the exit); watch matches within the per-process rate limits
 * (process-watch.ts) and the tenant's breaker (watch-breaker.ts), with the
 * summaries that explain silences; heartbeats of long jobs, checked on a
 * ticker, each carrying the output produced since the last one.
 *
 * The registry owns the processes; this only reads and updates their
 * notification state. Delivering the events is someone else's job.
 */
import type { Logger } from '../common/logging.js';
import type {
  CompletionEvent,
  HeartbeatEvent,
  ProcessEventBase,
  ProcessNotification,
} from '../common/process-notification.js';
import type { ProcessWatch } from './process-watch.js';
import type { WatchBreaker } from './watch-breaker.js';

/** The part of a tracked process the notifier reads and updates. */
export interface NotifiedProcess {
  readonly id: string;
  readonly command: string;
  readonly startedAtMs: number;
  /** Set at start, or when watching is disabled (upstream promotes the process then). */
  notifyOnComplete: boolean;
  readonly watch: ProcessWatch;
  /** 0: no heartbeats. */
  readonly heartbeatSeconds: number;
  heartbeatLastMs: number;
  heartbeatTotalAtLast: number;
  heartbeatSeq: number;
  /** Characters ever appended to the output. */
  readonly totalOutputChars: number;
  /** The model already has the completion: no event. */
  readonly completionConsumed: boolean;
  readonly finishedAtMs: number | undefined;
  readonly exitCode: number | null;
  readonly completionReason: string;
  readonly terminationSource: string;
}

export interface ProcessNotifierOptions {
  /** The task the processes belong to (`task_id` and `owner_task_id` of every event). */
  readonly ownerTaskId: string;
  readonly breaker: WatchBreaker;
  readonly now: () => number;
  readonly onEvent: ((event: ProcessNotification) => void) | undefined;
  readonly logger: Logger | undefined;
  /** How often heartbeats are checked for being due. */
  readonly heartbeatTickMs: number;
  /** The processes to check for due heartbeats. */
  readonly processes: () => Iterable<NotifiedProcess>;
  /** The last `chars` characters of a process's output, cleaned for the model (at most what is buffered). */
  readonly tail: (process: NotifiedProcess, chars: number) => string;
}

/** A heartbeat carries at most this much of the new output (upstream `HEARTBEAT_OUTPUT_CHARS`). */
const HEARTBEAT_OUTPUT_CHARS = 2000;

const epochSeconds = (ms: number) => ms / 1000;

export class ProcessNotifier {
  readonly #o: ProcessNotifierOptions;
  #ticker: NodeJS.Timeout | undefined;

  constructor(options: ProcessNotifierOptions) {
    this.#o = options;
  }

  #base(process: NotifiedProcess): ProcessEventBase {
    return {
      session_id: process.id,
      task_id: this.#o.ownerTaskId,
      owner_task_id: this.#o.ownerTaskId,
      command: process.command,
    };
  }

  /** New output of a running process: watch patterns, within the rate limits and the breaker. */
  output(process: NotifiedProcess, text: string): void {
    if (process.finishedAtMs !== undefined) return;
    const nowMs = this.#o.now();
    const outcome = process.watch.scan(text, nowMs);
    if (outcome.kind === 'none') return;
    if (outcome.kind === 'disabled') {
      // Promoted: exactly one notice when it exits, and one now saying why it went quiet.
      process.notifyOnComplete = true;
      this.#watchDisabled(process, outcome.suppressed, outcome.why);
      return;
    }
    if (outcome.lifetimeExhausted) process.notifyOnComplete = true;
    const admission = this.#o.breaker.admit(nowMs);
    for (const event of admission.events) this.#emit(event);
    if (admission.admit) {
      this.#emit({
        ...this.#base(process),
        type: 'watch_match',
        pattern: outcome.pattern,
        output: outcome.output,
        suppressed: outcome.suppressed,
      });
    }
    // Even when the breaker dropped the last match, say why no more will come.
    if (outcome.lifetimeExhausted) this.#watchDisabled(process, 0, process.watch.lifetimeCapWhy());
  }

  /** A process moved to finished; `output` is its completion output (tail and `output_cut`). */
  finished(process: NotifiedProcess, output: { output: string; output_cut?: number }): void {
    if (!process.notifyOnComplete || process.completionConsumed) return;
    const event: CompletionEvent = {
      ...this.#base(process),
      type: 'completion',
      exit_code: process.exitCode,
      completion_reason: process.completionReason,
      termination_source: process.terminationSource,
      ...output,
      started_at: epochSeconds(process.startedAtMs),
    };
    this.#emit(event);
  }

  /** Starts the heartbeat ticker if it is not running; it stops itself when no process needs it. */
  armHeartbeats(): void {
    if (this.#ticker !== undefined) return;
    this.#ticker = setInterval(() => this.#tick(), this.#o.heartbeatTickMs);
    // Heartbeats must never keep the executor alive on their own.
    this.#ticker.unref();
  }

  stop(): void {
    clearInterval(this.#ticker);
    this.#ticker = undefined;
  }

  #tick(): void {
    const nowMs = this.#o.now();
    let needed = false;
    for (const process of this.#o.processes()) {
      if (process.heartbeatSeconds <= 0 || process.finishedAtMs !== undefined) continue;
      needed = true;
      if (nowMs - process.heartbeatLastMs >= process.heartbeatSeconds * 1000) this.#heartbeat(process, nowMs);
    }
    if (!needed) this.stop();
  }

  /** A tick with nothing new is skipped (each notice costs the agent a turn), but restarts the interval. */
  #heartbeat(process: NotifiedProcess, nowMs: number): void {
    process.heartbeatLastMs = nowMs;
    const delta = process.totalOutputChars - process.heartbeatTotalAtLast;
    process.heartbeatTotalAtLast = process.totalOutputChars;
    if (delta <= 0) return;
    let output = this.#o.tail(process, delta);
    if (output === '') return;
    const chars = [...output];
    if (chars.length > HEARTBEAT_OUTPUT_CHARS) {
      const cut = chars.length - HEARTBEAT_OUTPUT_CHARS;
      output = `...(${cut} earlier characters omitted)\n${chars.slice(-HEARTBEAT_OUTPUT_CHARS).join('')}`;
    }
    process.heartbeatSeq += 1;
    const event: HeartbeatEvent = {
      ...this.#base(process),
      type: 'heartbeat',
      seq: process.heartbeatSeq,
      interval: process.heartbeatSeconds,
      elapsed: Math.trunc((nowMs - process.startedAtMs) / 1000),
      output,
      started_at: epochSeconds(process.startedAtMs),
    };
    this.#emit(event);
  }

  #watchDisabled(process: NotifiedProcess, suppressed: number, why: string): void {
    this.#emit({
      ...this.#base(process),
      type: 'watch_disabled',
      suppressed,
      message:
        `Watch patterns disabled for process ${process.id} — ${why}` +
        "Falling back to notify_on_complete semantics; you'll get exactly one notification when the process exits.",
    });
  }

  #emit(event: ProcessNotification): void {
    if (!this.#o.onEvent) return;
    try {
      this.#o.onEvent(event);
    } catch (err) {
      this.#o.logger?.warn({ err, event: event.type }, 'process event consumer threw');
    }
  }
}
