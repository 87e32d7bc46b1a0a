/**
 * The calls in flight on this executor, per task, so InterruptTask reaches
 * every one of them whatever it waits for: a command running, an
 * environment being created or replaced, a relay or code container
 * starting. A call registers the moment it arrives, before anything exists
 * for its task.
 *
 * InterruptTask may name the dispatcher's call ids; an id named before its
 * call arrived (the two travel separately) is remembered for a while, and
 * such a call is interrupted on arrival: nothing it asked for runs.
 */
import { InterruptReason } from '../common/interrupts.js';
import { taskKeyString, type TaskKey } from './backend.js';

/** How long an interrupted call id is remembered for calls of it still on their way. */
const REMEMBER_MS = 10 * 60 * 1000;
/** Most interrupted call ids remembered (oldest forgotten first). */
const REMEMBER_MAX = 10_000;

interface Entry {
  readonly callId: string;
  readonly controller: AbortController;
}

/** One registered call: its signal aborts on an Interrupt of its task; call `end` when it is over. */
export interface CallRegistration {
  readonly signal: AbortSignal;
  end(): void;
}

export class CallInterrupts {
  readonly #byTask = new Map<string, Set<Entry>>();
  /** Interrupted call ids → when they were interrupted (insertion order = age). */
  readonly #interrupted = new Map<string, number>();
  readonly #now: () => number;

  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  /** Registers a call of `key` (`callId` empty: the caller sent none). */
  begin(key: TaskKey, callId: string): CallRegistration {
    const id = taskKeyString(key);
    const entry: Entry = { callId, controller: new AbortController() };
    if (callId !== '' && this.#isInterrupted(callId)) entry.controller.abort(new InterruptReason());
    let entries = this.#byTask.get(id);
    if (!entries) {
      entries = new Set();
      this.#byTask.set(id, entries);
    }
    entries.add(entry);
    return {
      signal: entry.controller.signal,
      end: () => {
        entries.delete(entry);
        if (entries.size === 0 && this.#byTask.get(id) === entries) this.#byTask.delete(id);
      },
    };
  }

  /**
   * Interrupts every call of `key` in flight here, and remembers `callIds`
   * so calls of them that arrive later are interrupted on arrival. Returns
   * how many calls were interrupted.
   */
  interrupt(key: TaskKey, callIds: readonly string[] = []): number {
    const now = this.#now();
    for (const callId of callIds) {
      if (callId === '') continue;
      this.#interrupted.delete(callId);
      this.#interrupted.set(callId, now);
    }
    this.#prune(now);
    let count = 0;
    for (const entry of this.#byTask.get(taskKeyString(key)) ?? []) {
      if (entry.controller.signal.aborted) continue;
      entry.controller.abort(new InterruptReason());
      count += 1;
    }
    return count;
  }

  #isInterrupted(callId: string): boolean {
    const at = this.#interrupted.get(callId);
    return at !== undefined && this.#now() - at < REMEMBER_MS;
  }

  #prune(now: number): void {
    for (const [callId, at] of this.#interrupted) {
      if (this.#interrupted.size <= REMEMBER_MAX && now - at < REMEMBER_MS) break;
      this.#interrupted.delete(callId);
    }
  }
}
