/**
 * A signal that aborts when any of its sources does, for one call that
 * knows when it ends: what AbortSignal.any does, at a fraction of its cost.
 *
 * Why not AbortSignal.any on the per-call path: on Node 20 each one costs
 * about 35 µs of CPU (weak references from every source to the new signal,
 * a finalization-registry entry, primordials-wrapped sets), and a warm
 * `terminal` call made six of them; a long-lived source (the server's
 * shutdown signal) keeps a weak reference per call until the garbage
 * collector clears it; and such a signal can be collected while a call still
 * waits on it (see services/client/session.ts). Here the sources hold plain
 * listeners, which {@link LinkedSignal.done} removes when the call ends.
 */

/** The linked signal and how to unlink it. */
export interface LinkedSignal {
  /** Aborted, with the first source's reason, once any source aborts (before `done`). */
  readonly signal: AbortSignal;
  /** Removes the listeners from the sources; the signal no longer follows them. Call it when the call ends. */
  done(): void;
}

const NOTHING = (): void => undefined;

/**
 * Links `sources` (undefined ones skipped). One source is returned as it is;
 * an already-aborted source gives an aborted signal at once.
 */
export function linkSignals(...sources: ReadonlyArray<AbortSignal | undefined>): LinkedSignal {
  const present = sources.filter((s): s is AbortSignal => s !== undefined);
  if (present.length === 1) return { signal: present[0]!, done: NOTHING };
  const controller = new AbortController();
  const aborted = present.find((s) => s.aborted);
  if (aborted !== undefined) {
    controller.abort(aborted.reason);
    return { signal: controller.signal, done: NOTHING };
  }
  if (present.length === 0) return { signal: controller.signal, done: NOTHING };
  const done = () => {
    for (const s of present) s.removeEventListener('abort', onAbort);
  };
  const onAbort = (event: Event): void => {
    done();
    controller.abort((event.target as AbortSignal).reason);
  };
  for (const s of present) s.addEventListener('abort', onAbort);
  return { signal: controller.signal, done };
}
