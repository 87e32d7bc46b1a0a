/**
 * Where the background-process events of this executor's tasks go: an event
 * of one task's process to that task; a watch-overflow summary of a tenant's
 * breaker (no `session_id`) to every task of the tenant that has a process
 * watching its output. One watch-match breaker per tenant: a tenant's flood
 * never silences another tenant's watches.
 */
import type { TaskKey } from './backend.js';
import { taskKeyString } from './backend.js';
import type { ProcessEvent } from './process-registry.js';
import { WatchBreaker } from './watch-breaker.js';

/** What of a task the summaries look at (a task table entry). */
export interface WatchingTask {
  readonly key: TaskKey;
  readonly registry: { isWatching(): boolean };
}

export class TaskProcessEvents {
  readonly #deliver: ((key: TaskKey, event: ProcessEvent) => void) | undefined;
  readonly #tasks: () => Iterable<WatchingTask>;
  readonly #breakers = new Map<string, WatchBreaker>();

  /** `deliver` absent: events go nowhere. `tasks`: the tasks whose environments are ready. */
  constructor(deliver: ((key: TaskKey, event: ProcessEvent) => void) | undefined, tasks: () => Iterable<WatchingTask>) {
    this.#deliver = deliver;
    this.#tasks = tasks;
  }

  /** The tenant's watch-match breaker, shared by all its tasks' processes. */
  breaker(tenant: string): WatchBreaker {
    let breaker = this.#breakers.get(tenant);
    if (!breaker) {
      breaker = new WatchBreaker();
      this.#breakers.set(tenant, breaker);
    }
    return breaker;
  }

  /** An event of task `key`'s process. */
  event(key: TaskKey, event: ProcessEvent): void {
    const deliver = this.#deliver;
    if (!deliver) return;
    if (event.session_id !== '') {
      deliver(key, event);
      return;
    }
    const targets = new Map([[taskKeyString(key), key]]);
    for (const task of this.#tasks()) {
      if (task.key.tenant === key.tenant && task.registry.isWatching()) targets.set(taskKeyString(task.key), task.key);
    }
    for (const target of targets.values()) deliver(target, event);
  }
}
