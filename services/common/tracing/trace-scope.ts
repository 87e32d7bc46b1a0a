/**
 * The one AsyncLocalStorage tracing keeps: what a piece of asynchronous work
 * runs under, the current span (of whichever tracer made it) and the backend
 * operation whose steps become spans (stage-spans.ts). One store, not one
 * per concern: on Node 20 every enabled AsyncLocalStorage costs something on
 * every promise made, traced or not.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { Tracing } from './tracing.js';

/** A span context as the store holds it; `owner` tells one tracer's spans from another's. */
export interface ScopedSpan {
  readonly owner: object;
}

export interface TraceScope {
  readonly span?: ScopedSpan | undefined;
  /** A traced backend operation: its steps are spans of `tracing` named after `backend`. */
  readonly stage?: { readonly tracing: Tracing; readonly backend: string } | undefined;
}

export const traceScopes = new AsyncLocalStorage<TraceScope>();
