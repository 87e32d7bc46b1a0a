/**
 * Each task's background-process events, kept for the clients that follow
 * them (WatchTaskEvents): ids that increase within a task's log, a bounded
 * history (EVENT_RETENTION: per task, by age, and across tasks by count and
 * size) so a client that reconnects with the last id it saw gets what it
 * missed, and a `dropped` item when what it missed is no longer kept.
 *
 * An id is `{log}-{seq}`: `log` names one log of one task (random, made when
 * the task's first event arrives), `seq` counts its events from 1. A log that
 * was forgotten (expired, pushed out, or the executor restarted) is never
 * continued: the next event starts a new one, and an id of the old one
 * reads as "some events may have been missed".
 *
 * A follower reads the log from its cursor, so a slow follower costs no
 * memory: what it has not read yet is either still in the log or reported
 * as dropped.
 */
import { randomBytes } from 'node:crypto';
import { InvalidArgumentError } from '../common/errors.js';
import { EVENT_RETENTION, type ProcessNotification } from '../common/process-notification.js';
import type { TaskKey } from './backend.js';
import { taskKeyString } from './backend.js';

export interface TaskEventLogLimits {
  readonly perTask?: number;
  readonly maxAgeMs?: number;
  readonly total?: number;
  readonly totalChars?: number;
  readonly tasks?: number;
  /** Clock, for tests. */
  readonly now?: () => number;
}

/** What a follower receives, in order: `subscribed` once, then events and `dropped` notes. */
export type TaskEventItem =
  | { readonly kind: 'subscribed'; readonly lastId: string }
  | { readonly kind: 'event'; readonly id: string; readonly json: string }
  /** `id`: where the follower now stands ("" = before the first event of whatever log comes); `count` -1 = unknown. */
  | { readonly kind: 'dropped'; readonly id: string; readonly count: number };

interface Entry {
  readonly log: TaskLog;
  readonly seq: number;
  readonly json: string;
  readonly atMs: number;
  gone: boolean;
}

interface TaskLog {
  readonly key: string;
  readonly name: string;
  nextSeq: number;
  /** Retained entries, oldest first; seqs are consecutive. */
  readonly entries: Entry[];
  lastAtMs: number;
}

interface Cursor {
  readonly log: string;
  seq: number;
}

/** `{log}-{seq}`, as ids are written. */
const ID_PATTERN = /^([0-9a-f]{1,32})-(\d{1,15})$/;

const SWEEP_MS = 60_000;

export class TaskEventLog {
  readonly #perTask: number;
  readonly #maxAgeMs: number;
  readonly #total: number;
  readonly #totalChars: number;
  readonly #tasks: number;
  readonly #now: () => number;
  /** By task key; Map order = oldest last event first. */
  readonly #logs = new Map<string, TaskLog>();
  /** Every retained entry of every log, oldest first (entries removed by a task's own cap stay, marked gone). */
  #fifo: Entry[] = [];
  #fifoHead = 0;
  #count = 0;
  #chars = 0;
  readonly #waiters = new Map<string, Set<() => void>>();
  readonly #sweeper: NodeJS.Timeout;
  #closed = false;

  constructor(limits: TaskEventLogLimits = {}) {
    this.#perTask = limits.perTask ?? EVENT_RETENTION.perTask;
    this.#maxAgeMs = limits.maxAgeMs ?? EVENT_RETENTION.maxAgeMinutes * 60_000;
    this.#total = limits.total ?? EVENT_RETENTION.total;
    this.#totalChars = limits.totalChars ?? EVENT_RETENTION.totalChars;
    this.#tasks = limits.tasks ?? EVENT_RETENTION.tasks;
    this.#now = limits.now ?? Date.now;
    this.#sweeper = setInterval(() => this.#sweep(), SWEEP_MS);
    this.#sweeper.unref();
  }

