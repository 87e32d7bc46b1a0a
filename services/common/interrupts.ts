/**
 * How an interrupt travels with a call (docs/tools.md, "Interrupts"). Each
 * tool call gets an id when it reaches the dispatcher; every executor call
 * it makes carries that id in the {@link CALL_ID_HEADER} metadata, so an
 * Interrupt can name the calls it ends even when it reaches the executor
 * before them. Whatever a call waits for (quota admission, the task's
 * environment, execute_code's relay or code container, the command) is
 * awaited against the call's signal: an interrupt ends the wait at once and
 * nothing the call would have started runs afterwards.
 */
import { BerthError } from './errors.js';

/** gRPC metadata key with the id of the tool call an executor call belongs to. */
export const CALL_ID_HEADER = 'berth-call-id';

/** The abort reason of an Interrupt (a client that cancels aborts with an AbortError instead). */
export class InterruptReason extends Error {
  constructor() {
    super('the call was interrupted');
    this.name = 'InterruptReason';
  }
}

/** True when `signal` was aborted by an Interrupt (not by a client that went away or a shutdown). */
export function isInterrupt(signal: AbortSignal | undefined): boolean {
  return signal?.aborted === true && signal.reason instanceof InterruptReason;
}

/**
 * A call was interrupted (or cancelled) before the work it asked for began:
 * nothing of it ran. Commands and scripts report an interrupt as their
 * result instead; this is for the operations that have no such result.
 */
export class InterruptedBeforeStartError extends BerthError {
  constructor(what: string) {
    super('ABORTED', `${what} was interrupted before it started; nothing was run. Send the call again to run it.`);
  }
}

/**
 * Waits for `work` unless `signal` aborts first; then rejects at once with
 * `onAbort()` (default: an {@link InterruptedBeforeStartError} naming `what`).
 * The work itself goes on (it may be shared, like a task's environment
 * being created); when it was the caller's alone, `discard` gets what it
 * produced after the caller stopped waiting, to undo it.
 */
export function unlessAborted<T>(
  work: Promise<T>,
  signal: AbortSignal | undefined,
  what: string,
  discard?: (value: T) => unknown,
): Promise<T> {
  if (signal === undefined) return work;
  const abandon = (value: T) => {
    if (!discard) return;
    Promise.resolve()
      .then(() => discard(value))
      .catch(() => undefined);
  };
  if (signal.aborted) {
    work.then(abandon, () => undefined);
    return Promise.reject(new InterruptedBeforeStartError(what));
  }
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const onAbort = () => {
      if (settled) return;
      settled = true;
      reject(new InterruptedBeforeStartError(what));
    };
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        if (settled) abandon(value);
        else {
          settled = true;
          resolve(value);
        }
      },
      (err: unknown) => {
        signal.removeEventListener('abort', onAbort);
        if (settled) return;
        settled = true;
        reject(err instanceof Error ? err : new Error(String(err)));
      },
    );
  });
}
