/**
 * OpenTelemetry traces, behind a seam that costs nothing when tracing is off:
 * this file imports no OpenTelemetry code (types only), and `startTracing`
 * (start-tracing.ts) loads the SDK (otel-tracing.ts) with a dynamic import
 * only when an exporter is configured. Off, it returns undefined and
 * callers install no middleware at all, so a call pays one `undefined` check.
 *
 * Attribute names follow the OpenTelemetry semantic conventions where they
 * have one (gen_ai tool execution, rpc, process, error), `berth.*` otherwise.
 */
import type { ClientMiddleware, ServerMiddleware } from 'nice-grpc';

/** Which process a tracer speaks for; it names the default `service.name`. */
export type TracingRole = 'serve' | 'dispatcher' | 'executor';

export type SpanAttributes = Readonly<Record<string, string | number | boolean>>;

/** Span attribute names Berth sets (docs/metrics-and-tracing.md lists them). */
export const SPAN_ATTRIBUTES = {
  operation: 'gen_ai.operation.name',
  toolName: 'gen_ai.tool.name',
  rpcSystem: 'rpc.system',
  rpcService: 'rpc.service',
  rpcMethod: 'rpc.method',
  rpcStatusCode: 'rpc.grpc.status_code',
  exitCode: 'process.exit.code',
  errorType: 'error.type',
  tenant: 'berth.tenant.id',
  task: 'berth.task.id',
  backend: 'berth.backend',
  outcome: 'berth.outcome',
  timedOut: 'berth.timed_out',
  interrupted: 'berth.interrupted',
} as const;

/** What a span's code may add while it runs. */
export interface SpanScope {
  setAttributes(attributes: SpanAttributes): void;
}

export interface SpanOptions {
  /** `server`: work done for a remote caller; `internal`: a step of such work. */
  readonly kind: 'server' | 'internal';
  readonly attributes: SpanAttributes;
  /**
   * Only as a child of the current span: without one (housekeeping such as
   * the idle reaper or a warm pool) `fn` runs untraced instead of starting a
   * trace of its own.
   */
  readonly childOnly?: boolean;
}

export interface Tracing {
  readonly serviceName: string;
  /** Whether spans may carry task ids (`tracing.task_ids`). */
  readonly includeTaskIds: boolean;
  /**
   * Dispatcher API server middleware: each call runs in the trace context
   * its metadata carries (W3C `traceparent` / `tracestate`), so the spans it
   * makes continue the client's trace. It makes no span itself.
   */
  readonly continueTrace: ServerMiddleware;
  /**
   * Executor API server middleware: a SERVER span per call that arrives
   * inside a trace (calls outside one, such as usage reports, stay
   * untraced). `inProcess`: the caller shares this process (`berth serve`),
   * so its own current span is the parent.
   */
  rpcServerSpans(options: { readonly inProcess: boolean; readonly attributes: SpanAttributes }): ServerMiddleware;
  /**
   * Client middleware for dispatcher → executor gRPC: a CLIENT span per
   * call made inside a trace, and its context sent as `traceparent`.
   */
  readonly rpcClientSpans: ClientMiddleware;
  /**
   * Runs `fn` in a new span, a child of the current one (or a root). A throw
   * marks the span failed, with the gRPC status name as `error.type`.
   */
  span<T>(name: string, options: SpanOptions, fn: (scope: SpanScope) => Promise<T>): Promise<T>;
  /** Adds attributes to the current span, if any. */
  annotate(attributes: SpanAttributes): void;
  /** Exports what is still buffered (bounded wait), then stops. */
  shutdown(): Promise<void>;
}
