/**
 * The tool calls running per task, from their arrival to their result, as
 * Interrupt sees them: it aborts each one, whatever stage it is in.
 */
import { randomUUID } from 'node:crypto';
import { InterruptReason } from '../../common/interrupts.js';
import type { ToolCallInterrupt } from '../executors/executor-task-client.js';

/** A tool call in flight, as Interrupt sees it. */
export interface RunningCall extends ToolCallInterrupt {
  abort(): void;
  leave(): void;
}

export class RunningCalls {
  /** By `tenant/task`. */
  readonly #running = new Map<string, Set<RunningCall>>();

  /** Registers a tool call of the task for Interrupt; `leave` once it has its result. */
  enrol(tenant: string, taskId: string): RunningCall {
    const key = `${tenant}/${taskId}`;
    const controller = new AbortController();
    let calls = this.#running.get(key);
    if (!calls) {
      calls = new Set();
      this.#running.set(key, calls);
    }
    const set = calls;
    const call: RunningCall = {
      callId: randomUUID(),
      signal: controller.signal,
      abort: () => controller.abort(new InterruptReason()),
      leave: () => {
        set.delete(call);
        if (set.size === 0 && this.#running.get(key) === set) this.#running.delete(key);
      },
    };
    set.add(call);
    return call;
  }

  /** The task's calls that are not interrupted yet. */
  uninterrupted(tenant: string, taskId: string): RunningCall[] {
    return [...(this.#running.get(`${tenant}/${taskId}`) ?? [])].filter((c) => !c.signal.aborted);
  }
}