  /** Records one event of the task and wakes its followers. */
  append(task: TaskKey, event: ProcessNotification): void {
    const key = taskKeyString(task);
    const nowMs = this.#now();
    let log = this.#logs.get(key);
    if (log === undefined) {
      log = { key, name: randomBytes(4).toString('hex'), nextSeq: 1, entries: [], lastAtMs: nowMs };
      while (this.#logs.size >= this.#tasks) this.#forget(this.#logs.values().next().value!);
    }
    this.#logs.delete(key);
    this.#logs.set(key, log);
    log.lastAtMs = nowMs;
    const entry: Entry = { log, seq: log.nextSeq++, json: JSON.stringify(event), atMs: nowMs, gone: false };
    log.entries.push(entry);
    this.#fifo.push(entry);
    this.#count += 1;
    this.#chars += entry.json.length;
    while (log.entries.length > this.#perTask) this.#drop(log.entries[0]!);
    this.#sweep();
    this.#wake(key);
  }

  /** Stops the sweeper and ends every follower. */
  close(): void {
    clearInterval(this.#sweeper);
    this.#closed = true;
    for (const key of [...this.#waiters.keys()]) this.#wake(key);
  }

  /**
   * Follows the task's events until `signal` aborts: `subscribed` (with the
   * newest retained id), then the retained events after `afterId` ("" = all
   * retained; `fromLatest` = none of them), then new ones as they come.
   * @throws InvalidArgumentError when `afterId` is not an id this log wrote.
   */
  follow(task: TaskKey, options: { afterId: string; fromLatest: boolean; signal: AbortSignal }): AsyncGenerator<TaskEventItem> {
    const key = taskKeyString(task);
    let cursor: Cursor | undefined;
    let stale = false;
    if (!options.fromLatest && options.afterId !== '') {
      const m = ID_PATTERN.exec(options.afterId);
      if (!m) {
        throw new InvalidArgumentError(
          `after '${options.afterId.slice(0, 80)}' is not an event id; give the id of the last event received, or "" for every event kept`,
        );
      }
      cursor = { log: m[1]!, seq: Number(m[2]) };
    }
    this.#sweep();
    const log = this.#logs.get(key);
    if (options.fromLatest && log) cursor = { log: log.name, seq: log.nextSeq - 1 };
    // "" asks for what is kept: no note about what was not.
    else if (!options.fromLatest && options.afterId === '' && log) cursor = { log: log.name, seq: firstSeq(log) - 1 };
    // An id of a log that is gone: what came after it cannot be told.
    if (cursor && (!log || log.name !== cursor.log)) stale = true;
    const lastId = log && log.entries.length > 0 ? idOf(log.entries.at(-1)!) : '';
    return this.#follow(key, cursor, stale, lastId, options.signal);
  }

  async *#follow(key: string, start: Cursor | undefined, stale: boolean, lastId: string, signal: AbortSignal): AsyncGenerator<TaskEventItem> {
    let cursor = start;
    yield { kind: 'subscribed', lastId };
    if (stale) {
      const log = this.#logs.get(key);
      cursor = log ? { log: log.name, seq: firstSeq(log) - 1 } : undefined;
      yield { kind: 'dropped', id: cursor ? `${cursor.log}-${cursor.seq}` : '', count: -1 };
    }
    while (!signal.aborted && !this.#closed) {
      const log = this.#logs.get(key);
      if (log !== undefined) {
        if (cursor !== undefined && cursor.log !== log.name) {
          // The log this follower was reading was forgotten while it waited.
          cursor = { log: log.name, seq: firstSeq(log) - 1 };
          yield { kind: 'dropped', id: `${cursor.log}-${cursor.seq}`, count: -1 };
          continue;
        }
        cursor ??= { log: log.name, seq: 0 };
        const first = firstSeq(log);
        if (cursor.seq < first - 1) {
          const count = first - 1 - cursor.seq;
          cursor.seq = first - 1;
          yield { kind: 'dropped', id: `${cursor.log}-${cursor.seq}`, count };
          continue;
        }
        const entry = log.entries[cursor.seq + 1 - first];
        if (entry !== undefined) {
          cursor.seq = entry.seq;
          yield { kind: 'event', id: idOf(entry), json: entry.json };
          continue;
        }
      }
      await this.#wait(key, signal);
    }
  }

  #wait(key: string, signal: AbortSignal): Promise<void> {
    return new Promise<void>((resolve) => {
      let set = this.#waiters.get(key);
      if (set === undefined) {
        set = new Set();
        this.#waiters.set(key, set);
      }
      const waiters = set;
      const done = () => {
        signal.removeEventListener('abort', done);
        waiters.delete(done);
        if (waiters.size === 0 && this.#waiters.get(key) === waiters) this.#waiters.delete(key);
        resolve();
      };
      waiters.add(done);
      signal.addEventListener('abort', done, { once: true });
    });
  }

  #wake(key: string): void {
    const set = this.#waiters.get(key);
    if (set === undefined) return;
    for (const done of [...set]) done();
  }

  /** Drops expired entries, then the oldest until the totals fit; forgets logs idle past the age limit. */
  #sweep(): void {
    const oldest = this.#now() - this.#maxAgeMs;
    for (;;) {
      const entry = this.#fifo[this.#fifoHead];
      if (entry === undefined) break;
      if (entry.gone) {
        this.#fifoHead += 1;
        continue;
      }
      if (entry.atMs >= oldest && this.#count <= this.#total && this.#chars <= this.#totalChars) break;
      this.#drop(entry);
      this.#fifoHead += 1;
    }
    if (this.#fifoHead > 1024 && this.#fifoHead * 2 > this.#fifo.length) {
      this.#fifo = this.#fifo.slice(this.#fifoHead);
      this.#fifoHead = 0;
    }
    for (const log of this.#logs.values()) {
      // Map order: the first log with a recent event ends the search.
      if (log.lastAtMs >= oldest) break;
      if (log.entries.length === 0) this.#forget(log);
    }
  }

  /** Removes the oldest entry of its log. */
  #drop(entry: Entry): void {
    if (entry.gone) return;
    entry.gone = true;
    entry.log.entries.shift();
    this.#count -= 1;
    this.#chars -= entry.json.length;
  }

  #forget(log: TaskLog): void {
    for (const entry of [...log.entries]) this.#drop(entry);
    this.#logs.delete(log.key);
    this.#wake(log.key);
  }
}

function idOf(entry: Entry): string {
  return `${entry.log.name}-${entry.seq}`;
}

/** The seq of the log's oldest retained entry (its next seq when it has none). */
function firstSeq(log: TaskLog): number {
  return log.entries[0]?.seq ?? log.nextSeq;
}
