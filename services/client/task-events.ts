/**
 * A task's background-process events as the client sees them: an async
 * iterator over the TaskEvents stream that resumes by itself after the server
 * went away (UNAVAILABLE: restart, drain), asking for what came after the
 * last id it delivered.
 */
import type { CallOptions } from 'nice-grpc';
import { Status } from '../common/nice-grpc-common-cjs.js';
import { AsyncQueue } from '../common/async-queue.js';
import type { DispatcherClient, TaskEvent } from '../gen/berth/v1/dispatcher.js';
import { BerthError, toBerthError } from './errors.js';
import { backoffDelayMs, type RetryOptions } from './retry.js';

/** What {@link TaskEventStream} and {@link SessionStream.events} yield. */
export type BackgroundEventType =
  | 'completion'
  | 'watch_match'
  | 'watch_disabled'
  | 'heartbeat'
  | 'watch_overflow_tripped'
  | 'watch_overflow_released'
  /** Some events this client had not seen are gone: `event.count` says how many (null: not known). */
  | 'events_dropped'
  /** Session only: a subscription could not be made or stopped; `text` says why and what to do. */
  | 'events_error';

/** One event about a task's background processes. */
export interface BackgroundEvent {
  readonly taskId: string;
  /** Opaque; give the last one seen as `after` to get what was missed. ('' for `events_error`.) */
  readonly id: string;
  readonly type: BackgroundEventType;
  /** The event as upstream Hermes' process registry shapes it (`session_id`, `command`, `output`, ...), secrets masked. */
  readonly event: Record<string, unknown>;
  /** The text upstream puts into the conversation for it. */
  readonly text: string;
}

/** Options of {@link BerthClient.events}. */
export interface TaskEventsOptions {
  /** The id of the last event already received: only what came after it. Default: every event the server still keeps. */
  readonly after?: string;
  /** Ends the iteration (quietly). */
  readonly signal?: AbortSignal;
  /** Reconnections after UNAVAILABLE in a row before the iterator throws; `{ maxAttempts: 1 }`: none. */
  readonly retry?: RetryOptions;
}

/** @internal */
export function toBackgroundEvent(event: TaskEvent): BackgroundEvent {
  let parsed: unknown;
  try {
    parsed = JSON.parse(event.eventJson);
  } catch {
    parsed = {};
  }
  return {
    taskId: event.taskId,
    id: event.id,
    type: event.type as BackgroundEventType,
    event: typeof parsed === 'object' && parsed !== null ? (parsed as Record<string, unknown>) : {},
    text: event.text,
  };
}

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });

/**
 * The events of one task, in order, until {@link TaskEventStream.close} or
 * the signal: iterate it once. `ready` resolves when the server has the
 * subscription (nothing that happens afterwards is missed).
 */
export class TaskEventStream implements AsyncIterable<BackgroundEvent>, Disposable {
  readonly taskId: string;
  /** Resolves with the newest id the server kept when the subscription was made ('' for none); rejects when it could not be made. */
  readonly ready: Promise<{ readonly lastId: string }>;
  readonly #queue = new AsyncQueue<BackgroundEvent | { readonly failure: unknown }>();
  readonly #abort = new AbortController();
  #lastId: string;
  #taken = false;

  /** @internal Made by {@link BerthClient.events}. */
  constructor(rpc: DispatcherClient, taskId: string, callOptions: () => CallOptions, options: TaskEventsOptions) {
    this.taskId = taskId;
    this.#lastId = options.after ?? '';
    const outer = options.signal;
    const forward = () => this.#abort.abort();
    if (outer?.aborted) forward();
    else outer?.addEventListener('abort', forward, { once: true });
    let settle!: { resolve: (v: { lastId: string }) => void; reject: (e: unknown) => void };
    this.ready = new Promise((resolve, reject) => (settle = { resolve, reject }));
    // Handled by whoever awaits it; an unobserved rejection must not crash the process.
    this.ready.catch(() => undefined);
    void this.#pump(rpc, callOptions, options.retry ?? {}, settle).finally(() => {
      // Settles nothing when ready came (a promise settles once).
      settle.reject(new BerthError(Status.UNAVAILABLE, 'the event stream ended before the server took the subscription'));
      outer?.removeEventListener('abort', forward);
      this.#queue.close();
    });
  }

  /** The id of the last event delivered (or `after`): reconnect with it to get what follows. */
  get lastId(): string {
    return this.#lastId;
  }

  async #pump(
    rpc: DispatcherClient,
    callOptions: () => CallOptions,
    retry: RetryOptions,
    settle: { resolve: (v: { lastId: string }) => void; reject: (e: unknown) => void },
  ): Promise<void> {
    const signal = this.#abort.signal;
    const maxAttempts = Math.max(1, retry.maxAttempts ?? 5);
    for (let failures = 0; !signal.aborted; ) {
      try {
        const responses = rpc.taskEvents({ taskId: this.taskId, after: this.#lastId }, { ...callOptions(), signal });
        for await (const response of responses) {
          const message = response.message;
          if (message?.$case === 'ready') {
            failures = 0;
            settle.resolve({ lastId: message.value.lastId });
          } else if (message?.$case === 'event') {
            this.#lastId = message.value.id;
            this.#queue.push(toBackgroundEvent(message.value));
          }
        }
        return;
      } catch (err) {
        if (signal.aborted) return;
        const error = toBerthError(err);
        failures += 1;
        if (!(error instanceof BerthError) || error.code !== Status.UNAVAILABLE || failures >= maxAttempts) {
          settle.reject(error);
          this.#queue.push({ failure: error });
          return;
        }
        const delayMs = backoffDelayMs(failures, retry);
        retry.onRetry?.({ method: 'TaskEvents', attempt: failures, error, delayMs });
        await sleep(delayMs, signal);
      }
    }
  }

  async *[Symbol.asyncIterator](): AsyncIterator<BackgroundEvent> {
    if (this.#taken) throw new Error('a task event stream can be iterated once');
    this.#taken = true;
    try {
      for await (const item of this.#queue) {
        if ('failure' in item) throw item.failure;
        yield item;
      }
    } finally {
      this.close();
    }
  }

  /** Stops following; the iteration ends. */
  close(): void {
    this.#abort.abort();
  }

  [Symbol.dispose](): void {
    this.close();
  }
}
