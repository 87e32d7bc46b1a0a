/**
 * The task events one Session stream carries: a subscription per task the
 * session calls (made before its first call runs there, from that moment
 * on), and the ones the client asks for (`subscribe_events`, with the last
 * id it saw). A subscription that ends on its own (its executor went away)
 * is resumed from the last id delivered on the session's next call to the
 * task.
 */
import { toServerError } from '../common/grpc-errors.js';
import type { Logger } from '../common/logging.js';
import type { SessionServerMessage } from '../gen/berth/v1/dispatcher.js';
import type { Dispatcher } from './dispatcher.js';
import { checkTaskId } from './task-ids.js';

/** Longest a call waits for its task's subscription to be in place before it runs anyway. */
const READY_WAIT_MS = 5000;

interface Subscription {
  readonly controller: AbortController;
  /** The last id delivered on this session. */
  lastId: string;
  ended: boolean;
  /** Could not be made (e.g. an executor without events): not tried again by itself on this session. */
  failed: boolean;
}

export class SessionEvents {
  readonly #dispatcher: Dispatcher;
  readonly #tenant: string;
  readonly #signal: AbortSignal;
  readonly #push: (message: SessionServerMessage) => void;
  readonly #logger: Logger;
  readonly #subscriptions = new Map<string, Subscription>();

  constructor(
    dispatcher: Dispatcher,
    tenant: string,
    signal: AbortSignal,
    push: (message: SessionServerMessage) => void,
    logger: Logger,
  ) {
    this.#dispatcher = dispatcher;
    this.#tenant = tenant;
    this.#signal = signal;
    this.#push = push;
    this.#logger = logger;
  }

  /**
   * Subscribes to the task's events from now on (or resumes), unless
   * subscribed; resolves once in place or failed, or after
   * {@link READY_WAIT_MS} (a call never waits longer on its task's events).
   */
  async ensure(taskId: string): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => (timer = setTimeout(resolve, READY_WAIT_MS)));
    try {
      await Promise.race([this.#ensure(taskId), late]);
    } finally {
      clearTimeout(timer);
    }
  }

  #ensure(taskId: string): Promise<void> {
    let id: string;
    try {
      id = checkTaskId(taskId);
    } catch {
      return Promise.resolve(); // The call reports the bad id.
    }
    const current = this.#subscriptions.get(id);
    if (current !== undefined && (!current.ended || current.failed)) return Promise.resolve();
    if (current !== undefined && current.lastId !== '') return this.#start(id, current.lastId, false);
    return this.#start(id, '', true);
  }

  /** (Re)subscribes to the task's events after `after` ("" = every event kept). */
  subscribe(taskId: string, after: string): void {
    void this.#start(taskId, after, false);
  }

  close(): void {
    for (const s of this.#subscriptions.values()) s.controller.abort();
    this.#subscriptions.clear();
  }

  #start(taskId: string, after: string, fromLatest: boolean): Promise<void> {
    this.#subscriptions.get(taskId)?.controller.abort();
    const subscription: Subscription = { controller: new AbortController(), lastId: after, ended: false, failed: false };
    this.#subscriptions.set(taskId, subscription);
    const signal = AbortSignal.any([this.#signal, subscription.controller.signal]);
    return new Promise<void>((resolve) => {
      void (async () => {
        let ready = false;
        try {
          const items = this.#dispatcher.taskEvents(this.#tenant, taskId, { after, fromLatest, signal });
          for await (const item of items) {
            if (item.kind === 'ready') {
              this.#push({ message: { $case: 'eventsReady', value: { taskId: item.taskId, lastId: item.lastId, error: '' } } });
              ready = true;
              resolve();
            } else {
              subscription.lastId = item.event.id;
              this.#push({ message: { $case: 'event', value: item.event } });
            }
          }
          if (!signal.aborted) this.#ended(taskId, ready, 'its executor ended the event stream');
        } catch (err) {
          subscription.failed = !ready;
          if (!signal.aborted) this.#ended(taskId, ready, toServerError(err, this.#logger, 'Session/events').details);
        } finally {
          subscription.ended = true;
          resolve();
        }
      })();
    });
  }

  #ended(taskId: string, ready: boolean, why: string): void {
    const error = ready
      ? `events of task ${taskId} stopped: ${why}. The session's next call to the task resumes them; ` +
        'or send subscribe_events with the last event id seen'
      : `events of task ${taskId} cannot be followed: ${why}`;
    this.#push({ message: { $case: 'eventsReady', value: { taskId, lastId: '', error } } });
  }
}
