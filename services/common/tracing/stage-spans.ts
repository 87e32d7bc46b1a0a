/**
 * Spans for the steps inside a backend operation (`docker uid_pick`,
 * `docker container_start`, ...), children of the operation's own span
 * (services/executor/traced-backend.ts). Backends know nothing of tracing: the traced backend
 * runs each operation with its tracer in {@link withStageSpans}, and a step
 * wrapped in {@link stageSpan} finds it there (in tracing's one
 * AsyncLocalStorage, trace-scope.ts). Outside a traced operation (tracing
 * off, a warm pool filling) a step runs as it is, at the cost of one lookup.
 */
import { SPAN_ATTRIBUTES as A, type Tracing } from './tracing.js';
import { traceScopes } from './trace-scope.js';

/** Runs `fn` (a backend operation) so that the steps it wraps in {@link stageSpan} become spans of `tracing`. */
export function withStageSpans<T>(tracing: Tracing, backend: string, fn: () => Promise<T>): Promise<T> {
  return traceScopes.run({ span: traceScopes.getStore()?.span, stage: { tracing, backend } }, fn);
}

/**
 * Runs `fn` outside any traced operation: work it starts (timers, promises)
 * that outlives the operation, such as a warm pool's refill after a claim,
 * makes no spans in the operation's trace.
 */
export function outsideStageSpans<T>(fn: () => T): T {
  return traceScopes.getStore() === undefined ? fn() : traceScopes.exit(fn);
}

/** Runs one step of a backend operation as a span named `BACKEND step` when the operation is traced. */
export function stageSpan<T>(step: string, fn: () => Promise<T>): Promise<T> {
  const stage = traceScopes.getStore()?.stage;
  if (stage === undefined) return fn();
  return stage.tracing.span(`${stage.backend} ${step}`, { kind: 'internal', childOnly: true, attributes: { [A.backend]: stage.backend } }, () => fn());
}
